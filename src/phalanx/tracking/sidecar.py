"""The MLflow endpoint beside a node's ranks: ``python -m phalanx.tracking.sidecar``.

Whatever starts a node's launcher (the supervisor on this machine, a Ray node's
agent) starts one of these first, through :class:`Endpoint`, on a free port of
127.0.0.1, and gives the launcher :meth:`Endpoint.env`:

- ``MLFLOW_TRACKING_URI``: ``http://127.0.0.1:<port>/ranks/<rank>`` (the rank's
  wrapper adds its rank: the endpoint keeps rank 0's calls only);
- ``MLFLOW_TRACKING_TOKEN``: a secret made for this node and attempt; any other is
  refused;
- ``MLFLOW_RUN_ID``: the job's name, so ``mlflow.log_metric`` logs to the job's run;
- ``MLFLOW_EXPERIMENT_ID``: the id of the job's ``experiment_name``;
- ``MLFLOW_ENABLE_ASYNC_LOGGING=true``: the client queues each call and sends from a
  thread of its own, so a step never waits on the endpoint;
- ``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS=1``: what a second logged goes in one
  request (batches of up to 1,000 points), not a request a point;
- ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT=true``: no "View run" link to a page that
  is not there;
- ``MLFLOW_DISABLE_TELEMETRY=true``: no usage data sent from a training job;

and the rank's wrapper sets ``MLFLOW_REGISTRY_URI`` to the rank's tracking URI.

A job spec's own ``environment_variables`` win (an ``MLFLOW_TRACKING_URI`` of the
user's own MLflow server is left alone).

The endpoint writes into the node's job folder (:mod:`phalanx.tracking.runfiles`)
before it answers, so a point the client was told is logged is in the file. If
it dies, its owner starts it again on the same port within a second
(:meth:`Endpoint.ensure`); the client retries meanwhile (``MLFLOW_HTTP_REQUEST_*``,
minutes by default), so nothing already logged is lost. It runs as the job's
account where jobs are walled off, and carries the job's ``PHALANX_JOB_DIR`` and
``PHALANX_ATTEMPT``, so the attempt's sweep ends it like any process of the job.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from phalanx import prctl
from phalanx.tracking import artifacts
from phalanx.tracking.jobrun import JobRun, JobRunStore
from phalanx.tracking.protocol import TrackingError, dispatch, experiment_id

SECRET_ENV = "PHALANX_TRACKING_SECRET"
RUN_ENV = "PHALANX_TRACKING_RUN"
URL_ENV = "PHALANX_TRACKING_URL"
MAX_JSON = 16 << 20
BUFFER_S = "1"  # whole seconds: MLflow reads an int
_PATH = re.compile(r"/ranks/(\d{1,6})/api/2\.0/(mlflow|mlflow-artifacts/artifacts)(/.*)?")


class Endpoint:
    """One node's endpoint, as its owner sees it.

    Args:
        job_dir: The folder it writes into (the node's own on a Ray node).
        popen_kwargs: How to start it as the job's account (walled-off jobs).
    """

    def __init__(
        self,
        job_dir: Path,
        run: JobRun,
        attempt: int,
        *,
        popen_kwargs: dict[str, Any] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.job_dir, self.run, self.attempt = job_dir, run, attempt
        self.secret = secrets.token_urlsafe(32)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._popen_kwargs = popen_kwargs or {}
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self.restarts = 0

    def start(self) -> Endpoint:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "HOME")
        }
        env.update(
            {
                SECRET_ENV: self.secret,
                RUN_ENV: json.dumps(
                    {
                        **asdict(self.run),
                        "port": self.port,
                        "job_dir": str(self.job_dir),
                        "attempt": self.attempt,
                    }
                ),
                # The attempt's marks: its sweep finds and ends this process too.
                "PHALANX_JOB_DIR": str(self.job_dir),
                "PHALANX_ATTEMPT": str(self.attempt),
            }
        )
        with contextlib.ExitStack() as stack:
            log: Any = subprocess.DEVNULL
            if self._log_path is not None:
                log = stack.enter_context(open(self._log_path, "ab"))
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "phalanx.tracking.sidecar"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=prctl.end_with_parent,
                **self._popen_kwargs,
            )
        return self

    def env(self) -> dict[str, str]:
        """What the node's launcher adds to its ranks' environment (see the module)."""
        return {
            URL_ENV: self.url,
            "MLFLOW_TRACKING_URI": self.url,
            "MLFLOW_TRACKING_TOKEN": self.secret,
            "MLFLOW_RUN_ID": self.run.name,
            "MLFLOW_EXPERIMENT_ID": experiment_id(self.run.experiment),
            "MLFLOW_ENABLE_ASYNC_LOGGING": "true",
            # Without it the client sends each point in a request of its own; with it, what
            # was logged in the last second goes in batches of up to 1,000.
            "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": BUFFER_S,
            # The client's "View run at" links would lead to no page.
            "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
            # A training job on a self-hosted platform sends no usage data to MLflow's
            # makers (a spec's environment_variables may turn it back on).
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def ensure(self) -> bool:
        """Start it again if it died (same port, same secret); whether it had to be."""
        if self._stopped or self._proc is None or self._proc.poll() is None:
            return False
        self.restarts += 1
        self.start()
        return True

    def stop(self, grace_s: float = 2.0) -> None:
        self._stopped = True
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_RUN_VARIABLES = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID")
"""What names the endpoint's run: meaningless (the run id) or a secret to give away (the
token) on the MLflow server a spec names itself."""


def add_to(env: dict[str, str], endpoint: Endpoint, user_env: dict[str, str] | Any) -> None:
    """Give a launcher's environment the endpoint's variables, but those the job's spec
    sets itself; a spec naming its own ``MLFLOW_TRACKING_URI`` gets no run id, experiment
    id or token of the endpoint's (the client would resume a run its server never had,
    and send it this node's secret)."""
    elsewhere = "MLFLOW_TRACKING_URI" in user_env
    for key, value in endpoint.env().items():
        if key not in user_env and not (elsewhere and key in _RUN_VARIABLES):
            env[key] = value


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the process -----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, secret: str, run: JobRun, job_dir: Path, attempt: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.secret, self.run, self.job_dir, self.attempt = secret, run, job_dir, attempt
        self._stores: dict[int, JobRunStore] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        for store in self._stores.values():
            store.close()

    def store(self, rank: int) -> JobRunStore:
        with self._lock:
            if rank not in self._stores:
                self._stores[rank] = JobRunStore(
                    self.job_dir, self.run, attempt=self.attempt, rank=rank
                )
            return self._stores[rank]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a line per request would drown the node's log

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def _answer(self, method: str) -> None:
        url = urlsplit(self.path)
        if url.path == "/health":
            self._send(200, {"status": "OK"})
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.secret}".encode()):
            self._drain()
            self._send(401, {"error_code": "UNAUTHENTICATED",
                             "message": "a token this job's endpoint gave is needed"})  # fmt: skip
            return
        match = _PATH.fullmatch(url.path)
        if match is None:
            self._drain()
            self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"{url.path}"})
            return
        rank, api, rest = int(match[1]), match[2], (match[3] or "").lstrip("/")
        store = self.server.store(rank)
        query = dict(parse_qsl(url.query))
        try:
            if api == "mlflow":
                body = self._json() if method == "POST" else {}
                self._send(200, dispatch(method, rest, query, body, store))
            else:
                self._artifacts(method, rest, query, store)
        except TrackingError as exc:
            self._send(exc.status, exc.wire())
        except Exception as exc:  # the job's run must not hang on the endpoint's trouble
            print(f"phalanx: the MLflow endpoint failed on {method} {url.path}: {exc!r}",
                  file=sys.stderr, flush=True)  # fmt: skip
            self._send(500, {"error_code": "INTERNAL_ERROR", "message": str(exc)})

    def _artifacts(self, method: str, rest: str, query: dict[str, str], store: Any) -> None:
        if method == "GET" and not rest:
            self._send(200, artifacts.listing(self.server.job_dir, self.server.run.name,
                                              query.get("path", "")))  # fmt: skip
            return
        if method == "PUT":
            length = self._length()
            if not store.keeps:
                self._drain()
            else:
                artifacts.put(self.server.job_dir, self.server.run.name, rest, self.rfile, length)
            self._send(200, {})
            return
        if method == "GET":
            path = artifacts.file(self.server.job_dir, self.server.run.name, rest)
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                while chunk := f.read(1 << 20):
                    self.wfile.write(chunk)
            return
        raise TrackingError("ENDPOINT_NOT_FOUND", f"{method} artifacts/{rest}", 404)

    def _json(self) -> dict[str, Any]:
        length = self._length()
        if length > MAX_JSON:
            self._drain()
            raise TrackingError("INVALID_PARAMETER_VALUE", f"body over {MAX_JSON} bytes", 413)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            raise TrackingError("MALFORMED_REQUEST", "the body is not JSON", 400) from None
        if not isinstance(body, dict):
            raise TrackingError("MALFORMED_REQUEST", "the body is not a JSON object", 400)
        return body

    def _length(self) -> int:
        """The body's declared length.

        Raises:
            TrackingError: one that is no whole number (the connection is closed: where
                the body ends is unknown).
        """
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):
            self.close_connection = True
            raise TrackingError("MALFORMED_REQUEST", "Content-Length is not a whole number")
        return int(declared)

    def _drain(self) -> None:
        try:
            left = self._length()
        except TrackingError:
            return  # nothing to drain: the connection closes
        while left > 0 and (chunk := self.rfile.read(min(left, 1 << 20))):
            left -= len(chunk)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> int:
    secret = os.environ.pop(SECRET_ENV, "")
    spec = json.loads(os.environ.pop(RUN_ENV))
    run = JobRun(**{k: spec[k] for k in ("name", "experiment", "display_name", "user",
                                          "created_ms")})  # fmt: skip
    try:
        server = _Server(int(spec["port"]), secret, run, Path(spec["job_dir"]), spec["attempt"])
    except OSError as exc:
        print(f"phalanx: the MLflow endpoint cannot listen on port {spec['port']}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.5)
    server.server_close()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
