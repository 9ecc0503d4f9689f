"""Run one job to the end: prepare, run attempts, watch, stop, record.

The runner is the job's state machine (Queued → Preparing → Running →
Finalizing → Completed, or Failed / Canceled from any state). It runs inside
the job's supervisor process, so the CLI that created the job may exit.

A job runs as one or more *attempts*. Each attempt starts every node afresh
(a new rendezvous port, ``PHALANX_ATTEMPT`` one higher, the same checkpoint
folder); the retry policy (:mod:`phalanx.jobs.policy`) decides after each
unsuccessful attempt whether another follows.

Watching an attempt, the runner polls every 0.1 s for: a rank's end record
saying it failed (so the other nodes are stopped without waiting for the
failing node's launcher to wind down), a launcher that exited, and
``limits.timeout``; every 0.5 s it reads cancel and preemption requests from
the workspace. The first failure stops the whole gang.

Preemption. A spot or low-priority node is told it will be taken away by a
SIGTERM. phalanx forwards the notice to every rank of every node (SIGTERM to
each launcher, which passes it to its workers), waits up to
``retry.preemption_grace`` seconds for them to save an emergency checkpoint
and exit, and starts the next attempt, which resumes from it. ``phalanx job
preempt`` asks for exactly that; a rank that exits with
:data:`phalanx.exitcodes.PREEMPTED_EXIT_CODE`, or a node whose
ranks were all sent SIGTERM from outside, counts as a preemption too.

The job's lease (:mod:`phalanx.workspace.leases`). Every state write of the
runner is fenced by the generation its supervisor holds; the runner also
learns of a lease taken from the generation it reads with the requests. Then it
stops the nodes of its attempt and raises
:class:`~phalanx.workspace.leases.LeaseLost`, writing nothing. While ranks
run, it never waits for the database: a read that fails is skipped until the
next poll, and the ranks keep running until the lease went unrenewed for
``RANKS_WITHOUT_DB_S``; then the attempt is stopped and ends as preempted.
"""

from __future__ import annotations

import getpass
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.compute.base import Compute, Node
from phalanx.compute.eviction import NOTICE_FILE
from phalanx.errors import DatabaseUnavailable, PhalanxError, PreparationCanceled
from phalanx.exitcodes import PREEMPTED_EXIT_CODE
from phalanx.jobs.policy import decide
from phalanx.jobs.prepare import Prepared, prepare
from phalanx.jobs.preparing import PreparingNote
from phalanx.jobs.register import register_outputs
from phalanx.jobs.uploads import UPLOAD_REQUEST, UploadLoop
from phalanx.jobs.watchdog import STACK_DUMP_WAIT_S, Watchdog
from phalanx.launch.node import NodeLaunch
from phalanx.launch.rootcause import (
    failed,
    launcher_failure,
    peer_loss,
    read_rank_records,
    root_cause,
)
from phalanx.launch.sysmetrics import SystemSampler
from phalanx.scheduler.ledger import grant_of, is_releasing, release, set_hosts
from phalanx.scheduler.model import NodeGrant
from phalanx.scheduler.process import ensure_running, is_running, poke
from phalanx.scheduler.scaling import waits_for_nodes
from phalanx.scheduler.waiting import wait_for_grant
from phalanx.spec import JobSpec
from phalanx.tracking.jobrun import JobRun
from phalanx.workspace import (
    AttemptRecord,
    AttemptStatus,
    FailureCause,
    JobPaths,
    JobRecord,
    JobStatus,
    RootCause,
    Workspace,
)
from phalanx.workspace.leases import RANKS_WITHOUT_DB_S, LeaseKeeper, LeaseLost

log = logging.getLogger(__name__)

POLL_S = 0.1
REQUEST_EVERY = 5  # polls between reads of cancel/preemption requests
SCHEDULER_CHECK_EVERY = 50  # polls between checks that the workspace's scheduler runs
# After a failure, launchers get this long after SIGTERM to exit before every
# process of the attempt is killed outright.
FAILURE_GRACE_S = 4.5


@dataclass(frozen=True)
class AttemptOutcome:
    status: AttemptStatus
    cause: FailureCause | None = None
    error: RootCause | None = None
    exit_code: int | None = None


