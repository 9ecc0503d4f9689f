"""Run one job to the end: prepare, launch every node, watch, stop, record.

The runner is the job's state machine (Queued → Preparing → Running →
Finalizing → Completed, or Failed / Canceled from any state). It runs inside
the job's supervisor process, so the CLI that created the job may exit.

Watching an attempt, the runner polls every 0.1 s for: a rank's end record
saying it failed (so the other nodes are stopped without waiting for the
failing node's launcher to wind down), a launcher that exited, a cancel
request, and ``limits.timeout``. The first failure stops the whole gang.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass

from phalanx.compute.local import LocalCompute, LocalNode
from phalanx.errors import PhalanxError
from phalanx.jobs.prepare import Prepared, prepare
from phalanx.launch.node import SHUTDOWN_TIMEOUT_S, NodeLaunch
from phalanx.launch.ports import free_port
from phalanx.launch.rootcause import failed, launcher_failure, read_rank_records, root_cause
from phalanx.spec import JobSpec
from phalanx.workspace import (
    AttemptStatus,
    FailureCause,
    JobPaths,
    JobStatus,
    RootCause,
    Workspace,
)

log = logging.getLogger(__name__)

POLL_S = 0.1
# After SIGTERM, launchers get torchrun's shutdown timeout plus this to exit
# before every process of the attempt is killed outright.
STOP_GRACE_S = SHUTDOWN_TIMEOUT_S + 1.5


@dataclass(frozen=True)
class AttemptOutcome:
    status: AttemptStatus
    cause: FailureCause | None = None
    error: RootCause | None = None
    exit_code: int | None = None


class JobRunner:
    """Runs the job ``name`` of ``workspace`` on ``compute``."""

    def __init__(
        self, workspace: Workspace, name: str, compute: LocalCompute | None = None
    ) -> None:
        self.ws = workspace
        self.name = name
        self.compute = compute or LocalCompute()
        self.paths: JobPaths = workspace.paths(name)
        self._cancel = False

    def request_cancel(self, *_: object) -> None:
        """Signal handler: stop the job at the next poll."""
        self._cancel = True

    def _cancelled(self) -> bool:
        if not self._cancel and self.ws.cancel_requested(self.name):
            self._cancel = True
        return self._cancel

    def run(self) -> JobStatus:
        """Run the job to a terminal state and return it."""
        job = self.ws.get_job(self.name)
        if job.status.is_terminal:
            return job.status
        spec = JobSpec.model_validate(job.spec)
        started = time.monotonic()
        deadline = started + spec.limits.timeout if spec.limits.timeout else None
        if self._cancelled():
            return self._finish(JobStatus.CANCELED, None)
        if not self.ws.set_status(self.name, JobStatus.PREPARING):
            return self.ws.get_job(self.name).status  # ended meanwhile (canceled)
        try:
            prepared = prepare(spec, self.paths)
        except PhalanxError as exc:
            log.error("preparing failed: %s", exc)
            return self._finish(JobStatus.FAILED, RootCause(message=str(exc)))

        if self._cancelled():
            return self._finish(JobStatus.CANCELED, None)
        outcome = self._run_attempt(spec, prepared, deadline)
        if outcome.status is AttemptStatus.SUCCEEDED:
            self.ws.set_status(self.name, JobStatus.FINALIZING)
            return self._finish(JobStatus.COMPLETED, None)
        if outcome.status is AttemptStatus.CANCELED:
            return self._finish(JobStatus.CANCELED, None)
        return self._finish(JobStatus.FAILED, outcome.error)

    def _finish(self, status: JobStatus, error: RootCause | None) -> JobStatus:
        self.ws.set_status(self.name, status, error=error)
        log.info("job %s: %s%s", self.name, status, f" ({error.message})" if error else "")
        return status

    def _run_attempt(
        self, spec: JobSpec, prepared: Prepared, deadline: float | None
    ) -> AttemptOutcome:
        master_addr = self.compute.master_addr
        master_port = free_port(master_addr)
        attempt = self.ws.start_attempt(self.name, master_port=master_port)
        self.ws.set_status(self.name, JobStatus.RUNNING)
        log.info(
            "attempt %d: %d node(s) x %d process(es), master %s:%d",
            attempt.number,
            spec.instance_count,
            spec.process_count_per_instance,
            master_addr,
            master_port,
        )
        nodes: list[LocalNode] = []
        for node_rank in range(spec.instance_count):
            launch = NodeLaunch(
                job_name=self.name,
                job_dir=self.paths.root,
                attempt=attempt.number,
                command=prepared.command,
                node_rank=node_rank,
                nnodes=spec.instance_count,
                nproc_per_node=spec.process_count_per_instance,
                master_addr=master_addr,
                master_port=master_port,
                workdir=self.paths.code,
                checkpoint_dir=self.paths.checkpoints,
                outputs_dir=self.paths.outputs,
                inputs=prepared.inputs,
                outputs=prepared.outputs,
                user_env=prepared.env,
            )
            nodes.append(self.compute.start_node(launch, self.paths.node_log(node_rank)))

        outcome = self._watch(spec, attempt.number, nodes, deadline)
        # Whatever the outcome, nothing of the attempt outlives it: not even a
        # daemon a successful command left running in the background.
        left = self.compute.sweep(self.paths.root, attempt.number, grace_s=2.0, descendants=True)
        if left:
            log.warning("stopped %d process(es) left running by attempt %d", left, attempt.number)
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

    def _watch(
        self, spec: JobSpec, attempt: int, nodes: list[LocalNode], deadline: float | None
    ) -> AttemptOutcome:
        attempt_dir = self.paths.attempt_dir(attempt)
        polls = 0
        while True:
            polls += 1
            if polls % 10 == 0:
                self.compute.reap(nodes)
            codes = [node.poll() for node in nodes]
            if all(code == 0 for code in codes):
                return AttemptOutcome(AttemptStatus.SUCCEEDED, exit_code=0)
            rank_failed = any(failed(r) for r in read_rank_records(attempt_dir))
            if rank_failed or any(code not in (None, 0) for code in codes):
                return self._failure(attempt, nodes, codes)
            if self._cancelled():
                self._stop(attempt, nodes)
                return AttemptOutcome(AttemptStatus.CANCELED, cause=FailureCause.CANCELED)
            if deadline is not None and time.monotonic() > deadline:
                self._stop(attempt, nodes)
                error = RootCause(
                    message=f"job exceeded limits.timeout of {spec.limits.timeout} s and was "
                    "stopped; raise limits.timeout if it needs longer"
                )
                return AttemptOutcome(AttemptStatus.FAILED, FailureCause.TIMEOUT, error)
            time.sleep(POLL_S)

    def _failure(
        self, attempt: int, nodes: list[LocalNode], codes: list[int | None]
    ) -> AttemptOutcome:
        self._stop(attempt, nodes)
        cause = root_cause(read_rank_records(self.paths.attempt_dir(attempt)))
        if cause is None:
            # No rank failed: a launcher did (could not bind, crashed before its workers).
            node_rank, code = next((i, c) for i, c in enumerate(codes) if c not in (None, 0))
            cause = launcher_failure(node_rank, code, nodes[node_rank].log_path)
            return AttemptOutcome(
                AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE, cause, cause.exit_code
            )
        return AttemptOutcome(AttemptStatus.FAILED, classify(cause), cause, cause.exit_code)

    def _stop(self, attempt: int, nodes: list[LocalNode]) -> None:
        """Stop every node: SIGTERM the launchers, then kill what is left."""
        for node in nodes:
            node.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for node in nodes:
            node.wait(max(0.0, deadline - time.monotonic()))
        stragglers = self.compute.sweep(self.paths.root, attempt, grace_s=0.5, descendants=True)
        if stragglers:
            log.warning("killed %d process(es) still running after the stop", stragglers)
        for node in nodes:
            node.wait(5.0)


# Signals a process sends itself when its own code is at fault.
_USER_SIGNALS = frozenset({"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"})


def classify(cause: RootCause) -> FailureCause:
    """A rank's own failure: its code's fault, unless something outside killed it."""
    if cause.signal and cause.signal not in _USER_SIGNALS:
        return FailureCause.INFRASTRUCTURE  # killed from outside: OOM killer, an operator
    return FailureCause.USER_ERROR
