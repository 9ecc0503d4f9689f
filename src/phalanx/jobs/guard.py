"""What outlives a job's supervisor: ``python -m phalanx.jobs.guard NAME``.

The scheduler starts a job's supervisor through this small process, when the job
gets its devices (:func:`phalanx.jobs.control.spawn_supervisor`). The guard
starts the supervisor as its child, passes it the signals it gets (SIGTERM is a
cancel) and waits. Both are child subreapers: while the supervisor lives the
job's orphans re-parent to it, and once it is gone, to the guard.

When the supervisor ends, however it ended (SIGKILL and the OOM killer
included), the guard stops whatever of the job is left below it: the ranks and
their launchers, and a daemon that left the job's process tree, even one that
cleared its environment (only an ancestor can still find that one). Then, if the
supervisor did not end cleanly, it makes sure the workspace's scheduler runs:
the scheduler recovers the job from its records (its attempt ends as an
``infrastructure`` failure, and the retry policy puts it back in the queue to
resume from its checkpoints).

Why a guard: the scheduler notices a lost supervisor within a second or two, but
on this machine nothing restarts a scheduler killed together with it, so the
ranks would run unwatched until the next phalanx command; and a process that
left the tree and cleared its environment carries nothing a scan of the machine
could find it by. ``PR_SET_PDEATHSIG`` on the launchers would end the ranks, but
not what escaped them. The guard costs one small process (standard library until
the supervisor ends) per job that holds devices; a queued job has neither.

Only what lies below the guard is stopped, never a process found by the job's
marker elsewhere: a supervisor that lost its lease leaves while another, under
another guard, runs the job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from phalanx.prctl import become_subreaper

GRACE_S = 2.0
"""How long what is left of the job gets to end on SIGTERM before SIGKILL."""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m phalanx.jobs.guard JOB_NAME", file=sys.stderr)
        return 2
    name = argv[0]
    become_subreaper()
    started: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "phalanx.jobs.supervisor", name],
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )
    started.append(supervisor.pid)
    code = _wait_for(supervisor.pid)
    supervisor.returncode = code  # collected above, with the orphans
    started.clear()
    _clean_up(name, code)
    return code if code >= 0 else 128 - code


def _wait_for(pid: int) -> int:
    """Wait for ``pid`` to end, collecting the orphans that re-parent here meanwhile;
    its exit code (negative: the signal that ended it)."""
    while True:
        try:
            ended, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while ``pid`` is our child
            return -int(signal.SIGKILL)
        if ended == pid:
            return os.waitstatus_to_exitcode(status)


def _clean_up(name: str, code: int) -> None:
    # Imported only now: until its supervisor ends, the guard stays small.
    from phalanx.launch.procs import sweep_descendants
    from phalanx.scheduler.process import ensure_running, poke

    home = Path(os.environ["PHALANX_HOME"]).resolve()
    left = sweep_descendants(str(home / "jobs" / name), GRACE_S)
    if left:
        print(
            f"guard[{os.getpid()}]: the supervisor of job {name} ended ({_how(code)}); "
            f"stopped {left} process(es) of the job it left",
            file=sys.stderr,
            flush=True,
        )
    if code == 0:
        poke(home)
    else:
        # It may have left its job unfinished: the scheduler recovers it, and is started
        # if it died too (nothing else would start it on this machine).
        ensure_running(home)


def _how(code: int) -> str:
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
