"""Start, cancel and check on jobs from the CLI's side."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from phalanx.compute.local import LocalCompute
from phalanx.errors import PhalanxError
from phalanx.jobs.sysmetrics import INTERVAL_ENV
from phalanx.spec import JobSpec
from phalanx.workspace import JobRecord, JobStatus, RootCause, Workspace
from phalanx.workspace.layout import HOME_ENV
from phalanx.workspace.snapshot import LIMIT_ENV

# A Queued job whose supervisor never recorded itself within this long is lost.
_START_TIMEOUT_S = 60.0


def submit(ws: Workspace, spec: JobSpec, spec_text: str) -> JobRecord:
    """Record the job and start its supervisor; returns the Queued job."""
    job = ws.create_job(spec.to_record(), spec_text=spec_text, name=spec.name, code=spec.code_path)
    paths = ws.paths(job.name)
    # A job submitted from inside another job is not that job's: drop its markers.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env[HOME_ENV] = str(ws.home)
    # Settings of this user, not markers of a job: the node cache's are kept.
    for keep, value in os.environ.items():
        if keep in ("PHALANX_DEBUG", LIMIT_ENV, INTERVAL_ENV) or keep.startswith("PHALANX_CACHE_"):
            env[keep] = value
    with open(paths.supervisor_log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "phalanx.jobs.supervisor", job.name],
            env=env,
            cwd=paths.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    try:
        child = psutil.Process(proc.pid)
        created = child.create_time()
        # Popen returns once exec closed the child's close-on-exec pipe, a moment before
        # the kernel sets up the new command line; until then it reads empty, and a
        # liveness check would take the supervisor for dead.
        deadline = time.monotonic() + 5
        while not child.cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)
    except psutil.Error:
        created = time.time()
    ws.set_supervisor(job.name, proc.pid, created)
    return ws.get_job(job.name)


def supervisor_alive(job: JobRecord) -> bool:
    """Whether the job's supervisor process still runs.

    A reused pid does not count: the process must be this job's supervisor by
    its command line. (Start times are no test: psutil derives them from the
    wall clock, so a clock step would make a live supervisor look dead.)
    """
    if job.supervisor_pid is None:
        return False
    try:
        proc = psutil.Process(job.supervisor_pid)
        cmdline = proc.cmdline()
        ours = "phalanx.jobs.supervisor" in cmdline and job.name in cmdline
        return ours and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def refresh(ws: Workspace, job: JobRecord) -> JobRecord:
    """The job as stored, marked Failed if its supervisor died without ending it."""
    if job.status.is_terminal or supervisor_alive(job):
        return job
    if job.supervisor_pid is None and time.time() - job.created_at < _START_TIMEOUT_S:
        return job  # still starting
    LocalCompute().sweep(Path(job.job_dir), None, grace_s=2.0)
    _unmount_leftovers(Path(job.job_dir))
    ws.set_status(
        job.name,
        JobStatus.FAILED,
        error=RootCause(
            message="the job's supervisor process ended unexpectedly (machine restart or "
            "kill -9); see system_logs/supervisor.txt and resubmit the job"
        ),
    )
    return ws.get_job(job.name)


def _unmount_leftovers(job_dir: Path) -> None:
    """Lift the FUSE mounts a dead supervisor left in the job folder."""
    mounts = job_dir / "mounts"
    if not mounts.is_dir():
        return
    from phalanx.storage.mount import cleanup_stale

    for mountpoint in mounts.iterdir():
        cleanup_stale(mountpoint)


def cancel(ws: Workspace, name: str, *, wait_s: float = 30.0) -> JobRecord:
    """Stop every process of the job and mark it Canceled.

    Raises:
        PhalanxError: the job did not stop within ``wait_s``.
    """
    job = ws.get_job(name)
    if job.status.is_terminal:
        return job
    ws.request_cancel(name)
    if supervisor_alive(job):
        assert job.supervisor_pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(job.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            job = ws.get_job(name)
            if job.status.is_terminal:
                return job
            if not supervisor_alive(job):
                break
            time.sleep(0.1)
        else:
            raise PhalanxError(
                f"job {name!r} did not stop within {wait_s:.0f} s; see "
                f"{ws.paths(name).supervisor_log}"
            )
    LocalCompute().sweep(ws.paths(name).root, None, grace_s=2.0)
    ws.set_status(name, JobStatus.CANCELED)
    return ws.get_job(name)


def preempt(ws: Workspace, name: str, nodes: list[int] | None) -> JobRecord:
    """Simulate the eviction of ``nodes`` (every node when ``None``) of a running job.

    The runner treats it exactly as a spot eviction notice: SIGTERM to every
    rank, ``retry.preemption_grace`` to save, then a new attempt.

    Raises:
        PhalanxError: the job is not running, or a node rank does not exist.
    """
    job = refresh(ws, ws.get_job(name))
    if job.status is not JobStatus.RUNNING:
        raise PhalanxError(f"job {name!r} is {job.status}; only a Running job can be preempted")
    count = int((job.spec.get("resources") or {}).get("instance_count") or 1)
    for node in nodes or []:
        if not 0 <= node < count:
            raise PhalanxError(f"--node {node}: job {name!r} has nodes 0 to {count - 1}")
    ws.request_preemption(name, nodes)
    return job