class JobRunner:
    """Runs the job ``name`` of ``workspace`` on ``compute``.

    Args:
        lease: The supervisor's lease on the job, whose generation fences the
            workspace's writes (``None``: nobody else will run the job).
    """

    def __init__(
        self,
        workspace: Workspace,
        name: str,
        compute: Compute,
        *,
        lease: LeaseKeeper | None = None,
    ) -> None:
        self.ws = workspace
        self.name = name
        self.compute = compute
        self.paths: JobPaths = workspace.paths(name)
        self.lease = lease
        self._cancel = False
        self._master_port = 0
        self._grant: tuple[NodeGrant, ...] | None = None
        """What each node holds this attempt (from the scheduler)."""
        self._attempt: int | None = None
        """The attempt this runner started last (its processes carry its number)."""
        self._setup_losses = 0
        self._run: JobRun | None = None
        """The job as its MLflow run, served to its ranks by each node's endpoint."""
        """Low-priority machines taken away while the job was set up on them."""

    def request_cancel(self, *_: object) -> None:
        """Signal handler: stop the job at the next poll."""
        self._cancel = True

    def cancelled(self) -> bool:
        """Whether the job was asked to stop (a signal, or ``phalanx job cancel``)."""
        return self._cancelled()

    def _cancelled(self) -> bool:
        """Whether to stop: asked to, or the lease was taken (then the first write that
        follows raises ``LeaseLost``, and nothing is written)."""
        if not self._cancel:
            self._poll()
        return self._cancel or self._lease_lost()

    def _poll(self) -> bool:
        """Read the job's requests without waiting for the database; whether a
        preemption is pending (``False`` too when the database did not answer)."""
        try:
            with self.ws.patience(0):
                polled = self.ws.poll_requests(self.name)
        except DatabaseUnavailable:
            return False  # read again at the next poll
        if self.lease is not None:
            self.lease.seen(polled.generation)
        self._cancel = self._cancel or polled.cancel
        return polled.preempt

    def _lease_lost(self) -> bool:
        return self.lease is not None and self.lease.lost

    def stop_own_processes(self) -> None:
        """Stop the processes of this runner's attempt and the supervisor's children
        (attempt numbers start at 1, so without one only the children)."""
        self.compute.sweep(self.paths.root, self._attempt or 0, grace_s=2.0, descendants=True)

    def run(self) -> JobStatus:
        """Run the job to a terminal state and return it."""
        job = self.ws.get_job(self.name)
        if job.status.is_terminal:
            return job.status
        spec = JobSpec.model_validate(job.spec)
        self._run = JobRun(
            name=job.name,
            experiment=job.experiment_name,
            display_name=job.display_name or job.name,
            user=job.created_by or getpass.getuser(),
            created_ms=int(job.created_at * 1000),
        )
        deadline = None
        if spec.limits.timeout:
            # The time limit counts the job's attempts, not its time in the queue; a job
            # resumed by a new supervisor (the old one lost) keeps what it had used.
            deadline = time.monotonic() + spec.limits.timeout - _time_used(job.attempts)
        if self._cancelled():
            return self._finish(JobStatus.CANCELED, None)
        if not self.ws.set_status(self.name, JobStatus.PREPARING):
            return self.ws.get_job(self.name).status  # ended meanwhile (canceled)
        # Where the nodes are elsewhere (Ray), each samples its own machine.
        interval = 0.0 if self.compute.prepares_on_nodes else None
        sampler = SystemSampler(self.paths.root, interval).start()
        try:
            return self._prepare_and_run(spec, deadline)
        finally:
            sampler.stop()

    def _prepare_and_run(self, spec: JobSpec, deadline: float | None) -> JobStatus:
        try:
            with PreparingNote(self.ws, self.name) as note:  # what it builds, on the job
                prepared = prepare(
                    spec,
                    self.paths,
                    self.ws,
                    canceled=self._cancelled,
                    on_nodes=self.compute.prepares_on_nodes,
                    progress=note.progress,
                )
        except PreparationCanceled:
            return self._finish(JobStatus.CANCELED, None)
        except PhalanxError as exc:
            return self._preparing_failed(exc)
        try:
            self.compute.attach(
                prepared.plan, self.paths,
                account=prepared.account, datastores_file=prepared.datastores_file,
            )  # fmt: skip
        except PhalanxError as exc:
            prepared.close()
            return self._preparing_failed(exc)
        syncer = UploadLoop(prepared, self.paths.root / UPLOAD_REQUEST)
        try:
            return self._attempts(spec, prepared, deadline, syncer)
        finally:
            syncer.stop()
            prepared.close()

    def _looked(self, job: JobRecord) -> None:
        """A look at the job in the queue: waiting for its cluster to grow, the compute
        gets ready for the nodes to come (a Ray connection made meanwhile)."""
        if waits_for_nodes(str((job.queue or {}).get("reason", ""))):
            self.compute.warm()

    def _preparing_failed(self, exc: PhalanxError) -> JobStatus:
        _raise_if_database(exc)
        log.error("preparing failed: %s", exc)
        return self._finish(JobStatus.FAILED, RootCause(message=str(exc)))

    def _attempts(
        self, spec: JobSpec, prepared: Prepared, deadline: float | None, syncer: UploadLoop
    ) -> JobStatus:
        while True:
            if self._cancelled():
                return self._finish(JobStatus.CANCELED, None)
            # A job that gave its devices back (preempted) waits for its turn again; the
            # wait does not count against limits.timeout.
            waited_from = time.monotonic()
            self._grant = grant_of(self.ws, self.name) or wait_for_grant(
                self.ws, self.name, self._cancelled, self._looked
            )
            if deadline is not None:
                deadline += time.monotonic() - waited_from
            if not self._grant:
                return self._finish(JobStatus.CANCELED, None)
            if is_releasing(self.ws, self.name):
                # Preempted for another job before this attempt began (while preparing, or
                # between attempts): give the devices back without starting anything.
                log.info("preempted by the scheduler before the attempt began; back to the queue")
                self.ws.take_preemption_request(self.name)
                release(self.ws, self.name, requeue=True)
                poke(self.ws.home)
                continue
            try:
                # Reserve the attempt's nodes, waiting for the compute to have them.
                placed = self.compute.allocate(
                    spec.instance_count, spec.process_count_per_instance, deadline,
                    self._waiting_for_nodes,
                )  # fmt: skip
                if placed:
                    set_hosts(self.ws, self.name, list(placed))
                    self._grant = grant_of(self.ws, self.name)
            except PhalanxError as exc:
                _raise_if_database(exc)
                if self._cancelled():
                    return self._finish(JobStatus.CANCELED, None)
                if self._taken_before_start(spec, exc):
                    continue
                log.error("allocating nodes failed: %s", exc)
                return self._finish(JobStatus.FAILED, RootCause(message=str(exc)))
            try:
                outcome = self._run_attempt(spec, prepared, deadline)
            finally:
                self.compute.release()
            # What the attempt wrote reaches its datastore, whatever became of it.
            syncer.sync_now()
            if outcome.status is AttemptStatus.SUCCEEDED:
                self.ws.set_status(self.name, JobStatus.FINALIZING)
                syncer.stop()
                try:
                    prepared.finish()
                except PhalanxError as exc:
                    log.error("finalizing outputs failed: %s", exc)
                    message = f"the job's outputs could not be saved: {exc}"
                    return self._finish(JobStatus.FAILED, RootCause(message=message))
                try:
                    self.ws.check_lease(self.name)  # a registry write is no job state write
                    register_outputs(spec, self.ws, self.name)
                except PhalanxError as exc:
                    _raise_if_database(exc)
                    log.error("%s", exc)
                    return self._finish(JobStatus.FAILED, RootCause(message=str(exc)))
                return self._finish(JobStatus.COMPLETED, None)
            if outcome.status is AttemptStatus.CANCELED:
                return self._finish(JobStatus.CANCELED, None)
            assert outcome.cause is not None  # a failed attempt always has a cause
            attempts = self.ws.list_attempts(self.name)
            decision = decide(spec.retry, attempts[:-1], outcome.cause, outcome.error)
            log.info("attempt %d: %s; %s", attempts[-1].number, outcome.cause, decision.reason)
            verdict = "retried" if decision.retry else "not retried"
            self.ws.set_attempt_note(
                self.name, attempts[-1].number, f"{verdict}: {decision.reason}"
            )
            if not decision.retry:
                return self._finish(JobStatus.FAILED, outcome.error)
            if outcome.cause is FailureCause.PREEMPTION:
                # Its devices were taken: back to the queue, to resume when its turn comes.
                release(self.ws, self.name, requeue=True)
                poke(self.ws.home)

    def _taken_before_start(self, spec: JobSpec, exc: PhalanxError) -> bool:
        """A low-priority machine taken away while its node was set up: back to the queue
        (within ``retry.max_preemptions`` such losses), rather than a failed job."""
        if not self.compute.low_priority or not self.compute.gone(None, wait_s=20.0):
            return False
        self._setup_losses += 1
        if self._setup_losses > spec.retry.max_preemptions:
            return False
        log.warning("a low-priority node was taken away while the job was set up (%s); "
                    "back to the queue (%d of retry.max_preemptions=%d)",
                    exc, self._setup_losses, spec.retry.max_preemptions)  # fmt: skip
        release(self.ws, self.name, requeue=True)
        poke(self.ws.home)
        return True

    def _waiting_for_nodes(self, reason: str) -> None:
        """Nodes the compute cannot give yet: the job shows as waiting, not running."""
        log.info("%s", reason)
        self.ws.set_waiting(self.name, reason)

    def _finish(self, status: JobStatus, error: RootCause | None) -> JobStatus:
        self.ws.set_status(self.name, status, error=error)  # gives its devices back
        poke(self.ws.home)
        log.info("job %s: %s%s", self.name, status, f" ({error.message})" if error else "")
        return status

    def _run_attempt(
        self, spec: JobSpec, prepared: Prepared, deadline: float | None
    ) -> AttemptOutcome:
        master_addr = self.compute.master_addr
        master_port = self._master_port = self.compute.free_ports(0, 1)[0]
        grant = self._grant or ()
        attempt = self.ws.start_attempt(
            self.name,
            master_port=master_port,
            nodes=[
                {"host": n.host, "gpus": list(n.gpus), "cpus": n.cpus, "memory": n.memory}
                for n in grant
            ],
        )
        self._attempt = attempt.number
        self.ws.set_status(self.name, JobStatus.RUNNING)
        log.info(
            "attempt %d: %d node(s) x %d process(es), master %s:%d",
            attempt.number,
            spec.instance_count,
            spec.process_count_per_instance,
            master_addr,
            master_port,
        )
        nodes: list[Node] = []
        # Addresses per node matter to mpirun and TF_CONFIG; torchrun needs node 0's only.
        mpi = spec.distribution_type == "mpi"
        hosts: tuple[str, ...] = ()
        if mpi:
            hosts = tuple(self.compute.mpi_hosts(spec.instance_count))
        elif spec.distribution_type == "tensorflow":
            hosts = tuple(self.compute.node_hosts(spec.instance_count))
        tf_cluster = _tf_cluster(spec, hosts, self.compute.free_ports)
        # MPI: one mpirun on node 0 starts the ranks of every node.
        launchers = 1 if mpi and not self.compute.starts_every_node else spec.instance_count
        # Node 0 last: on Ray its mpirun asks the other nodes for daemons at once.
        try:
            for node_rank in [*range(1, launchers), 0]:
                nodes.append(self._start_node(spec, prepared, attempt.number, node_rank, hosts,
                                              tf_cluster))  # fmt: skip
        except PhalanxError as exc:
            log.error("attempt %d: %s", attempt.number, exc)
            self._stop(attempt.number, nodes, FAILURE_GRACE_S)
            outcome = AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE, RootCause(message=str(exc))
            )
        else:
            nodes.sort(key=lambda n: n.node_rank)
            outcome = self._watch(spec, attempt.number, nodes, deadline)
        # Whatever the outcome, nothing of the attempt outlives it: not even a
        # daemon a successful command left running in the background.
        left = self.compute.sweep(self.paths.root, attempt.number, grace_s=2.0, descendants=True)
        if left:
            log.warning("stopped %d process(es) left running by attempt %d", left, attempt.number)
        for node in nodes:
            node.flush()  # what the stopped processes wrote last
        self.compute.reap(nodes)
        self.ws.end_attempt(
            self.name,
            attempt.number,
            outcome.status,
            cause=outcome.cause,
            exit_code=outcome.exit_code,
            error=outcome.error,
        )
        return outcome

    def _start_node(
        self,
        spec: JobSpec,
        prepared: Prepared,
        attempt: int,
        node_rank: int,
        hosts: tuple[str, ...],
        tf_cluster: dict[str, list[str]] | None,
    ) -> Node:
        """Start node ``node_rank``'s launcher (or, on Ray, arm an MPI node's agent)."""
        launch = NodeLaunch(
            job_name=self.name,
            job_dir=self.paths.root,
            attempt=attempt,
            command=prepared.command,
            node_rank=node_rank,
            nnodes=spec.instance_count,
            nproc_per_node=spec.process_count_per_instance,
            master_addr=self.compute.master_addr,
            master_port=self._master_port,
            workdir=self.paths.code,
            checkpoint_dir=self.paths.checkpoints,
            outputs_dir=self.paths.outputs,
            shutdown_timeout=spec.retry.preemption_grace,
            inputs=prepared.inputs,
            outputs=prepared.outputs,
            user_env=prepared.env,
            distribution=spec.distribution_type,
            hosts=hosts,
            tf_cluster=tf_cluster,
            env_prefix=prepared.env_prefix,
            shared_machine=spec.distribution_type == "mpi"
            and self.compute.shares_machine(spec.instance_count),
            devices=self._devices(node_rank),
            node_devices=self._mpi_devices(spec),
            image=prepared.image,
            tracking=self._run,
            # A private /dev/shm of that size only where no other node shares the machine.
            shm_size=spec.resources.shm_size
            if not self.compute.shares_machine(spec.instance_count)
            else None,
        )
        return self.compute.start_node(launch, self.paths.node_log(node_rank))

    def _devices(self, node_rank: int) -> tuple[str, ...] | None:
        """The GPUs node ``node_rank`` was given (``None``: leave ``CUDA_VISIBLE_DEVICES`` be),
        as its compute binds the scheduler's grant (:meth:`Compute.node_devices`)."""
        if not self._grant or node_rank >= len(self._grant):
            return None
        return self.compute.node_devices(self._grant[node_rank].gpus)

    def _mpi_devices(self, spec: JobSpec) -> tuple[tuple[str, ...], ...]:
        """MPI: every node's GPUs, for its daemon (empty when they are left be)."""
        if spec.distribution_type != "mpi":
            return ()
        devices = [self._devices(k) for k in range(spec.instance_count)]
        return tuple(d for d in devices if d is not None) if None not in devices else ()

    def _watch(
        self, spec: JobSpec, attempt: int, nodes: list[Node], deadline: float | None
    ) -> AttemptOutcome:
        """Poll the attempt until it ends; stops its nodes before raising ``LeaseLost``."""
        try:
            return self._watch_nodes(spec, attempt, nodes, deadline)
        except LeaseLost:
            self._stop(attempt, nodes, FAILURE_GRACE_S)
            raise

    def _watch_nodes(
        self, spec: JobSpec, attempt: int, nodes: list[Node], deadline: float | None
    ) -> AttemptOutcome:
        attempt_dir = self.paths.attempt_dir(attempt)
        grace = float(spec.retry.preemption_grace)
        watchdog = (
            Watchdog(self.paths, attempt, spec.world_size, float(spec.limits.stall_timeout))
            if spec.limits.stall_timeout
            else None
        )
        stale_read = self._take_stale_request()  # one meant for an attempt now over
        notice: str | None = None  # set once a preemption was requested for this attempt
        polls = 0
        while True:
            polls += 1
            codes = [node.poll() for node in nodes]
            if all(code == 0 for code in codes):
                return AttemptOutcome(AttemptStatus.SUCCEEDED, exit_code=0)
            records = read_rank_records(attempt_dir)
            if _workers_done(spec, records):
                # TensorFlow's parameter servers serve until stopped: the workers decide.
                self._stop(attempt, nodes, FAILURE_GRACE_S)
                return AttemptOutcome(AttemptStatus.SUCCEEDED, exit_code=0)
            if any(failed(r) for r in records) or any(code not in (None, 0) for code in codes):
                # A preemption notice gives every rank the grace to save; a
                # failure stops the gang at once. Judge only once all have ended.
                # The nodes left of a low-priority one taken away, or told it will be,
                # get the grace too.
                taken = self.compute.low_priority and (
                    any(n.lost is not None for n in nodes)
                    or bool(_eviction_notices(self.paths.system_logs, attempt))
                )
                looks_preempted = notice is not None or taken or _preemption_signs(records)
                self._stop(attempt, nodes, grace if looks_preempted else FAILURE_GRACE_S)
                return self._ended(attempt, spec.world_size, nodes, codes, notice)
            if self.lease is not None and self.lease.lost:
                raise LeaseLost(self.name, self.lease.generation)
            if self.lease is not None and self.lease.overdue():
                # Another supervisor may take the lease once it is unrenewed for longer:
                # the ranks must be gone by then. They get the notice, and save.
                log.warning("attempt %d: no database for %.0f s; stopping the ranks",
                            attempt, RANKS_WITHOUT_DB_S)  # fmt: skip
                for node in nodes:
                    node.signal(signal.SIGTERM)
                self._stop(attempt, nodes, grace)
                message = (
                    f"the workspace database was unreachable for {RANKS_WITHOUT_DB_S:.0f} s, "
                    "so the ranks were stopped (a supervisor that cannot renew its lease may "
                    "not keep them running); the job resumes from its checkpoints"
                )
                return AttemptOutcome(
                    AttemptStatus.FAILED, FailureCause.PREEMPTION, RootCause(message=message)
                )
            if polls % SCHEDULER_CHECK_EVERY == 0 and not is_running(self.ws.home):
                # The scheduler died: start another, so that a lost supervisor (this
                # one's included) is still noticed without anybody running a command.
                ensure_running(self.ws.home, self.ws.child_env())
            if polls % REQUEST_EVERY == 0:
                self.compute.reap(nodes)
                if not stale_read:
                    stale_read = self._take_stale_request()
                preempt = self._poll() if stale_read else False
                if preempt and notice is None:
                    request = self._take_request()
                    if request is not None:
                        which = request.get("nodes")
                        notice = "every node" if which is None else f"node(s) {which}"
                        if request.get("for"):
                            notice = f"for job {request['for']}"  # by the scheduler
                        log.info("attempt %d: preemption of %s requested", attempt, notice)
                        # The notice goes to every rank at once, evicted node or not:
                        # they all take part in the emergency checkpoint.
                        for node in nodes:
                            node.signal(signal.SIGTERM)
                if watchdog is not None and watchdog.stalled():
                    return self._hang(attempt, nodes, watchdog)
            if self._cancel:
                self._stop(attempt, nodes, FAILURE_GRACE_S)
                return AttemptOutcome(AttemptStatus.CANCELED, cause=FailureCause.CANCELED)
            if deadline is not None and time.monotonic() > deadline:
                self._stop(attempt, nodes, FAILURE_GRACE_S)
                error = RootCause(
                    message=f"job exceeded limits.timeout of {spec.limits.timeout} s and was "
                    "stopped; raise limits.timeout if it needs longer"
                )
                return AttemptOutcome(AttemptStatus.FAILED, FailureCause.TIMEOUT, error)
            time.sleep(POLL_S)

    def _take_request(self) -> dict[str, Any] | None:
        """The pending preemption request, taken; ``None`` when the database did not answer."""
        try:
            with self.ws.patience(0):
                return self.ws.take_preemption_request(self.name) or {}
        except DatabaseUnavailable:
            return None

    def _take_stale_request(self) -> bool:
        """Clear a preemption request meant for the attempt before (keeping the
        scheduler's, which still wants the devices); whether the database answered."""
        try:
            with self.ws.patience(0), self.ws.transaction():  # both, or neither
                stale = self.ws.take_preemption_request(self.name)
                if stale and stale.get("for") and is_releasing(self.ws, self.name):
                    # The scheduler's, made while this attempt started.
                    self.ws.request_preemption(self.name, None, for_job=str(stale["for"]))
        except DatabaseUnavailable:
            return False
        return True

    def _ended(
        self,
        attempt: int,
        world_size: int,
        nodes: list[Node],
        codes: list[int | None],
        notice: str | None,
    ) -> AttemptOutcome:
        """What an attempt that stopped came to, judged from every rank's record."""
        lost = [n for n in nodes if n.lost is not None]
        evicted = _eviction_notices(self.paths.system_logs, attempt)
        if evicted:
            self.compute.leaving([node for node, _ in evicted])
        # An agent lost on a machine still up (killed for memory, crashed) is a failure.
        taken = lost and self.compute.low_priority and self.compute.gone(lost[0].node_rank)
        if self.compute.low_priority and (taken or evicted):
            # A low-priority node taken away (a spot VM evicted) is nobody's failure: the
            # job goes back to the queue and resumes from its last checkpoint (the one its
            # ranks saved on the notice, when the cloud gave one).
            if evicted:
                node, notice = evicted[0]
                message = f"node {node} is being taken away (a low-priority node): {notice}"
            else:
                message = (
                    f"node {lost[0].node_rank} was taken away (a low-priority node): {lost[0].lost}"
                )
            saved = sum(
                r.get("exit_code") == PREEMPTED_EXIT_CODE
                for r in read_rank_records(self.paths.attempt_dir(attempt))
            )
            note = f"; {saved} rank(s) saved and exited" if saved else ""
            return AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.PREEMPTION, RootCause(message=message + note)
            )
        if lost:
            message = f"node {lost[0].node_rank} was lost: {lost[0].lost}"
            return AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE, RootCause(message=message)
            )
        records = read_rank_records(self.paths.attempt_dir(attempt))
        missing = sorted(set(range(world_size)) - {int(r["rank"]) for r in records})
        if not missing and not any(failed(r) for r in records):
            return AttemptOutcome(AttemptStatus.SUCCEEDED, exit_code=0)  # finished in the grace
        saved = sum(r.get("exit_code") == PREEMPTED_EXIT_CODE for r in records)
        if notice is not None or (not missing and _preempted(records)):
            where = (
                (
                    f"preempted by the scheduler {notice}, which ranks higher"
                    if notice.startswith("for job ")
                    else f"{notice} preempted (phalanx job preempt)"
                )
                if notice
                else ("a node was sent SIGTERM (preemption notice)")
            )
            note = f"; {saved} rank(s) saved and exited" if saved else ""
            return AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.PREEMPTION, RootCause(message=where + note)
            )
        cause = root_cause(records)
        if missing and records and _only_consequences(records):
            # A rank that left no record was killed with its wrapper: from outside.
            rank = missing[0]
            cause = RootCause(
                message=f"rank {rank} ended without a record: its processes were killed from "
                "outside (process group kill, OOM killer) or its wrapper could not write",
                rank=rank,
                log_file=str(self.paths.rank_log(rank)),
            )
            return AttemptOutcome(AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE, cause)
        if cause is None:
            # No rank failed: a launcher did (could not bind, crashed before its workers).
            node_rank, code = next(
                ((i, c) for i, c in enumerate(codes) if c not in (None, 0)), (0, None)
            )
            cause = launcher_failure(node_rank, code, nodes[node_rank].log_path)
            return AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE, cause, cause.exit_code
            )
        return AttemptOutcome(AttemptStatus.FAILED, classify(cause), cause, cause.exit_code)

    def _hang(self, attempt: int, nodes: list[Node], watchdog: Watchdog) -> AttemptOutcome:
        log.warning("attempt %d: no progress for %.0f s; dumping stacks", attempt, watchdog.limit)
        quietest = watchdog.quietest()  # before the dumps write to every log
        if self.compute.dump_stacks(self.paths.root, attempt):
            time.sleep(STACK_DUMP_WAIT_S)  # let faulthandler finish writing
            for node in nodes:
                node.flush()  # the stacks, from nodes that keep their own files
        cause = watchdog.root_cause(quietest)
        self._stop(attempt, nodes, FAILURE_GRACE_S)
        return AttemptOutcome(AttemptStatus.FAILED, FailureCause.HANG, cause)

    def _stop(self, attempt: int, nodes: list[Node], grace_s: float) -> None:
        """Stop every node: SIGTERM the launchers, wait ``grace_s``, kill what is left.

        A launcher that was already sent SIGTERM is not sent another: its
        ranks may be saving, or already shutting down, when a second notice
        would kill them.
        """
        for node in nodes:
            if not node.signalled:
                node.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for node in nodes:
            node.wait(max(0.0, deadline - time.monotonic()))
        stragglers = self.compute.sweep(self.paths.root, attempt, grace_s=0.5, descendants=True)
        if stragglers:
            log.warning("killed %d process(es) still running after the stop", stragglers)
        for node in nodes:
            node.wait(5.0)


