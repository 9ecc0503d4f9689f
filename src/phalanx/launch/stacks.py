"""Asking a job's Python processes for their stacks (a hang's evidence).

Used by the hang watchdog on the supervisor's machine and by each node's agent
on its own node: both ask the processes of one attempt that run here.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil


def dump_stacks(job_dir: str, attempt: int) -> int:
    """Ask every Python process of the attempt's commands for its stacks.

    Only processes started under the worker hook (they carry
    ``PHALANX_ERROR_FILE``) get SIGUSR2: for any other process the signal's
    default action is to exit.

    Returns:
        How many processes were asked.
    """
    hooked = [p for p in psutil.process_iter() if _hooked_python(p, job_dir, attempt)]
    pids = {p.pid for p in hooked}
    asked = 0
    for proc in hooked:
        # A rank's main process only: its children (DataLoader workers) would
        # write their stacks into the same log and hide the one that matters.
        with contextlib.suppress(psutil.Error, OSError):
            if proc.ppid() in pids:
                continue
            proc.send_signal(signal.SIGUSR2)
            asked += 1
    return asked


def _hooked_python(proc: psutil.Process, job_dir: str, attempt: int) -> bool:
    try:
        env = proc.environ()
        return (
            env.get("PHALANX_JOB_DIR") == job_dir
            and env.get("PHALANX_ATTEMPT") == str(attempt)
            and "PHALANX_ERROR_FILE" in env
            and "python" in os.path.basename(proc.exe())
        )
    except (psutil.Error, OSError):
        return False
