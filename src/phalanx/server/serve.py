"""Run the server: check the settings, keep the scheduler alive, serve under uvicorn.

The server is one or more serving processes (uvicorn's ``--workers``) on one
listening socket. With more than one, uvicorn's parent process only watches
them; each serving process builds its application in :func:`serving_app`,
keeps the workspace's scheduler running and collects the supervisors it
started. A serving process ends with its parent (``PR_SET_PDEATHSIG``), so a
server killed with SIGKILL leaves nothing behind that holds its port; the
jobs' supervisors and the scheduler are not its children in that sense (own
sessions, no death signal) and keep running.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.server.settings import ServerSettings
from phalanx.service.access import DEFAULT_MAX_QUEUED
from phalanx.workspace import Workspace
from phalanx.workspace.layout import HOME_ENV

if TYPE_CHECKING:
    from fastapi import FastAPI

    from phalanx.jobs.walls import WallSettings

log = logging.getLogger("phalanx.server")
# How often the server makes sure the scheduler runs while jobs are not over.
KEEP_EVERY_S = 5.0
# How the parent hands its settings to the serving processes it spawns.
SETTINGS_ENV = "PHALANX_SERVER_SETTINGS"
MAX_WORKERS = 64


def default_workers() -> int:
    """Serving processes when ``--workers`` is not given: one per core, at most four.

    A request's Python runs under one process's GIL, so one process uses one core;
    more than four rarely pays on a server whose real work is in its jobs.
    """
    return max(1, min(4, os.cpu_count() or 1))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_auth(host: str, auth: bool | None, ws: Workspace) -> bool:
    """Whether the server asks for tokens: always, unless it listens on loopback only.

    Raises:
        PhalanxError: ``--no-auth`` on a non-loopback address, or auth with no token yet.
    """
    from phalanx.workspace.tokens import list_tokens

    if auth is None:
        auth = not is_loopback(host)
    if not auth and not is_loopback(host):
        raise PhalanxError(
            f"refusing to serve {host} without auth: anyone who reaches it could run "
            "commands; drop --no-auth (clients then need a token) or use --host 127.0.0.1"
        )
    if auth and not list_tokens(ws):
        raise PhalanxError(
            "the server asks for API tokens but has none; create one first: "
            "phalanx server token create --user NAME"
        )
    return auth


def check_roots(roots: tuple[Path, ...]) -> tuple[Path, ...]:
    """The ``--datastore-root`` folders, resolved (links followed once, here).

    Raises:
        PhalanxError: one is not an existing folder, or is ``/``.
    """
    resolved = []
    for root in roots:
        folder = root.expanduser().resolve()
        if not folder.is_dir():
            raise PhalanxError(f"--datastore-root {root}: no such folder; create it first")
        if folder == Path(folder.anchor):
            raise PhalanxError(
                f"--datastore-root {root}: the whole file system would be shared "
                "(the server's secrets and database included); name a data folder"
            )
        resolved.append(folder)
    return tuple(resolved)


def _keep_scheduler(home: Path) -> None:
    """While any job is not over, make sure the workspace's scheduler runs.

    This is also how a restarted server finds its jobs again: the scheduler
    notices supervisors that died with it and requeues their jobs.
    """
    from phalanx.scheduler.process import ensure_running

    ws = Workspace(home)
    while True:
        _reap_children()
        try:
            if ws.any_job_not_over():
                ensure_running(ws.home, ws.child_env())
        except DatabaseUnavailable:
            pass  # requests answer 503 meanwhile; supervisors and the scheduler wait it out
        except Exception:  # the next round tries again; the server keeps serving
            log.exception("could not check on the scheduler")
        time.sleep(KEEP_EVERY_S)


def _reap_children() -> None:
    """Collect the exit status of supervisors (and schedulers) this process started.

    Nothing waits for them (they are meant to outlive the server), so without
    this each finished one would stay a zombie process. They were started with
    ``subprocess.Popen`` and the object dropped while they ran, which puts them
    on the list ``subprocess._cleanup`` reaps by pid. ``os.waitpid(-1)`` would
    also take the exit status of a command a request thread is waiting for.
    """
    cleanup = getattr(subprocess, "_cleanup", None)
    if cleanup is not None:
        cleanup()


def check_port(host: str, port: int) -> None:
    """Fail with one line, before anything is printed, if ``host:port`` is taken.

    Raises:
        PhalanxError: the address is in use or not this machine's.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PhalanxError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port"
            ) from None


