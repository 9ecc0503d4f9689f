"""Start, cancel and check on jobs from the CLI's side."""

from __future__ import annotations

# Only what `job list`/`show` need is imported here; the spec's models, the compute
# targets and the retry policy are imported by the functions that use them.
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.errors import PhalanxError
from phalanx.launch.sysmetrics import INTERVAL_ENV
from phalanx.scheduler.bell import job_bell, ring
from phalanx.scheduler.handoff import hand_over
from phalanx.scheduler.ledger import release
from phalanx.scheduler.process import ensure_running, is_supervisor
from phalanx.workspace import (
    AttemptStatus,
    FailureCause,
    JobRecord,
    JobStatus,
    QueueEntry,
    RootCause,
    Workspace,
)
from phalanx.workspace.leases import Holder, take_over
from phalanx.workspace.snapshot import LIMIT_ENV

if TYPE_CHECKING:
    from phalanx.compute.targets import Target
    from phalanx.spec import JobSpec, SweepSpec


def submit(
    ws: Workspace,
    spec: JobSpec,
    spec_text: str,
    *,
    created_by: str | None = None,
    parent: str | None = None,
    code: Path | None = None,
) -> JobRecord:
    """Record the job in its target's queue; returns the Queued job.

    A queued job costs no process: the scheduler starts its supervisor when it
    gives the job its devices. That supervisor carries this command's environment,
    as a job started here always has: it is handed to the scheduler, which keeps it
    in memory only (:mod:`phalanx.scheduler.handoff`).

    Args:
        parent: The sweep the job is a trial of.
        code: The folder to snapshot, when not the spec's ``code`` (a trial's: its
            sweep's snapshot).

    Raises:
        PhalanxError: the target is unknown, or the job can never fit it.
    """
    if parent is None:
        check_trial_names(ws, spec.name, sweep=False)
    entry = queue_entry(ws, spec)
    job = ws.create_job(
        spec.to_record(),
        spec_text=spec_text,
        name=spec.name,
        code=code or spec.code_path,
        queue=entry,
        created_by=created_by,
        parent=parent,
    )
    # When no scheduler listens, the one started here carries this environment anyway
    # (a job created before its scheduler listened runs in that scheduler's).
    hand_over(ws.home, job.name, job.created_at, supervisor_env(ws))
    ensure_running(ws.home, ws.child_env())
    return ws.get_job(job.name)


def submit_sweep(
    ws: Workspace, spec: SweepSpec, spec_text: str, *, created_by: str | None = None
) -> JobRecord:
    """Record a sweep job (Running: it holds no devices; its trials queue) and start its
    controller, the sweep's supervisor (:mod:`phalanx.jobs.sweeps`); returns the job.

    Raises:
        PhalanxError: the sweep's trials could never run on its target.
    """
    from phalanx.workspace.trials import SWEEP_TARGET

    check_trial_names(ws, spec.name, sweep=True)
    queue_entry(ws, spec.template())  # its trials' target exists and can run them
    job = ws.create_job(
        spec.to_record(),
        spec_text=spec_text,
        name=spec.name,
        code=spec.code_path,
        queue=QueueEntry(target=SWEEP_TARGET),
        created_by=created_by,
        running=True,
    )
    spawn_supervisor(ws, job.name)
    ensure_running(ws.home, ws.child_env())
    return ws.get_job(job.name)


def stop_trials(ws: Workspace, sweep: str) -> None:
    """Ask every trial job of ``sweep`` that has not ended to stop."""
    for job in ws.list_jobs(parent=sweep, limit=10_000):
        if not job.status.is_terminal:
            request_stop(ws, job.name)