def _eviction_notices(system_logs: Path, attempt: int) -> list[tuple[int, str]]:
    """The eviction notices the attempt's low-priority nodes heard: (node, the notice)."""
    prefix = NOTICE_FILE.format(attempt=attempt, node="")  # eviction_attempt3_node.txt
    stem, suffix = prefix.removesuffix(".txt"), ".txt"
    found = []
    for path in system_logs.glob(f"{stem}*{suffix}"):
        node = path.name.removeprefix(stem).removesuffix(suffix)
        if node.isdigit():
            found.append((int(node), path.read_text(errors="replace").strip()[:500]))
    return sorted(found)


def _raise_if_database(exc: BaseException) -> None:
    """Raise the database's unavailability behind ``exc`` (itself, or wrapped with the
    name of an input or output): not the job's fault, so never a reason to fail it."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, DatabaseUnavailable):
            raise cause
        cause = cause.__cause__


def _time_used(attempts: tuple[AttemptRecord, ...]) -> float:
    """Seconds the job's ended attempts ran."""
    return sum(a.ended_at - a.started_at for a in attempts if a.ended_at is not None)


def _tf_cluster(
    spec: JobSpec, hosts: tuple[str, ...], free_ports: Callable[[int, int], list[int]]
) -> dict[str, list[str]] | None:
    """TensorFlow's cluster: a free port per task on the node that runs it (rank order)."""
    if spec.distribution_type != "tensorflow":
        return None
    per_node = spec.process_count_per_instance
    addresses = [
        f"{host}:{port}" for node, host in enumerate(hosts) for port in free_ports(node, per_node)
    ]
    workers = spec.tensorflow_workers
    cluster = {"worker": addresses[:workers]}
    if addresses[workers:]:
        cluster["ps"] = addresses[workers:]
    return cluster


