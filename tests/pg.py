"""A real PostgreSQL for the tests, from Debian's ``postgresql`` package.

One server per test session: ``initdb`` in a temporary folder, started with
``pg_ctl`` on a free port (TCP on 127.0.0.1 with a password, its Unix socket in
that folder), stopped and removed at the end. PostgreSQL refuses to run as
root, so under root the folder belongs to the ``postgres`` user and the server
runs as it. Durability is off (``fsync``): the data lives as long as the session.

A test that needs a database gets one of its own (``CREATE DATABASE``, cheap)
and loses it after (``DROP DATABASE … WITH (FORCE)``, which also ends the
connections a test's processes left behind). A test that stops the server
(:func:`pause`, :func:`resume`: a database that blinks) starts one of its own
(:func:`own_server`), so no other test's database goes away with it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from phalanx.launch.ports import free_port

USER = "phalanx"


@dataclass
class Postgres:
    """A running PostgreSQL server."""

    root: Path
    bin: Path
    port: int
    password: str
    options: str
    """``postgres`` settings it runs with (again after :func:`resume`)."""

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        secret = quote(self.password if password is None else password, safe="")
        return f"postgresql://{USER}:{secret}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; its URL."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        self.sql(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def sql(self, statement: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement outside a transaction (as CREATE DATABASE needs)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=self.password,
            dbname=database,
            autocommit=True,
        ) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []


def _bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_major)
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed: the tests run the store against a real one "
            "(apt-get install postgresql; `make test` does it where it is root)"
        )
    return Path(found[-1]).parent


def _major(path: str) -> int:
    version = Path(path).parts[-3]
    return int(version) if version.isdigit() else 0


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start() -> Postgres:
    """Start a server in a new temporary folder; raises with its log if it does not start."""
    bindir = _bin()
    root = Path(tempfile.mkdtemp(prefix="phalanx-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    password = secrets.token_urlsafe(16) + "@:/%"  # characters a URL must quote
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(pwfile, "postgres", "postgres")
    data = root / "data"
    _run(
        [str(bindir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
         "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C",
         "--no-sync"],
        root,
    )  # fmt: skip
    pwfile.unlink()
    port = free_port()
    options = " ".join(
        f"-c {setting}"
        for setting in (
            f"port={port}",
            "listen_addresses=127.0.0.1",
            f"unix_socket_directories={root}",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
        )
    )
    server = Postgres(root=root, bin=bindir, port=port, password=password, options=options)
    resume(server)
    return server


def pause(server: Postgres) -> None:
    """Stop the server, keeping its data (``pg_ctl stop -m fast``: every connection is
    ended, as a restart or a failover does); :func:`resume` starts it again."""
    _run(
        [str(server.bin / "pg_ctl"), "-D", str(server.root / "data"), "-m", "fast", "-w",
         "-t", "60", "stop"],
        server.root,
    )  # fmt: skip


def resume(server: Postgres) -> None:
    """Start the server (again) on its port, waiting until it accepts connections."""
    _run(
        [str(server.bin / "pg_ctl"), "-D", str(server.root / "data"), "-l",
         str(server.root / "server.log"), "-w", "-t", "60", "-o", server.options, "start"],
        server.root,
    )  # fmt: skip


@contextlib.contextmanager
def own_server() -> Iterator[Postgres]:
    """A server for one test alone (one it may stop), removed after."""
    server = start()
    try:
        yield server
    finally:
        stop(server)


def stop(server: Postgres) -> None:
    """Stop the server at once (unless a test left it paused) and remove its folder."""
    try:
        if not (server.root / "data" / "postmaster.pid").exists():
            return
        _run(
            [str(server.bin / "pg_ctl"), "-D", str(server.root / "data"), "-m", "immediate",
             "-w", "stop"],
            server.root,
        )  # fmt: skip
    finally:
        shutil.rmtree(server.root, ignore_errors=True)


def _run(cmd: list[str], root: Path) -> None:
    proc = subprocess.run(
        _as_server_user(cmd), cwd=root, capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        log = root / "server.log"
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise RuntimeError(
            f"{' '.join(cmd[:2])} … exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n{tail}"
        )
