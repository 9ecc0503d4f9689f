"""Doorbells: a byte on an abstract Unix socket says "look at the database now".

The scheduler rings a job's supervisor when it gives the job its devices, and
anything that frees devices or queues a job rings the scheduler, so nobody
polls fast. A bell nobody listens at is simply not heard: every waiter also
looks at the database every few seconds, so a lost ring costs time, never a job.
Abstract socket names (Linux) need no file and vanish with their process.
"""

from __future__ import annotations

import contextlib
import hashlib
import select
import socket
from pathlib import Path
from types import TracebackType


def _address(home: Path, who: str) -> str:
    digest = hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:20]
    return f"\0phalanx-{digest}-{who}"


def scheduler_bell(home: Path) -> str:
    return _address(home, "scheduler")


def scheduler_desk(home: Path) -> str:
    """Where a job's submitter hands the scheduler its environment
    (:mod:`phalanx.scheduler.handoff`): a stream socket, not a bell."""
    return _address(home, "scheduler-desk")


def job_bell(home: Path, job: str) -> str:
    return _address(home, f"job-{job}")


def probe_bell(home: Path, target: str) -> str:
    """A Ray target's probe: the scheduler rings it when the queue wants other nodes."""
    return _address(home, f"probe-{hashlib.sha256(target.encode()).hexdigest()[:16]}")


def ring(address: str) -> None:
    """Ring ``address`` if someone listens there; never fails."""
    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        sock.setblocking(False)
        sock.sendto(b"!", address)


class Bell:
    """Listen at ``address``: :meth:`wait` returns when rung or after a timeout.

    Raises:
        OSError: someone else listens there already (``EADDRINUSE``).
    """

    def __init__(self, address: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.bind(address)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a ring; True if rung (every pending ring is taken)."""
        ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
        rung = False
        while ready:
            try:
                self._sock.recv(64)
                rung = True
            except BlockingIOError:
                break
        return rung

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Bell:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