def _workers_done(spec: JobSpec, records: list[dict[str, Any]]) -> bool:
    """Whether a TensorFlow job with parameter servers has every worker done and well."""
    if spec.distribution_type != "tensorflow" or spec.tensorflow_tasks == spec.tensorflow_workers:
        return False
    workers = [r for r in records if int(r["rank"]) < spec.tensorflow_workers]
    return len(workers) == spec.tensorflow_workers and not any(failed(r) for r in workers)


def _notified(record: dict[str, Any]) -> bool:
    """A rank that got a preemption notice: it left with 143, or was sent SIGTERM."""
    return record.get("exit_code") == PREEMPTED_EXIT_CODE or "SIGTERM" in (
        record.get("signals_received") or []
    )


def _only_consequences(records: list[dict[str, Any]]) -> bool:
    """Whether every rank that failed either got the notice or lost a peer."""
    return all(_notified(r) or peer_loss(r) for r in records if failed(r))


def _preemption_signs(records: list[dict[str, Any]]) -> bool:
    """Whether the ranks that ended so far look preempted (decides the stop's grace)."""
    return any(failed(r) for r in records) and _only_consequences(records)


def _preempted(records: list[dict[str, Any]]) -> bool:
    """Whether a whole attempt's records show a preemption rather than a failure:
    some rank got the notice, and every other failure is a consequence of it."""
    return any(_notified(r) for r in records if failed(r)) and _only_consequences(records)


# Signals a process sends itself when its own code is at fault.
_USER_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"})


def classify(cause: RootCause) -> FailureCause:
    """A rank's own failure: its code's fault, unless something outside killed it."""
    if cause.signal and cause.signal not in _USER_SIGNALS:
        return FailureCause.INFRASTRUCTURE  # killed from outside: OOM killer, an operator
    return FailureCause.USER_ERROR
