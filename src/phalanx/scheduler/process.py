"""The workspace's scheduler process: found by its lock, started when missing, rung.

One scheduler runs per workspace: it holds an exclusive ``flock`` on
``$PHALANX_HOME/scheduler.lock`` for as long as it lives, so the kernel frees
the lock the moment it dies, however it dies. Nobody starts it by hand:
``job create``, the job commands that read state, every supervisor (once a
few seconds) and a guard whose supervisor died call :func:`ensure_running`,
which starts one when the lock is free. It ends by itself once the workspace
has had nothing queued or running for a while.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from phalanx.scheduler.bell import ring, scheduler_bell

LOCK_FILE = "scheduler.lock"
LOG_FILE = "scheduler.log"


def is_running(home: Path) -> bool:
    """Whether a scheduler holds the workspace's lock now."""
    path = Path(home) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def ensure_running(home: Path, env: Mapping[str, str] | None = None) -> None:
    """Start the workspace's scheduler unless one runs; then ring it.

    Two callers racing both start one; the second finds the lock taken and exits.

    Args:
        env: What the scheduler needs to find the workspace besides ``PHALANX_HOME``
            (``Workspace.child_env()``: its database when that is not the default).
    """
    home = Path(home)
    if not is_running(home):
        _start(home, env or {})
    poke(home)


def is_supervisor(pid: int, job: str) -> bool:
    """Whether ``pid`` is a live supervisor of ``job`` (by its command line: a reused
    pid does not count)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
        ours = "phalanx.jobs.supervisor" in cmdline and job in cmdline
        return ours and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def poke(home: Path) -> None:
    """Have the scheduler look at the queue now (instead of at its next round)."""
    ring(scheduler_bell(Path(home)))


def _start(home: Path, extra: Mapping[str, str]) -> None:
    # The scheduler belongs to no job: no job's markers (the sweep of a job must never
    # take it), and whatever settings the user gave phalanx.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _JOB_MARKERS and k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
    }
    env.update(extra)
    env["PHALANX_HOME"] = str(home)
    with contextlib.suppress(OSError), open(home / LOG_FILE, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "phalanx.jobs.schedulerd"],
            env=env,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


_JOB_MARKERS = frozenset(
    {
        "PHALANX_JOB_DIR",
        "PHALANX_JOB_NAME",
        "PHALANX_ATTEMPT",
        "PHALANX_CHECKPOINT_DIR",
        "PHALANX_OUTPUTS_DIR",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
    }
)
