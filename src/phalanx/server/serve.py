"""Run the server: check the settings, keep the scheduler alive, serve under uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.server.settings import ServerSettings
from phalanx.workspace import JobStatus, Workspace
from phalanx.workspace.layout import HOME_ENV

log = logging.getLogger("phalanx.server")
# How often the server makes sure the scheduler runs while jobs are not over.
KEEP_EVERY_S = 5.0


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


def _keep_scheduler(home: Path, stop: threading.Event) -> None:
    """While any job is not over, make sure the workspace's scheduler runs.

    This is also how a restarted server finds its jobs again: the scheduler
    notices supervisors that died with it and requeues their jobs.
    """
    from phalanx.scheduler.process import ensure_running

    ws = Workspace(home)
    live = {f"s{k}": s.value for k, s in enumerate(JobStatus) if not s.is_terminal}
    marks = ",".join(f":{key}" for key in live)
    while True:
        _reap_children()
        try:
            if ws.query(f"SELECT 1 FROM jobs WHERE status IN ({marks}) LIMIT 1", live):
                ensure_running(ws.home, ws.child_env())
        except Exception:  # the next round tries again; the server keeps serving
            log.exception("could not check on the scheduler")
        if stop.wait(KEEP_EVERY_S):
            return


def _reap_children() -> None:
    """Collect the exit status of supervisors (and schedulers) this server started.

    Nothing here waits for them (they are meant to outlive the server), so
    without this each finished one would stay a zombie process.
    """
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


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
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    studio_only: bool = False,
) -> None:
    """Serve the workspace at ``home`` until interrupted (``studio_only``: announced as
    ``phalanx studio``, the page to open, rather than as a team server).

    Raises:
        PhalanxError: refused settings (see :func:`check_auth`), or half a TLS pair.
    """
    import uvicorn

    from phalanx.server.app import create_app

    if (tls_cert is None) != (tls_key is None):
        raise PhalanxError("give both --tls-cert and --tls-key, or neither")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            raise PhalanxError(f"TLS file {path} not found; check --tls-cert/--tls-key")
    # Supervisors and the scheduler started from here find the same workspace.
    os.environ[HOME_ENV] = str(home)
    check_port(host, port)
    ws = Workspace(home)
    settings = ServerSettings(home=ws.home, auth=check_auth(host, auth, ws), max_upload=max_upload)
    stop = threading.Event()
    keeper = threading.Thread(
        target=_keep_scheduler, args=(ws.home, stop), name="keep-scheduler", daemon=True
    )
    keeper.start()
    scheme = "https" if tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    if studio_only:
        print(
            f"phalanx studio: open {scheme}://{shown}:{port}/ "
            f"(workspace {ws.home}; this machine only, Ctrl-C stops it)",
            flush=True,
        )
    else:
        print(
            f"phalanx server: workspace {ws.home} on {scheme}://{shown}:{port}/api/v1, "
            f"studio at {scheme}://{shown}:{port}/ "
            f"({'tokens required' if settings.auth else 'no auth: loopback only'})",
            flush=True,
        )
    try:
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_level="warning",
            ssl_certfile=str(tls_cert) if tls_cert else None,
            ssl_keyfile=str(tls_key) if tls_key else None,
            timeout_graceful_shutdown=5,
        )
    finally:
        stop.set()
