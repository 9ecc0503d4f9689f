"""Waits that a job's preparation can be canceled out of: another job's build of the
same content (a file lock), and a build's own process.

Builds of one content (an environment, an image) are serialised across jobs and
processes with a file lock; a job waiting for another's build, or running its own,
must still stop at once when it is canceled. Both waits ask ``canceled()`` every
:data:`POLL_S` seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from phalanx.errors import PreparationCanceled

POLL_S = 0.5


@contextmanager
def held(
    path: Path,
    canceled: Callable[[], bool],
    waiting_for: str,
    waits: Callable[[], None] = lambda: None,
) -> Iterator[None]:
    """Hold the file lock at ``path`` for the ``with`` block, waiting as long as another
    process holds it.

    Args:
        canceled: Asked every :data:`POLL_S` seconds while waiting.
        waiting_for: What the lock guards, for the message (``the image build``).
        waits: Called once, when the lock is found held by another process (the
            caller says whose work it waits for).

    Raises:
        PreparationCanceled: ``canceled()`` answered ``True`` while waiting.
    """
    lock = FileLock(str(path))
    told = False
    while True:
        try:
            lock.acquire(timeout=POLL_S)
            break
        except Timeout:
            if not told:
                waits()
                told = True
            if canceled():
                raise PreparationCanceled(f"canceled while waiting for {waiting_for}") from None
    try:
        yield
    finally:
        lock.release()


def run_logged(
    argv: list[str],
    log_path: Path,
    canceled: Callable[[], bool],
    doing: str,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    popen: Mapping[str, Any] | None = None,
) -> int:
    """Run ``argv`` to its end, its command line and output appended to ``log_path``.

    Args:
        canceled: Asked every :data:`POLL_S` seconds; ``True`` kills the command and
            everything it started (its own session).
        doing: What the command does, for the message (``the image build``).
        popen: More ``subprocess.Popen`` arguments (the account it runs as).

    Returns:
        Its exit code.

    Raises:
        PreparationCanceled: ``canceled()`` answered ``True`` before it ended.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
            env=None if env is None else dict(env), start_new_session=True, **(popen or {}),
        )  # fmt: skip
        while True:
            try:
                return proc.wait(POLL_S)
            except subprocess.TimeoutExpired:
                if canceled():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise PreparationCanceled(f"canceled during {doing}") from None