def check_trial_names(ws: Workspace, name: str | None, *, sweep: bool) -> None:
    """Keep ``<sweep>_<n>`` for a sweep's trials: a job may not take such a name, and a
    sweep may not take one whose trials' names are taken.

    Raises:
        PhalanxError: naming the job in the way.
    """
    import re

    if name is None:
        return
    if sweep:
        taken = ws.names_with_prefix(f"{name}_")
        clash = next((t for t in taken if t[len(name) + 1 :].isdigit()), None)
        if clash is not None:
            raise PhalanxError(
                f"name: a sweep named {name!r} names its trials {name}_0, {name}_1, …, and job "
                f"{clash!r} exists; choose another name"
            )
        return
    match = re.fullmatch(r"(.+)_(\d+)", name)
    if match is None:
        return
    from phalanx.workspace.trials import SWEEP_TARGET

    try:
        owner = ws.get_job(match[1])
    except PhalanxError:
        return
    if owner.target == SWEEP_TARGET:
        raise PhalanxError(
            f"name: {name!r} is kept for trial {match[2]} of sweep {match[1]!r}; choose "
            "another name"
        )


def request_stop(ws: Workspace, name: str) -> None:
    """Ask a job to stop (as ``cancel`` does) without waiting for it: its supervisor
    ends it Canceled, or the scheduler does when that supervisor is gone. A job still
    waiting in the queue has no supervisor (nor anything else) to stop: it ends here."""
    job = ws.get_job(name)
    if job.status.is_terminal:
        return
    ws.request_cancel(name)
    ring(job_bell(ws.home, name))
    pid = local_supervisor(job)
    if pid is not None and supervisor_alive(job):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    elif _never_started(ws, job):
        ws.set_status(name, JobStatus.CANCELED)


def _never_started(ws: Workspace, job: JobRecord) -> bool:
    """Whether ``job`` (asked to stop, its supervisor not alive) waits in the queue and
    never ran: then nothing of it runs, and it ends at once.

    No grant can come to it now (the scheduler gives none to a job asked to stop); one
    given just before is its supervisor's to end, once the scheduler starts it.
    """
    from phalanx.scheduler.ledger import grant_of

    return (
        job.status is JobStatus.QUEUED
        and not grant_of(ws, job.name)
        and not ws.list_attempts(job.name)
    )


def queue_entry(ws: Workspace, spec: JobSpec) -> QueueEntry:
    """Which queue the job joins and what it asks for there.

    Raises:
        PhalanxError: the target is unknown, or the job can never fit it.
    """
    from phalanx.compute.registry import kind_of
    from phalanx.compute.targets import resolve_target
    from phalanx.scheduler.request import priority_of

    target = resolve_target(spec.compute, ws)
    kind = kind_of(target)
    request = kind.request(spec, target, kind.capacity(ws, target))
    priority, tier = priority_of(spec)
    check_tier(ws, target, tier)
    return QueueEntry(
        target=target.name,
        request={
            "nodes": request.nodes,
            "gpus": request.gpus,
            "cpus": request.cpus,
            "memory": request.memory,
        },
        priority=priority,
        tier=tier,
        timeout=float(spec.limits.timeout) if spec.limits.timeout else None,
    )


def check_tier(ws: Workspace, target: Target, tier: int) -> None:
    """Refuse a job of ``tier`` that ``target`` must not run (one that is not ``job_tier:
    spot`` where nodes may be taken away): its kind decides.

    Raises:
        PhalanxError: in one line, naming ``queue_settings.job_tier`` and the fix.
    """
    from phalanx.compute.registry import kind_of

    kind_of(target).admit(ws, target, tier)


def fill_queue_entry(ws: Workspace, name: str) -> None:
    """Work out what a job recorded before the scheduler existed asks for (schema < 7)."""
    from phalanx.scheduler import ledger
    from phalanx.spec import JobSpec

    ledger.fill_request(ws, name, queue_entry(ws, JobSpec.model_validate(ws.get_job(name).spec)))


