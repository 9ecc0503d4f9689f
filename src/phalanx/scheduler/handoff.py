"""The environment a job's supervisor starts in, handed to the scheduler and kept in memory.

A queued job costs no process: the scheduler starts its supervisor when it gives
the job its devices. That supervisor still runs in the environment of the
command that created the job, as a job started here always has: the variables a
datastore's ``--credential-env`` names, the ranks' ``PATH``, the tokens of the
user's own tools. phalanx never writes an environment down (it holds secrets), so
``job create`` hands it to the running scheduler over a Unix stream socket
(:func:`hand_over`) and the scheduler keeps it in memory (:class:`Desk`), by job,
until the job ends; a supervisor started again for the job (its first was lost)
gets it too.

A job runs in the scheduler's own environment instead when its submitter could
not hand one over (no scheduler listened: the submitter then starts one, which
carries the submitter's environment anyway) or when the scheduler that held it
was restarted before the job started; the supervisor's log says so.

The socket is abstract (no file), so every process of the machine could connect:
only one of the scheduler's own user may hand an environment over
(``SO_PEERCRED``), and one message is at most :data:`MAX_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from phalanx.scheduler.bell import scheduler_desk

log = logging.getLogger("phalanx.scheduler")

MAX_BYTES = 1 << 20
"""The most one handed environment may take (a shell's is a few KB)."""
MAX_JOBS = 20_000
"""The most environments kept at once (one per job not over)."""
_TIMEOUT_S = 2.0
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def hand_over(
    home: Path, job: str, created_at: float, env: Mapping[str, str], *, wait_s: float = 0.0
) -> bool:
    """Give the workspace's scheduler the environment ``job``'s supervisor is to start in.

    Args:
        created_at: The job record's ``created_at``: the environment serves that job
            only, never a later one of the same name.
        wait_s: How long to try again while nobody listens (a scheduler starting).

    Returns:
        Whether the scheduler took it.
    """
    message = json.dumps({"job": job, "created_at": created_at, "env": dict(env)}).encode()
    if len(message) > MAX_BYTES:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(_TIMEOUT_S)
                sock.connect(scheduler_desk(home))
                sock.sendall(message)
                sock.shutdown(socket.SHUT_WR)
                return sock.recv(1) == b"1"
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


class Desk:
    """The scheduler's side: takes environments from a thread of its own, keeps them.

    Raises:
        OSError: another scheduler of the workspace listens already.
    """

    def __init__(self, home: Path) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(scheduler_desk(home))
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self.since = time.time()
        """When it began to listen: a job created earlier had nobody to hand it to."""
        self._envs: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="handoff", daemon=True)

    def start(self) -> Desk:
        self._thread.start()
        return self

    def env_for(self, job: str, created_at: float) -> dict[str, str] | None:
        """The environment handed over for this job (``None``: none was)."""
        with self._lock:
            kept = self._envs.get(job)
        if kept is None or kept[0] != created_at:
            return None
        return dict(kept[1])

    def jobs(self) -> list[str]:
        """The jobs whose environment is kept."""
        with self._lock:
            return list(self._envs)

    def drop(self, job: str) -> None:
        """Forget a job's environment (it ended)."""
        with self._lock:
            self._envs.pop(job, None)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    self._take(conn)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    # One submitter's trouble (it went away, sent garbage) is its own:
                    # it learns that nothing was taken.
                    log.warning("an environment handed over was not taken: %s", type(exc).__name__)

    def _take(self, conn: socket.socket) -> None:
        conn.settimeout(_TIMEOUT_S)
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
        _, uid, _ = _CREDENTIALS.unpack(raw)
        if uid != os.geteuid():
            return  # another account's process: it gets no say in what jobs run with
        chunks: list[bytes] = []
        size = 0
        while chunk := conn.recv(65536):
            size += len(chunk)
            if size > MAX_BYTES:
                return
            chunks.append(chunk)
        data = json.loads(b"".join(chunks))
        job, created_at, env = str(data["job"]), float(data["created_at"]), data["env"]
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("not an environment")
        with self._lock:
            if job not in self._envs and len(self._envs) >= MAX_JOBS:
                return
            self._envs[job] = (created_at, env)
        conn.sendall(b"1")
