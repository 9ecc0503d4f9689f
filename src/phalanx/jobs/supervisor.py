"""The detached process that runs one job: ``python -m phalanx.jobs.supervisor NAME``.

Started by the scheduler when it gives the job its devices (a queued job has no
process), under the job's guard (:mod:`phalanx.jobs.guard`), in a session of
their own and the environment of the command that created the job; a sweep's
controller is started by ``phalanx job create`` itself. It finds its grant (or,
for a job preempted earlier, waits for the next one, asleep), then runs the
job. SIGTERM (from ``phalanx job cancel``) stops the job, waiting or not. Its
log is the job's ``system_logs/supervisor.txt``. A bug in the runner still ends
the job, as Failed with a system error, and leaves no process of its attempt
behind.

Two supervisors of one job never both run it: each first takes the job's
lease (:mod:`phalanx.workspace.leases`), one that finds it held by a live one
leaves, and one whose lease was taken stops the processes of its attempt and
leaves without writing anything more.

The database may blink. The supervisor's reads and writes wait for it, with
backoff, and its ranks keep running: for up to ``RANKS_WITHOUT_DB_S`` (5
minutes) after its lease was last renewed. Past that it stops them (the attempt
ends as preempted once the database is back, and the job resumes from its
checkpoints); after ``GIVE_UP_S`` (30 minutes) without the database it stops
everything of its attempt and exits, and the scheduler recovers the job as for
a lost supervisor. Nothing is marked Failed because the database was away.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.prctl import become_subreaper
from phalanx.scheduler.bell import job_bell, ring
from phalanx.scheduler.process import is_supervisor
from phalanx.scheduler.waiting import wait_for_grant
from phalanx.storage.redact import RedactingFormatter, redact
from phalanx.workspace import FailureCause, JobStatus, RootCause, Workspace
from phalanx.workspace.leases import GIVE_UP_S, LeaseKeeper, LeaseLost
from phalanx.workspace.trials import SWEEP_TARGET

if TYPE_CHECKING:
    from phalanx.compute.base import Compute
    from phalanx.jobs.runner import JobRunner

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m phalanx.jobs.supervisor JOB_NAME", file=sys.stderr)
        return 2
    name = argv[0]
    handler = logging.StreamHandler(sys.stderr)
    # Credentials resolved for the job's datastores never reach the log, tracebacks included.
    handler.setFormatter(
        RedactingFormatter("%(asctime)s %(levelname)s supervisor[%(process)d] %(message)s")
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # Cloud SDKs log every HTTP request at INFO: one line per file a mount opens.
    for sdk in ("azure", "botocore", "s3fs", "aiobotocore", "urllib3"):
        logging.getLogger(sdk).setLevel(logging.WARNING)
    _run_where_jobs_reach()
    try:
        ws = Workspace(patience_s=GIVE_UP_S)
        generation = ws.claim_supervisor(name, os.getpid(), lambda pid: is_supervisor(pid, name))
    except DatabaseUnavailable as exc:
        log.error("%s; this supervisor gives up", exc)
        return 1
    if generation is None:
        log.info("another supervisor runs job %s; leaving", name)
        return 0
    keeper = LeaseKeeper(ws, name, generation).start()
    supervision = _Supervision(ws, name, keeper)
    try:
        return supervision.run()
    except LeaseLost:
        log.warning(
            "job %s: lease generation %d was taken by another supervisor; this one stopped "
            "the processes it started and leaves without writing anything more",
            name,
            generation,
        )
        supervision.stop_own_processes()
        return 0
    except DatabaseUnavailable as exc:
        log.error(
            "%s; gave up after %.0f s: the processes of this supervisor's attempt are stopped, "
            "and the scheduler recovers the job once the database is back",
            exc,
            GIVE_UP_S,
        )
        supervision.stop_own_processes()
        return 1
    finally:
        keeper.stop()


def _run_where_jobs_reach() -> None:
    """A walled-off job's processes run this process's Python: where their accounts cannot
    reach it, run this supervisor again on a view of it (:mod:`phalanx.jobs.pythonview`),
    before anything else. When none can be made, the job fails saying why, as it starts."""
    from phalanx.jobs import pythonview, walls
    from phalanx.workspace.layout import phalanx_home

    if walls.active(phalanx_home()) is None or pythonview.out_of_reach() is None:
        return
    try:
        pythonview.run_on_view()
    except PhalanxError as exc:
        log.error("%s", exc)


class _Supervision:
    """What one supervisor does with its job once it holds the lease."""

    def __init__(self, ws: Workspace, name: str, keeper: LeaseKeeper) -> None:
        self.ws = ws
        self.name = name
        self.keeper = keeper
        self.runner: JobRunner | None = None
        self.compute: Compute | None = None

    def run(self) -> int:
        ws, name, _keeper = self.ws, self.name, self.keeper
        job = ws.get_job(name)
        if job.status.is_terminal:
            return 0  # canceled before this process could claim it
        become_subreaper()
        stopping: list[bool] = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if job.target == SWEEP_TARGET:
            return self._sweep(lambda: bool(stopping))
        try:
            code = self._job(stopping)
            self._end_leftover_account()
            return code
        finally:
            if job.parent is not None:  # its sweep's controller looks at once
                ring(job_bell(ws.home, job.parent))

    def _end_leftover_account(self) -> None:
        """A job recovered from a lost supervisor keeps the uid it held for its next
        supervisor (:func:`phalanx.jobs.control.recover_lost`), which takes it over as it
        prepares the job. One this supervisor ended before preparing it (canceled as it
        began, its compute gone) would hold that uid for ever: it ends with the job."""
        if not self.ws.get_job(self.name).status.is_terminal:
            return
        from phalanx.jobs.accounts import release
        from phalanx.storage.jobstores import file_for

        file_for(self.ws.home, self.name).unlink(missing_ok=True)
        release(self.ws.paths(self.name).root)

    def _sweep(self, stopping: Callable[[], bool]) -> int:
        from phalanx.jobs.sweeps import SweepRunner

        try:
            status = SweepRunner(self.ws, self.name, self.keeper, stopping).run()
        except (LeaseLost, DatabaseUnavailable):
            raise
        except Exception as exc:
            tb = redact(traceback.format_exc())
            log.error("sweep controller failed:\n%s", tb)
            message = (
                f"phalanx sweep controller failed ({FailureCause.SYSTEM_ERROR}): {exc}; see "
                "system_logs/supervisor.txt"
            )
            if isinstance(exc, PhalanxError):
                message = str(exc)
            self.ws.set_status(self.name, JobStatus.FAILED, error=RootCause(message=message))
            status = JobStatus.FAILED
        if status is not JobStatus.COMPLETED:
            from phalanx.jobs.control import stop_trials

            stop_trials(self.ws, self.name)  # a sweep that did not complete leaves none running
        return 0 if status is JobStatus.COMPLETED else 1

    def _job(self, stopping: list[bool]) -> int:
        ws, name, keeper = self.ws, self.name, self.keeper
        stop = lambda: bool(stopping) or keeper.lost or ws.requests(name)[0]  # noqa: E731
        if wait_for_grant(ws, name, stop) is None:
            if keeper.lost:
                raise LeaseLost(name, keeper.generation)
            if not ws.get_job(name).status.is_terminal:
                ws.set_status(name, JobStatus.CANCELED)
            return 0
        # Its turn: only now the runner (and what it imports) is loaded.
        from phalanx.jobs.runner import JobRunner

        try:
            self.compute = make_compute(
                ws, name, cancelled=lambda: self.runner is not None and self.runner.cancelled()
            )
        except PhalanxError as exc:
            if isinstance(exc, DatabaseUnavailable):
                raise
            log.error("%s", exc)
            ws.set_status(name, JobStatus.FAILED, error=RootCause(message=str(exc)))
            return 1
        runner = self.runner = JobRunner(ws, name, self.compute, lease=keeper)
        signal.signal(signal.SIGTERM, runner.request_cancel)
        signal.signal(signal.SIGINT, runner.request_cancel)
        if stopping:
            runner.request_cancel()
        try:
            status = runner.run()
        except (LeaseLost, DatabaseUnavailable):
            raise
        except Exception:
            tb = redact(traceback.format_exc())
            log.error("supervisor failed:\n%s", tb)
            self.stop_own_processes()
            error = RootCause(
                message=f"phalanx supervisor failed ({FailureCause.SYSTEM_ERROR}): "
                f"{tb.strip().splitlines()[-1]}; see system_logs/supervisor.txt",
                traceback=tb,
            )
            ws.set_status(name, JobStatus.FAILED, error=error)
            return 1
        return 0 if status is JobStatus.COMPLETED else 1

    def stop_own_processes(self) -> None:
        """Stop what this supervisor started: its attempt's processes and its children.

        Never every process of the job: once its lease may have been taken, another
        supervisor's attempt may be running here too.
        """
        if self.runner is not None:
            self.runner.stop_own_processes()
        elif self.compute is not None:
            self.compute.sweep(self.ws.paths(self.name).root, 0, grace_s=2.0, descendants=True)


def make_compute(ws: Workspace, name: str, cancelled: Callable[[], bool]) -> Compute:
    """Where the job's spec says its nodes run.

    Raises:
        PhalanxError: an unknown target, its token cannot be read, or a job that is not
            spot on a target that has become low-priority.
    """
    from phalanx.compute.targets import open_compute, resolve_target
    from phalanx.jobs.control import check_tier
    from phalanx.scheduler.request import priority_of
    from phalanx.spec import JobSpec

    spec = JobSpec.model_validate(ws.get_job(name).spec)
    target = resolve_target(spec.compute, ws)
    # Its target may have become low-priority since the job was queued.
    check_tier(ws, target, priority_of(spec)[1])
    return open_compute(target, ws, cancelled=cancelled)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