def supervisor_env(ws: Workspace) -> dict[str, str]:
    """The environment a supervisor of ``ws`` started from this process runs in: this
    process's, less what belongs to no job it starts."""
    # A job submitted from inside another job is not that job's: drop its markers. A Ray
    # token this process was given for one cluster is no other job's business.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PHALANX_") and k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")
    }
    # Where the workspace is: its folder, and its database when that is elsewhere.
    env.update(ws.child_env())
    # Settings of this user, not markers of a job: the node cache's are kept.
    for keep, value in os.environ.items():
        if keep in ("PHALANX_DEBUG", LIMIT_ENV, INTERVAL_ENV) or keep.startswith("PHALANX_CACHE_"):
            env[keep] = value
    return env


def spawn_supervisor(ws: Workspace, name: str, env: Mapping[str, str] | None = None) -> int:
    """Start the job's supervisor, detached, under its guard (:mod:`phalanx.jobs.guard`);
    the guard's pid.

    Args:
        env: The environment it runs in (the one its submitter handed over);
            :func:`supervisor_env` of this process when ``None``.
    """
    paths = ws.paths(name)
    with open(paths.supervisor_log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "phalanx.jobs.guard", name],
            env=dict(env) if env is not None else supervisor_env(ws),
            cwd=paths.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    # The supervisor records itself (an atomic claim): were this process to record it,
    # a second supervisor started meanwhile could not tell that this one exists.
    return proc.pid


def supervisor_alive(job: JobRecord) -> bool:
    """Whether the job's supervisor still runs, as far as this machine can tell.

    A supervisor of this machine is checked by its process; a reused pid does
    not count: the process must be this job's supervisor by its command line.
    (Start times are no test: psutil derives them from the wall clock, so a
    clock step would make a live supervisor look dead.) One that holds the
    lease from another machine counts as alive: only its lease's expiry, which
    the scheduler watches, says otherwise.
    """
    pid = local_supervisor(job)
    if pid is None:
        holder = Holder.parse(job.lease_holder)
        return holder is not None and not holder.local
    return is_supervisor(pid, job.name)


def local_supervisor(job: JobRecord) -> int | None:
    """The pid of the job's supervisor when it is (or was) a process of this machine."""
    holder = Holder.parse(job.lease_holder)
    if holder is not None:
        return holder.pid if holder.local else None
    return job.supervisor_pid


def refresh(ws: Workspace, job: JobRecord) -> JobRecord:
    """The job as stored, making sure the workspace's scheduler watches it.

    A job whose supervisor died is recovered by the scheduler within a second
    or two (:func:`recover_lost`), with or without a CLI call. The check is
    made at most every few seconds per workspace (a listing of 500 jobs checks
    once; a long `job stream` checks again and again).
    """
    if not job.status.is_terminal:
        now = time.monotonic()
        if now - _ensured.get(ws.home, -_ENSURE_EVERY_S) >= _ENSURE_EVERY_S:
            ensure_running(ws.home, ws.child_env())
            _ensured[ws.home] = now
    return job


_ENSURE_EVERY_S = 5.0
_ensured: dict[Path, float] = {}