def serve(
    *,
    home: Path,
    host: str,
    port: int,
    auth: bool | None,
    max_upload: int,
    datastore_roots: tuple[Path, ...] = (),
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    workers: int = 1,
    studio_only: bool = False,
    trust_jobs: bool = False,
    job_uids: str | None = None,
    max_queued_per_user: int | None = DEFAULT_MAX_QUEUED,
) -> None:
    """Serve the workspace at ``home`` until interrupted, in ``workers`` processes
    (``studio_only``: announced as ``phalanx studio``, the page to open).

    Args:
        trust_jobs: Run jobs as the server's account (no walls: :mod:`phalanx.jobs.walls`).
        job_uids: ``START-END``, the uids walled-off jobs get (a default range otherwise).
        max_queued_per_user: The most jobs one user may have waiting (``None``: no bound).

    Raises:
        PhalanxError: refused settings (see :func:`check_auth`), walls that cannot be
            built (:func:`phalanx.jobs.walls.plan`), half a TLS pair, or a worker count out
            of range.
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise PhalanxError(f"--workers must be between 1 and {MAX_WORKERS}, not {workers}")
    if (tls_cert is None) != (tls_key is None):
        raise PhalanxError("give both --tls-cert and --tls-key, or neither")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            raise PhalanxError(f"TLS file {path} not found; check --tls-cert/--tls-key")
    # Supervisors and the scheduler started from here find the same workspace.
    os.environ[HOME_ENV] = str(home)
    check_port(host, port)
    roots = check_roots(datastore_roots)
    ws = Workspace(home)
    settings = ServerSettings(
        home=ws.home,
        auth=check_auth(host, auth, ws),
        max_upload=max_upload,
        datastore_roots=roots,
        max_queued_per_user=max_queued_per_user,
    )
    ws.close()
    walls: WallSettings | None = None
    if not studio_only:
        from phalanx.jobs import walls as job_walls

        walls = job_walls.plan(
            settings.home, auth=settings.auth, trust_jobs=trust_jobs, uids=job_uids
        )
        job_walls.write_settings(settings.home, walls)
        if walls.enabled:
            job_walls.harden(settings.home)
    os.environ[SETTINGS_ENV] = json.dumps(
        {
            "home": str(settings.home),
            "auth": settings.auth,
            "max_upload": settings.max_upload,
            "datastore_roots": [str(r) for r in settings.datastore_roots],
            "max_queued_per_user": settings.max_queued_per_user,
        }
    )
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    if studio_only:
        print(
            f"phalanx studio: open {scheme}://{shown}:{port}/ "
            f"(workspace {settings.home}; this machine only, Ctrl-C stops it)",
            flush=True,
        )
    else:
        print(
            f"phalanx server: workspace {settings.home} on {scheme}://{shown}:{port}/api/v1, "
            f"studio at {scheme}://{shown}:{port}/ "
            f"({'tokens required' if settings.auth else 'no auth: loopback only'}; "
            f"{workers} serving process{'es' if workers > 1 else ''}; "
            f"{_jobs_run_as(walls)})",
            flush=True,
        )
    from phalanx.studio.running import announced

    # `job show` and the SDK link a job's page only while a studio serves it.
    with announced(settings.home, port) if studio_only else contextlib.nullcontext():
        _run(host, port, workers, tls_cert, tls_key, proxy_headers=settings.auth)


def _run(
    host: str,
    port: int,
    workers: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    *,
    proxy_headers: bool,
) -> None:
    import uvicorn

    uvicorn.run(
        f"{__name__}:serving_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level="warning",
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        timeout_graceful_shutdown=5,
        # Without tokens no proxy stands in front (loopback only), and a request's peer must
        # be the real one: a walled-off job is refused by it (server/peers.py), and a
        # forwarded-for header from loopback would otherwise be believed.
        proxy_headers=proxy_headers,
    )


def _jobs_run_as(walls: WallSettings | None) -> str:
    if walls is not None and walls.enabled:
        last = walls.first_uid + walls.count - 1
        return f"jobs walled off, each as a uid of {walls.first_uid}-{last}"
    return "jobs run as this account"


def serving_app() -> FastAPI:
    """The application of one serving process; uvicorn calls this once in each.

    It reads the settings :func:`serve` left in the environment (and removes them,
    so supervisors started from here do not carry them), ties the process's life
    to uvicorn's parent when there is one, and starts the scheduler keeper.
    """
    from phalanx.server.app import create_app

    raw = os.environ.pop(SETTINGS_ENV, None)
    if raw is None:
        raise RuntimeError(f"{SETTINGS_ENV} is not set: start the server with serve()")
    values = json.loads(raw)
    settings = ServerSettings(
        home=Path(values["home"]),
        auth=bool(values["auth"]),
        max_upload=int(values["max_upload"]),
        datastore_roots=tuple(Path(r) for r in values.get("datastore_roots", ())),
        max_queued_per_user=values.get("max_queued_per_user", DEFAULT_MAX_QUEUED),
    )
    _end_with_parent()
    threading.Thread(
        target=_keep_scheduler, args=(settings.home,), name="keep-scheduler", daemon=True
    ).start()
    return create_app(settings)


def _end_with_parent() -> None:
    """In a worker uvicorn spawned: end when the parent does, however it ended."""
    from phalanx.prctl import end_with_parent

    parent = multiprocessing.parent_process()
    if parent is None:
        return  # the only serving process: uvicorn runs it in the parent itself
    end_with_parent(signal.SIGTERM)
    if os.getppid() != parent.pid:  # the parent died before the line above
        os._exit(1)
