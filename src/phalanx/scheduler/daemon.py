"""The scheduler of one workspace, run by ``python -m phalanx.jobs.schedulerd``.

Started by phalanx itself when needed (:mod:`phalanx.scheduler.process`); its
log is ``$PHALANX_HOME/scheduler.log``. Each round (when rung, and at least
once a second) it

1. checks that every job's supervisor is alive. A supervisor that died
   (SIGKILL, OOM killer, a reboot) has its job's processes stopped and mounts
   lifted; its attempt ends as an ``infrastructure`` failure and the retry
   policy decides: the job goes back to the queue and resumes from its
   checkpoints, or fails. Its devices are free either way;
2. makes a decision per compute target with work (:func:`policy.decide`) and
   applies it in one transaction: jobs started get their devices and their
   supervisor is started (a queued job has none: it costs no process while it
   waits), in the environment its submitter handed over
   (:mod:`phalanx.scheduler.handoff`), or rung (a job preempted earlier waits
   with its supervisor); preempted jobs get the preemption request their runner
   already honours; every waiting job gets its position and the reason it waits.

It exits once the workspace has had nothing queued or holding devices for
``IDLE_EXIT_S`` seconds; the next ``job create`` starts it again. Nothing is
lost when it dies: supervisors keep running their jobs, and the next
scheduler (started by any supervisor or CLI call) reads everything from the
database.

A supervisor is lost when its process is gone (on this machine), or when its
lease has gone unrenewed for ``EXPIRE_S`` as this scheduler saw it
(:class:`~phalanx.workspace.leases.LeaseWatch`, for a supervisor of another
machine). While the database is unavailable a round does nothing and the next
tries again; such time never counts towards a lease's expiry, and nothing
that fails because the database went away marks a job Failed.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from phalanx.compute.registry import kind_of
from phalanx.compute.targets import list_targets, resolve_target
from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.scheduler import ledger
from phalanx.scheduler.bell import Bell, job_bell, probe_bell, ring, scheduler_bell
from phalanx.scheduler.handoff import Desk
from phalanx.scheduler.keeper import JobKeeper
from phalanx.scheduler.model import (
    DEFAULT_GRACE_S,
    Capacity,
    Decision,
    RunningJob,
)
from phalanx.scheduler.policy import decide
from phalanx.scheduler.process import LOCK_FILE
from phalanx.scheduler.scaling import is_node, waits_for_nodes
from phalanx.workspace import JobRecord, JobStatus, RootCause, Workspace
from phalanx.workspace.layout import phalanx_home
from phalanx.workspace.leases import GIVE_UP_S, Holder, LeaseWatch

log = logging.getLogger("phalanx.scheduler")

ROUND_S = 1.0
IDLE_EXIT_S = 30.0
# A supervisor started records itself within moments (seconds on a loaded machine): a
# job given one is not given another before this long, nor while its guard runs.
SPAWN_AFTER_S = 10.0
# A job created while this scheduler listened has its environment handed over within
# moments of its creation: it is not started without it before this long.
HANDOFF_WAIT_S = 5.0


class Scheduler:
    """One round of scheduling over a workspace; the server runs the same rounds."""

    def __init__(
        self,
        ws: Workspace,
        keeper: JobKeeper,
        leases: LeaseWatch | None = None,
        desk: Desk | None = None,
    ) -> None:
        self.ws = ws
        self.keeper = keeper
        self.desk = desk
        """The environments submitters handed over (``None``: every job runs in this
        process's)."""
        self._spawned: dict[str, tuple[float, int]] = {}
        """Jobs this process started a supervisor for → when (monotonic), its guard's pid."""
        self._waiting_since: dict[str, dict[str, float]] = {}
        """Elastic target → its jobs waiting for nodes → since when (this process's view)."""
        self._rounds = 0
        self._leases = leases or LeaseWatch()
        self._outages = ws.database.outages

    def round(self) -> bool:
        """Watch supervisors, then schedule every target; whether anything is queued or held."""
        self._rounds += 1
        # Supervisors of running jobs are checked every round; those only waiting in the
        # queue (hundreds, maybe) every tenth: losing one of them loses no work.
        for job, expired in self._jobs_to_watch(waiting_too=self._rounds % 10 == 1):
            try:
                self.keeper.recover_lost(self.ws, job, expired=expired)
            except DatabaseUnavailable:
                raise  # not the job's trouble: the next round tries again
            except Exception as exc:  # one job's trouble must not stop the queue
                log.exception("recovering job %s failed", job.name)
                self._fail(job.name, f"phalanx could not recover the job after its supervisor "
                                     f"was lost: {exc}")  # fmt: skip
        for name in ledger.unrequested(self.ws):
            try:
                self.keeper.fill_queue_entry(self.ws, name)
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                log.exception("working out what job %s asks for failed", name)
                self._fail(name, f"phalanx could not queue the job: {exc}")
        targets = ledger.targets_with_work(self.ws)
        if self._rounds % 10 == 1:
            self._watch_idle_scalers(set(targets))
            self._forget_ended()
        for target in targets:
            try:
                self.schedule(target)
            except DatabaseUnavailable:
                raise
            except Exception:  # one target's trouble must not stop the others
                log.exception("scheduling compute %r failed", target)
        return bool(targets)

    def _watch_idle_scalers(self, busy: set[str]) -> None:
        """Every target without work gets its kind's look (an elastic one still asked for
        nodes has the request withdrawn after its idle time, rather than never)."""
        for target in list_targets(self.ws):
            if target.name not in busy:
                kind_of(target).idle(self.ws, target)

    def _fail(self, name: str, message: str) -> None:
        try:
            self.ws.set_status(name, JobStatus.FAILED, error=RootCause(message=message))
        except Exception:
            log.exception("marking job %s Failed failed too", name)

    def _jobs_to_watch(self, waiting_too: bool) -> list[tuple[JobRecord, bool]]:
        """Jobs whose supervisor is lost, each with whether by its lease's expiry (one of
        another machine) rather than by its process (one of this machine)."""
        if self.ws.database.outages != self._outages:
            # Time the database was away says nothing about the supervisors.
            self._outages = self.ws.database.outages
            self._leases.forget()
        # Queued jobs that hold devices (admitted, or waiting for Ray) are watched always.
        names = ledger.supervised(self.ws, every_queued=waiting_too)
        lost = []
        for name in names:
            job = self.ws.get_job(name)
            if job.status.is_terminal:
                continue
            holder = Holder.parse(job.lease_holder)
            if holder is not None and not holder.local:
                if self._leases.expired(job.name, job.lease_generation, job.lease_renewed_at):
                    log.warning("job %s: the lease of its supervisor %s went unrenewed; "
                                "recovering the job", job.name, holder)  # fmt: skip
                    lost.append((job, True))
            elif not self.keeper.supervisor_alive(job):
                lost.append((job, False))
        if waiting_too:
            self._leases.forget(keep=set(names))
        return lost

    def schedule(self, target_name: str) -> Decision | None:
        """One decision for ``target_name``, applied; ``None`` when it has nothing queued
        (an elastic target's wanted nodes are still kept: its running jobs hold some)."""
        queued = ledger.queued(self.ws, target_name)
        try:
            target = resolve_target(target_name, self.ws)
        except DatabaseUnavailable:
            raise
        except PhalanxError as exc:
            for job in queued:
                self.ws.set_status(job.name, JobStatus.FAILED, error=RootCause(message=str(exc)))
            return None
        kind = kind_of(target)
        refused = kind.screen(self.ws, target, queued)
        for name, why in refused.items():
            self._fail(name, why)
        queued = [job for job in queued if job.name not in refused]
        if not queued and not kind.capabilities(target).elastic:
            return None
        holding = ledger.holding(self.ws, target_name)
        capacity = kind.capacity_now(self.ws, target, queued)
        if capacity is None:  # the kind cannot tell now (it said why): the next round
            return None
        if capacity.growth is not None:
            capacity = _without_nodes_let_go(capacity, holding)
        now = time.time()
        if capacity.growth is not None:
            since = self._waiting_since.setdefault(target_name, {})
            queued = [replace(j, waiting_since=since.get(j.name)) for j in queued]
        decision = decide(capacity, holding, queued, now, grace=self._grace)
        if capacity.growth is not None:
            # When each job began to wait for nodes: its limits.timeout counts from then
            # (not from its time queued behind other jobs, nor its earlier attempts).
            self._waiting_since[target_name] = {
                name: since.get(name, now)
                for name, why in decision.waiting.items()
                if waits_for_nodes(why)
            }
        if decision.wanted is not None:
            ledger.record_wanted(self.ws, target_name, decision.wanted)
            assert capacity.growth is not None  # read this round: what the probe last asked
            if (capacity.growth.requested or 0) < decision.wanted:
                ring(probe_bell(self.ws.home, target_name))  # more to ask for: at once
        for name, why in decision.expired.items():
            log.info("job %s waited its limits.timeout for nodes: %s", name, why)
            self._fail(name, why)
        started = ledger.apply(self.ws, target_name, decision)
        for name in started:
            self._wake(name)
        for name, for_job in decision.preempt.items():
            log.info("preempting %s for %s", name, for_job)
        if started:
            log.info("started %s on %s", ", ".join(started), target_name)
        return decision

    def _grace(self, name: str) -> float:
        """A running job's ``retry.preemption_grace`` (asked only of the jobs a pass preempts)."""
        spec = self.ws.get_job(name).spec
        return float((spec.get("retry") or {}).get("preemption_grace") or DEFAULT_GRACE_S)

    def _wake(self, name: str) -> None:
        """Start the job's supervisor (or tell the one it has that it may start)."""
        job = self.ws.get_job(name)
        if self.keeper.supervisor_alive(job):
            ring(job_bell(self.ws.home, name))
            return
        spawned = self._spawned.get(name)
        if spawned is not None and _on_its_way(name, *spawned):
            return
        ready, env = self._handed(job)
        if not ready:
            return  # a later round (the submitter rings once it has handed it over)
        pid = self.keeper.spawn_supervisor(self.ws, name, env)
        self._spawned[name] = (time.monotonic(), pid)

    def _handed(self, job: JobRecord) -> tuple[bool, dict[str, str] | None]:
        """Whether ``job``'s supervisor may start now, and in what environment: the one
        its submitter handed over, or (``None``) this process's when none was and none
        will be. Not yet while the submitter is still handing it over."""
        if self.desk is None:
            return True, None
        env = self.desk.env_for(job.name, job.created_at)
        if env is not None:
            return True, env
        if job.created_at < self.desk.since:
            # Created before anyone could hand it over here: by the command that started
            # this process (whose environment it carries), or while none ran.
            return True, None
        if time.time() - job.created_at < HANDOFF_WAIT_S:
            return False, None
        log.warning("job %s: no environment was handed over for it; it runs in the "
                    "scheduler's", job.name)  # fmt: skip
        return True, None

    def _forget_ended(self) -> None:
        """Drop the environments (and start times) of jobs that ended."""
        self._spawned = {n: s for n, s in self._spawned.items() if _on_its_way(n, *s)}
        if self.desk is None:
            return
        for name in self.desk.jobs():
            try:
                over = self.ws.get_job(name).status.is_terminal
            except DatabaseUnavailable:
                raise
            except PhalanxError:  # no such job (deleted)
                over = True
            if over:
                self.desk.drop(name)

    def spawn_missing(self) -> None:
        """Jobs holding devices whose supervisor never came (its start failed): start one."""
        for name in ledger.unsupervised(self.ws):
            try:
                self._wake(name)
            except DatabaseUnavailable:
                raise
            except Exception as exc:
                log.exception("starting a supervisor for %s failed", name)
                self._fail(name, f"phalanx could not start the job's supervisor: {exc}")


def _on_its_way(job: str, started: float, guard: int) -> bool:
    """Whether the supervisor started for ``job`` (``started``: when, monotonic) may still
    record itself: it was started moments ago, or its guard still runs (a guard ends
    soon after its supervisor)."""
    import psutil

    if time.monotonic() - started < SPAWN_AFTER_S:
        return True
    try:
        proc = psutil.Process(guard)
        cmdline = proc.cmdline()
        return (
            proc.status() != psutil.STATUS_ZOMBIE
            and "phalanx.jobs.guard" in cmdline
            and job in cmdline
        )
    except psutil.Error:
        return False


def _without_nodes_let_go(capacity: Capacity, holding: list[RunningJob]) -> Capacity:
    """An elastic cluster less the idle nodes its autoscaler was told it may remove (the
    request is below the nodes up): they may be gone before a job given them starts."""
    growth = capacity.growth
    assert growth is not None
    surplus = growth.live - (growth.requested if growth.requested is not None else growth.live)
    if surplus <= 0:
        return capacity
    used = {grant.host for job in holding for grant in job.nodes}
    hosts = list(capacity.hosts)
    for host in reversed(capacity.hosts):
        if surplus and host.name not in used and is_node(host, growth.node):
            hosts.remove(host)
            surplus -= 1
    live = sum(1 for h in hosts if is_node(h, growth.node))
    return replace(capacity, hosts=tuple(hosts), growth=replace(growth, live=live))


def _reap_children() -> None:
    """Collect the exit status of the supervisors this process started (each under its
    guard), which it never waits for: without this each would stay a zombie while the
    scheduler runs. Their ``Popen`` objects were dropped while they ran, which lists
    them for ``subprocess._cleanup`` (``os.waitpid(-1)`` would also take the status of
    a command the scheduler waits for)."""
    cleanup = getattr(subprocess, "_cleanup", None)
    if cleanup is not None:
        cleanup()


def main(keeper: JobKeeper) -> int:
    """Schedule the workspace of ``PHALANX_HOME`` until it is idle; ``keeper`` acts on jobs."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s scheduler[%(process)d] %(message)s"
    )
    home = phalanx_home().resolve()
    home.mkdir(parents=True, exist_ok=True)
    # The lock first: while the database is away, one scheduler waits for it and the
    # supervisors that look for a scheduler find this one, instead of starting more.
    lock = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another scheduler runs this workspace
    try:
        bell = Bell(scheduler_bell(home))
        desk = Desk(home).start()
    except OSError:
        return 0  # one is just starting
    os.write(lock, json.dumps({"pid": os.getpid()}).encode())
    try:
        ws = Workspace(home, patience_s=GIVE_UP_S)
    except DatabaseUnavailable as exc:
        log.error("%s; exiting", exc)
        return 1
    log.info("scheduling workspace %s", ws.home)
    scheduler = Scheduler(ws, keeper, desk=desk)
    idle_since = time.monotonic()
    down = False
    while True:
        if not Path(ws.home / LOCK_FILE).exists():
            log.info("the workspace is gone; exiting")
            return 0
        try:
            with ws.patience(0):  # a round never waits: the next one tries again
                busy = scheduler.round()
                scheduler.spawn_missing()
        except DatabaseUnavailable:
            if not down:
                log.warning("the workspace database is unavailable; rounds resume when it is back")
            down = busy = True
        except Exception:  # the database busy past its timeout, a disk full: next round
            log.exception("a scheduling round failed")
            busy = True
        else:
            if down:
                log.info("the workspace database is back; scheduling again")
            down = False
        _reap_children()
        now = time.monotonic()
        if busy:
            idle_since = now
        elif now - idle_since > IDLE_EXIT_S:
            log.info("nothing queued or running for %.0f s; exiting", IDLE_EXIT_S)
            return 0
        bell.wait(ROUND_S)