def recover_lost(ws: Workspace, job: JobRecord, *, expired: bool = False) -> None:
    """End what a dead supervisor left: its processes, mounts and attempt; then retry or fail.

    The attempt it was running ends as an ``infrastructure`` failure; the
    retry policy decides whether the job goes back to the queue (to resume
    from its checkpoints) or fails. A job whose supervisor died before its
    attempt began (waiting in the queue, or given its devices but not started
    yet) just loses that process: the scheduler starts another when needed,
    and no attempt is counted. A job asked to cancel ends Canceled.

    The supervisor's lease is taken first, as it was when judged (a renewal or a
    new supervisor since then leaves the job alone), so a supervisor judged
    lost wrongly can write nothing more.

    Args:
        job: The job as it was judged.
        expired: Judged by its lease's expiry (a supervisor of another machine),
            not by its process.
    """
    from phalanx.compute.local import LocalCompute
    from phalanx.jobs.policy import decide
    from phalanx.spec import JobSpec
    from phalanx.workspace.trials import SWEEP_TARGET

    judged = job
    job = ws.get_job(job.name)  # again: it may have ended or been claimed meanwhile
    if job.status.is_terminal or (not expired and supervisor_alive(job)):
        return
    if not take_over(ws, job.name, judged.lease_generation, judged.lease_renewed_at):
        return
    if job.target == SWEEP_TARGET:
        # A sweep's controller keeps its state in the database: another goes on from it.
        ws.clear_supervisor(job.name)
        spawn_supervisor(ws, job.name)
        return
    LocalCompute().sweep(Path(job.job_dir), None, grace_s=2.0)
    _unmount_leftovers(Path(job.job_dir))
    if job.cancel_requested:
        ws.set_status(job.name, JobStatus.CANCELED)
        _end_account(ws, job.name)
        return
    attempts = ws.list_attempts(job.name)
    open_attempt = next((a for a in attempts if a.ended_at is None), None)
    if job.status is JobStatus.QUEUED and open_attempt is None:
        ws.clear_supervisor(job.name)
        return
    message = (
        "the job's supervisor process ended unexpectedly (killed, out of memory, or the machine "
        "restarted); its processes were stopped; see system_logs/supervisor.txt"
    )
    error = RootCause(message=message)
    if open_attempt is None:
        open_attempt = ws.start_attempt(job.name, master_port=None)
    ws.end_attempt(
        job.name,
        open_attempt.number,
        AttemptStatus.FAILED,
        cause=FailureCause.INFRASTRUCTURE,
        error=error,
    )
    spec = JobSpec.model_validate(job.spec)
    earlier = [a for a in ws.list_attempts(job.name) if a.number != open_attempt.number]
    decision = decide(spec.retry, earlier, FailureCause.INFRASTRUCTURE, error)
    verdict = "retried" if decision.retry else "not retried"
    ws.set_attempt_note(job.name, open_attempt.number, f"{verdict}: {decision.reason}")
    if decision.retry:
        ws.clear_supervisor(job.name)
        release(ws, job.name, requeue=True)
    else:
        ws.set_status(job.name, JobStatus.FAILED, error=error)
        _end_account(ws, job.name)


def _unmount_leftovers(job_dir: Path) -> None:
    """Lift the FUSE mounts and the inputs' bind mounts a dead supervisor left in the
    job folder."""
    mounts = job_dir / "mounts"
    if mounts.is_dir():
        from phalanx.storage.mount import cleanup_stale

        for mountpoint in mounts.iterdir():
            cleanup_stale(mountpoint)
    if (job_dir / "inputs").is_dir():
        from phalanx.storage.bind import unbind_all

        unbind_all(job_dir / "inputs")


def _end_account(ws: Workspace, name: str) -> None:
    """A job that ended without its supervisor: its credentials file and its account
    (walled off) end too."""
    from phalanx.jobs.accounts import release as release_account
    from phalanx.storage.jobstores import file_for

    file_for(ws.home, name).unlink(missing_ok=True)
    release_account(ws.paths(name).root)


def cancel(ws: Workspace, name: str, *, wait_s: float = 30.0) -> JobRecord:
    """Stop every process of the job and mark it Canceled.

    Raises:
        PhalanxError: the job did not stop within ``wait_s``.
    """
    job = ws.get_job(name)
    if job.status.is_terminal:
        return job
    ws.request_cancel(name)
    ring(job_bell(ws.home, name))  # a supervisor waiting in the queue hears it at once
    if supervisor_alive(job):
        pid = local_supervisor(job)
        if pid is not None:  # one of another machine reads the request within a second
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
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
    elif _never_started(ws, job):
        ws.set_status(name, JobStatus.CANCELED)  # nothing of it ever ran: nothing to stop
        _end_account(ws, name)
        return ws.get_job(name)
    from phalanx.compute.local import LocalCompute

    LocalCompute().sweep(ws.paths(name).root, None, grace_s=2.0)
    _unmount_leftovers(ws.paths(name).root)
    ws.set_status(name, JobStatus.CANCELED)
    _end_account(ws, name)
    # A sweep whose controller was gone (or did not get to it) stops its trials here.
    stop_trials(ws, name)
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
