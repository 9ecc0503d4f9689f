"""Nothing of a job survives it: background children, forks during the stop, env-less escapees."""

from __future__ import annotations

import os
import signal
import time

import psutil

from conftest import Cli, job_processes_under, workspace_processes


def _pids_with_arg(arg: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if arg in (proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def _wait_for(arg: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not _pids_with_arg(arg):
        assert time.monotonic() < deadline, f"no process with argument {arg} started"
        time.sleep(0.1)


def test_completed_job_leaves_no_background_process(cli: Cli) -> None:
    # A daemon in its own session and a plain background child, then success.
    spec = cli.write("job.yml", "command: (setsid sleep 301 &) ; sleep 302 & echo started\n")
    proc = cli.run("run", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    time.sleep(0.5)
    assert _pids_with_arg("301") == [] and _pids_with_arg("302") == []
    assert job_processes_under(cli.home) == []


def test_cancel_catches_processes_forked_during_the_stop(cli: Cli) -> None:
    # A spawner that ignores SIGTERM and keeps starting new sessions while being stopped.
    cli.write(
        "src/spawner.sh",
        """
        setsid bash -c 'trap "" TERM; for i in $(seq 400); do setsid sleep 303 & sleep 0.05; done' &
        echo started
        sleep 304
        """,
    )
    spec = cli.write("job.yml", "command: bash spawner.sh\ncode: src\n")
    name = cli.create(spec)
    cli.wait(name, ("Running",))
    _wait_for("303")
    cli.run("job", "cancel", name, check=True)
    time.sleep(0.5)
    assert _pids_with_arg("303") == [] and _pids_with_arg("304") == []
    assert cli.show(name)["status"] == "Canceled"


def test_process_that_clears_its_environment_is_still_stopped(cli: Cli) -> None:
    # `env -i` drops phalanx's marker; the supervisor, as subreaper, still finds it.
    spec = cli.write("job.yml", "command: setsid env -i /bin/sleep 305 & sleep 306\n")
    name = cli.create(spec)
    cli.wait(name, ("Running",))
    _wait_for("305")
    cli.run("job", "cancel", name, check=True)
    time.sleep(0.5)
    assert _pids_with_arg("305") == []


def test_killed_supervisor_is_noticed_and_its_job_cleaned_up(cli: Cli) -> None:
    spec = cli.write("job.yml", "command: sleep 307\n")
    name = cli.create(spec)
    job = cli.wait(name, ("Running",))
    _wait_for("307")
    supervisor = next(
        p
        for p in psutil.process_iter(["cmdline"])
        if "phalanx.jobs.supervisor" in (p.info["cmdline"] or []) and name in p.info["cmdline"]
    )
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)
    # The scheduler notices within a round or two, with or without a CLI call.
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=30)
    assert job["status"] == "Failed"
    assert "supervisor" in job["error"]["message"]
    assert [a["status"] for a in job["attempts"]] == ["Failed"]
    time.sleep(0.5)
    assert _pids_with_arg("307") == []


# Counts (0.2 s a step) to 600 in its first attempt, to 20 in later ones, keeping its count
# in the checkpoint folder, beside a daemon of its own that left the job's process tree
# and cleared its environment.
COUNT_BESIDE_A_DAEMON = """
command: >-
  (setsid env -i /bin/sleep $((3080 + PHALANX_ATTEMPT)) &);
  python -c "import os, time, pathlib;
  ck = pathlib.Path(os.environ['PHALANX_CHECKPOINT_DIR'], 'count');
  tmp = ck.with_name('count.tmp');
  n = int(ck.read_text()) if ck.exists() else 0;
  print('START', n, flush=True);
  [(time.sleep(0.2), tmp.write_text(str(i + 1)), os.replace(tmp, ck),
    print('STEP', i + 1, flush=True))
    for i in range(n, 600 if os.environ['PHALANX_ATTEMPT'] == '1' else 20)]"
retry: {max_attempts: 2}
"""


def test_killed_supervisor_and_scheduler_leave_nothing_running_and_the_job_resumes(
    cli: Cli,
) -> None:
    """Embedded mode after a crash of both: nobody runs a command, yet the ranks and the
    daemon end within a bound (the job's guard), and the job resumes from its checkpoint."""
    name = cli.create(cli.write("count.yml", COUNT_BESIDE_A_DAEMON))
    log = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + 90
    while "STEP 3" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the job never got to step 3"
        time.sleep(0.1)
    _wait_for("3081")
    first = job_processes_under(cli.home)  # all of the first attempt
    assert first
    for proc in workspace_processes(cli.home):
        cmdline = proc.cmdline()
        if "phalanx.jobs.schedulerd" in cmdline or "phalanx.jobs.supervisor" in cmdline:
            proc.send_signal(signal.SIGKILL)
    # No command from here on. The bound guards against ranks left running unwatched
    # until the next command (unbounded); it is generous, not a speed check.
    deadline = time.monotonic() + 30
    while [p for p in first if _alive(p)] or _pids_with_arg("3081"):
        assert time.monotonic() < deadline, "the first attempt's processes still run"
        time.sleep(0.2)
    job = cli.wait(name, ("Completed", "Failed"), timeout=120)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "infrastructure"),
        ("Succeeded", None),
    ]
    starts = [int(line.split()[1]) for line in log.read_text().splitlines()
              if line.startswith("START")]  # fmt: skip
    assert starts[0] == 0 and starts[1] >= 3  # resumed from its checkpoint
    time.sleep(0.5)
    assert _pids_with_arg("3081") == [] and _pids_with_arg("3082") == []
    assert job_processes_under(cli.home) == []


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
