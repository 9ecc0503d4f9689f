"""Real storage servers for the tests: Azurite (Azure Blob) and moto's S3 server.

Each is started on a free port in its own data folder and killed with SIGKILL
at the end (Azurite ignores SIGTERM). Neither is mocked: the code under test
talks HTTP to them exactly as it would to Azure or S3.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from phalanx.jobs.walls import DEFAULT_FIRST_UID
from phalanx.launch.ports import free_port

REPO = Path(__file__).resolve().parents[1]
_WORKER_UIDS = 4096
"""Job accounts per pytest-xdist worker (see :func:`_worker_job_uids`)."""
# Azurite's documented development account; public, not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    # A bound against a hang, not a speed check: a busy machine takes a while to start one.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@dataclass
class Azurite:
    """A running Azurite Blob service."""

    proc: subprocess.Popen[bytes]
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.endpoint};"
        )

    def container(self, name: str, *, public: bool = False) -> None:
        """Create a container (``public``: anonymous read of its blobs)."""
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.connection_string)
        client = service.get_container_client(name)
        if not client.exists():
            client.create_container(public_access="container" if public else None)

    def upload(self, container: str, files: dict[str, bytes]) -> None:
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.connection_string)
        for name, data in files.items():
            service.get_blob_client(container, name).upload_blob(data, overwrite=True)

    def sas(self, container: str, permission: str = "rl") -> str:
        """A container SAS token with ``permission`` (r, w, l, d, …), valid for an hour."""
        import datetime as dt

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        return generate_container_sas(
            AZURITE_ACCOUNT,
            container,
            account_key=AZURITE_KEY,
            permission=ContainerSasPermissions.from_string(permission),
            expiry=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1),
        )


def start_azurite(data_dir: Path) -> Azurite:
    exe = os.environ.get("PHALANX_AZURITE") or str(
        REPO / ".tools" / "node_modules" / ".bin" / "azurite-blob"
    )
    if not Path(exe).exists():
        raise RuntimeError(f"Azurite not found at {exe}: run `make test`, which installs it")
    port = free_port()
    proc = subprocess.Popen(
        [
            exe, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data_dir),
            "--silent", "--skipApiVersionCheck", "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_port(port, proc, "Azurite")
    except BaseException:
        _kill(proc)
        raise
    return Azurite(proc, port)


@dataclass
class S3Server:
    """A running moto S3 server."""

    proc: subprocess.Popen[bytes]
    port: int
    key: str = "testing-key-id"
    secret: str = "testing-secret"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bucket(self, name: str, files: dict[str, bytes] | None = None) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(key=self.key, secret=self.secret, endpoint_url=self.endpoint)
        if not fs.exists(name):
            fs.mkdir(name)
        for path, data in (files or {}).items():
            fs.pipe(f"{name}/{path}", data)


def start_s3() -> S3Server:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_port(port, proc, "moto S3 server")
    except BaseException:
        _kill(proc)
        raise
    return S3Server(proc, port)


def stop(server: Azurite | S3Server) -> None:
    _kill(server.proc)


@dataclass
class PhalanxServer:
    """A ``phalanx server start`` process serving one workspace."""

    proc: subprocess.Popen[bytes]
    port: int
    home: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_phalanx_server(
    home: Path,
    env: dict[str, str],
    *args: str,
    port: int | None = None,
    python: str | Path = sys.executable,
) -> PhalanxServer:
    """Start a phalanx server on ``home`` (its own session) and wait until it answers.

    As root it walls its jobs off: their accounts reach the workspace (see
    jobpython.workspace_home) and run ``python``, wherever it lies, through a view
    the server makes (:mod:`phalanx.jobs.pythonview`)."""
    port = port or free_port()
    args = (*args, *_worker_job_uids(args))
    log = home.parent / f"server-{port}.log"
    server_env = {k: v for k, v in env.items() if k not in ("PHALANX_SERVER", "PHALANX_TOKEN")}
    server_env["PHALANX_HOME"] = str(home)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [python, "-m", "phalanx.cli.main", "server", "start",
             "--port", str(port), *args],
            env=server_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_port(port, proc, "phalanx server")
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}: {log.read_text()}") from None
    return PhalanxServer(proc, port, home, log)


def _worker_job_uids(args: tuple[str, ...]) -> tuple[str, ...]:
    """Under pytest-xdist, each worker's servers take their jobs' accounts from a range of
    their own inside the default one: a test that checks nothing runs as its job's uid once
    the job is gone never sees another worker's job that took the uid it freed."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or "--job-uids" in args:
        return ()
    first = DEFAULT_FIRST_UID + (int(worker[2:]) + 1) * _WORKER_UIDS
    return ("--job-uids", f"{first}-{first + _WORKER_UIDS - 1}")


def serving_processes(server: PhalanxServer) -> list[psutil.Process]:
    """The worker processes uvicorn started for the server (none when it runs one)."""
    try:
        children = psutil.Process(server.proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def kill_phalanx_server(server: PhalanxServer) -> None:
    """SIGKILL, as a crash or an OOM kill would: jobs it started run on.

    Returns once its serving processes, which end with it, are gone too, so the
    port is free for a server started next.
    """
    workers = serving_processes(server)
    if server.proc.poll() is None:
        os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)
    _, alive = psutil.wait_procs(workers, timeout=15)
    assert not alive, f"serving processes outlived the killed server: {alive}"
