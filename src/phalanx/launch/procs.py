"""Find and stop every process of a job on this node.

Each process a job starts carries ``PHALANX_JOB_DIR`` (and ``PHALANX_ATTEMPT``)
in its environment, inherited down the whole tree, so the job's processes are
found even after their parents died and they were re-parented. The job's
supervisor is also a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``):
orphans of the job re-parent to it rather than to init, so a process that
cleared its environment is still found among the supervisor's descendants; and
so is its guard (:mod:`phalanx.jobs.guard`), which takes them in once the
supervisor is gone.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

_SWEEP_ROUNDS = 10


def _marker(proc: psutil.Process) -> tuple[str | None, str | None]:
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return None, None
    return env.get("PHALANX_JOB_DIR"), env.get("PHALANX_ATTEMPT")


# phalanx's own processes: a job's supervisor or guard (another job's, or one a job
# submitted), the workspace's scheduler or a cluster's probe. A supervisor may be their
# ancestor (it started the scheduler; a scheduler that died left its children to it),
# but neither they nor what runs under them are its job's.
_DAEMONS = frozenset(
    {
        "phalanx.jobs.supervisor",
        "phalanx.jobs.guard",
        "phalanx.jobs.schedulerd",
        "phalanx.kinds.ray.probe",
    }
)


def _is_daemon(proc: psutil.Process) -> bool:
    try:
        return not _DAEMONS.isdisjoint(proc.cmdline())
    except (psutil.Error, OSError):
        return False


# Helpers of the supervisor that outlive attempts (an input's FUSE mount): never swept.
_PROTECTED: set[int] = set()


def protect(pid: int) -> None:
    """Keep the supervisor's child ``pid`` (and what it starts) out of every sweep."""
    _PROTECTED.add(pid)


def _protected(proc: psutil.Process) -> bool:
    if proc.pid in _PROTECTED:
        return True
    # A protected helper's own children (fusermount3 of a FUSE mount) are protected too.
    with contextlib.suppress(psutil.Error):
        return any(parent.pid in _PROTECTED for parent in proc.parents())
    return False


def unprotect(pid: int) -> None:
    _PROTECTED.discard(pid)


def job_processes(
    job_dir: str,
    attempt: int | None = None,
    *,
    descendants: bool = False,
    uid: int | None = None,
) -> list[psutil.Process]:
    """Live processes on this node that belong to the job (or to one attempt).

    Args:
        job_dir: The job's folder, as in its processes' ``PHALANX_JOB_DIR``.
        attempt: Only this attempt's processes; every attempt's when ``None``.
        descendants: Also count this process's descendants that carry no other
            job's marker (the supervisor's view, as subreaper of the job).
        uid: The job's own account (walled off): every process running as it is the
            job's, marker or not (one attempt runs at a time).
    """
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        if proc.pid == me or (_PROTECTED and _protected(proc)):
            continue
        if uid is not None and _runs_as(proc, uid):
            found[proc.pid] = proc
            continue
        marker, proc_attempt = _marker(proc)
        if marker == job_dir and (attempt is None or proc_attempt == str(attempt)):
            found[proc.pid] = proc
    if descendants:
        for proc in _descendants(job_dir):
            found.setdefault(proc.pid, proc)
    return [p for p in found.values() if _alive(p)]


def _descendants(job_dir: str) -> list[psutil.Process]:
    """This process's descendants that are the job's: unmarked or marked with ``job_dir``.

    A branch is left whole where it stops being the job's: at one of phalanx's own
    processes (:data:`_DAEMONS`), a protected helper, or a process of another job.
    """
    found: list[psutil.Process] = []
    try:
        stack = psutil.Process().children()
    except psutil.Error:
        return found
    while stack:
        proc = stack.pop()
        if (_PROTECTED and _protected(proc)) or _is_daemon(proc):
            continue
        marker, _ = _marker(proc)
        if marker not in (None, job_dir):
            continue
        found.append(proc)
        with contextlib.suppress(psutil.Error):
            stack.extend(proc.children())
    return found


def sweep_descendants(job_dir: str, grace_s: float) -> int:
    """Stop this process's descendants that are the job's (see :func:`_descendants`),
    scanning again until none is left; how many were stopped.

    Only descendants: a process of the job elsewhere may be another supervisor's (one
    that took the job over), which this process must leave alone.
    """
    total = 0
    for round_ in range(_SWEEP_ROUNDS):
        procs = [p for p in _descendants(job_dir) if _alive(p)]
        if not procs:
            break
        total += len(procs)
        kill_all(procs, grace_s if round_ == 0 else 0.0)
    return total


def _runs_as(proc: psutil.Process, uid: int) -> bool:
    try:
        return uid in proc.uids()
    except psutil.Error:
        return False


def kill_user(uid: int, grace_s: float = 2.0) -> int:
    """Stop every process running as ``uid`` (a walled-off job's account, at its end).

    Returns:
        How many processes were stopped.
    """
    total = 0
    for round_ in range(_SWEEP_ROUNDS):
        procs = [p for p in psutil.process_iter() if _runs_as(p, uid) and p.pid != os.getpid()]
        if not procs:
            break
        total += len(procs)
        kill_all(procs, grace_s if round_ == 0 else 0.0)
    return total


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_all(procs: list[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL and reap what is left.

    Returns:
        The processes that were still alive when SIGKILL was sent.
    """
    procs = [p for p in procs if _alive(p)]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    deadline = time.monotonic() + grace_s
    while procs and time.monotonic() < deadline:
        time.sleep(0.05)
        procs = [p for p in procs if _alive(p)]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=2)
    return procs


def sweep(
    job_dir: str,
    attempt: int | None,
    grace_s: float,
    *,
    descendants: bool = False,
    uid: int | None = None,
) -> int:
    """Stop every process of the job, scanning again until none is left.

    One scan is not enough: a process can fork between the scan and the kill.
    Later rounds SIGKILL at once.

    Args:
        uid: The job's own account, whose every process is the job's.

    Returns:
        How many processes were stopped.
    """
    total = 0
    for round_ in range(_SWEEP_ROUNDS):
        procs = job_processes(job_dir, attempt, descendants=descendants, uid=uid)
        if not procs:
            break
        total += len(procs)
        kill_all(procs, grace_s if round_ == 0 else 0.0)
    return total


def reap_orphans(keep: frozenset[int] = frozenset()) -> None:
    """Collect exit statuses of dead children this process did not start itself.

    As a subreaper the supervisor inherits orphans; their exit statuses must be
    collected or they stay zombies. ``keep`` holds pids whose status belongs to
    a ``subprocess.Popen`` of ours.
    """
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            if child.pid in keep:
                continue
            with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
