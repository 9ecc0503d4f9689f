"""Find and stop every process of a job on this node.

Each process a job starts carries ``PHALANX_JOB_DIR`` (and ``PHALANX_ATTEMPT``)
in its environment, inherited down the whole tree, so the job's processes are
found even after their parents died and they were re-parented to init.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

import psutil


def job_processes(job_dir: str, attempt: int | None = None) -> list[psutil.Process]:
    """Live processes on this node whose environment marks them as the job's."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("PHALANX_JOB_DIR") != job_dir:
            continue
        if attempt is not None and env.get("PHALANX_ATTEMPT") != str(attempt):
            continue
        found.append(proc)
    return found


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            pass
    return out


def kill_all(procs: Iterable[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL whatever is left.

    Returns:
        The processes that were still alive when SIGKILL was sent.
    """
    procs = _alive(procs)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.05)
        procs = _alive(procs)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return procs
