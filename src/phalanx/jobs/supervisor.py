"""The detached process that runs one job: ``python -m phalanx.jobs.supervisor NAME``.

Started by ``phalanx job create`` in a session of its own, so it outlives the
CLI and a Ctrl-C at the terminal never reaches it. SIGTERM (from ``phalanx
job cancel``) stops the job. Its log is the job's ``system_logs/supervisor.txt``.
A bug in the runner still ends the job, as Failed with a system error, and
leaves no process of the job behind.
"""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from collections.abc import Callable

from phalanx.compute.local import LocalCompute
from phalanx.compute.ray import RayCompute
from phalanx.compute.targets import target_for
from phalanx.errors import PhalanxError
from phalanx.jobs.runner import JobRunner
from phalanx.launch.procs import become_subreaper
from phalanx.spec import JobSpec
from phalanx.storage.redact import RedactingFormatter, redact
from phalanx.workspace import FailureCause, JobStatus, RootCause, Workspace


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
    become_subreaper()
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
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
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
    spec = JobSpec.model_validate(ws.get_job(name).spec)
    target = target_for(spec.compute, ws)
    if target is None:
        return LocalCompute()
    return RayCompute(target, target.token_value(ws), cancelled=cancelled)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
