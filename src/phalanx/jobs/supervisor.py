"""The detached process that runs one job: ``python -m phalanx.jobs.supervisor NAME``.

Started by ``phalanx job create`` in a session of its own, so it outlives the
CLI and a Ctrl-C at the terminal never reaches it (or by the scheduler, for a
job whose supervisor was lost). It first waits, asleep and light (nothing heavy
imported yet), until the scheduler gives the job its devices; then it runs the
job. SIGTERM (from ``phalanx job cancel``) stops the job, waiting or not. Its
log is the job's ``system_logs/supervisor.txt``. A bug in the runner still ends
the job, as Failed with a system error, and leaves no process of the job
behind. Two supervisors of one job never both run it: each claims the job
first, and one that finds another alive leaves.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from phalanx.errors import PhalanxError
from phalanx.launch.procs import become_subreaper
from phalanx.scheduler.process import is_supervisor
from phalanx.scheduler.waiting import wait_for_grant
from phalanx.storage.redact import RedactingFormatter, redact
from phalanx.workspace import FailureCause, JobStatus, RootCause, Workspace

if TYPE_CHECKING:
    from phalanx.compute.local import LocalCompute
    from phalanx.compute.ray import RayCompute


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
    ws = Workspace()
    if not ws.claim_supervisor(name, os.getpid(), lambda pid: is_supervisor(pid, name)):
        logging.getLogger(__name__).info("another supervisor runs job %s; leaving", name)
        return 0
    if ws.get_job(name).status.is_terminal:
        return 0  # canceled before this process could claim it
    become_subreaper()
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if wait_for_grant(ws, name, lambda: bool(stopping) or ws.requests(name)[0]) is None:
        if not ws.get_job(name).status.is_terminal:
            ws.set_status(name, JobStatus.CANCELED)
        return 0
    # Its turn: only now the runner (and what it imports) is loaded.
    from phalanx.jobs.runner import JobRunner

    runner: JobRunner | None = None
    try:
        compute = make_compute(
            ws, name, cancelled=lambda: runner is not None and runner.cancelled()
        )
    except PhalanxError as exc:
        logging.getLogger(__name__).error("%s", exc)
        ws.set_status(name, JobStatus.FAILED, error=RootCause(message=str(exc)))
        return 1
    runner = JobRunner(ws, name, compute)
    signal.signal(signal.SIGTERM, runner.request_cancel)
    signal.signal(signal.SIGINT, runner.request_cancel)
    if stopping:
        runner.request_cancel()
    try:
        status = runner.run()
    except Exception:
        tb = redact(traceback.format_exc())
        logging.getLogger(__name__).error("supervisor failed:\n%s", tb)
        compute.sweep(ws.paths(name).root, None, grace_s=2.0, descendants=True)
        error = RootCause(
            message=f"phalanx supervisor failed ({FailureCause.SYSTEM_ERROR}): "
            f"{tb.strip().splitlines()[-1]}; see system_logs/supervisor.txt",
            traceback=tb,
        )
        ws.set_status(name, JobStatus.FAILED, error=error)
        return 1
    return 0 if status is JobStatus.COMPLETED else 1


def make_compute(
    ws: Workspace, name: str, cancelled: Callable[[], bool]
) -> LocalCompute | RayCompute:
    """Where the job's spec says its nodes run.

    Raises:
        PhalanxError: an unknown target, or its token cannot be read.
    """
    from phalanx.compute.local import LocalCompute
    from phalanx.compute.ray import RayCompute
    from phalanx.compute.targets import target_for
    from phalanx.spec import JobSpec

    spec = JobSpec.model_validate(ws.get_job(name).spec)
    target = target_for(spec.compute, ws)
    if target is None:
        return LocalCompute()
    return RayCompute(target, target.token_value(ws), cancelled=cancelled)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
