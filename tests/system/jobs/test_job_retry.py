"""Attempts: retries within budget, preemption that loses no step, budgets kept apart."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil

from conftest import LOCAL_AND_SERVER, Cli, job_processes_under

# One step = one all-reduce across ranks; rank 0 records progress, and on a
# preemption notice rank 0 saves the step reached and every rank exits 143.
STEPS = """
import json, os, sys, time
import torch
import torch.distributed as dist
from phalanx.train import cleanup, init, watch_preemption

ctx = init()
preemption = watch_preemption()
state = os.path.join(os.environ["PHALANX_CHECKPOINT_DIR"], "state.json")
start = json.load(open(state))["step"] + 1 if os.path.exists(state) else 0
out = open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"steps_{ctx.rank}.txt"), "a")
for step in range(start, int(sys.argv[1])):
    t = torch.ones(1)
    dist.all_reduce(t)
    out.write(f"{os.environ['PHALANX_ATTEMPT']} {step}\\n")
    out.flush()
    time.sleep(0.05)
    if preemption.requested(ctx):
        if ctx.rank == 0:
            with open(state + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(state + ".tmp", state)
        preemption.exit()
cleanup()
"""

TWO_NODES = """
command: python steps.py {steps}
code: src
resources: {{instance_count: 2}}
distribution: {{type: pytorch, process_count_per_instance: 1}}
retry: {{max_preemptions: {max_preemptions}, preemption_grace: 20}}
"""


def _steps_done(job_dir: Path, rank: int) -> list[tuple[int, int]]:
    path = job_dir / "outputs" / f"steps_{rank}.txt"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().split("\n") if line]  # type: ignore[misc]


def _wait_for_step(cli: Cli, name: str, step: int) -> None:
    deadline = time.monotonic() + 90
    while not any(s >= step for _, s in _steps_done(cli.home / "jobs" / name, 0)):
        assert time.monotonic() < deadline, f"job {name} never reached step {step}"
        assert cli.show(name)["status"] in ("Queued", "Preparing", "Running")
        time.sleep(0.2)


@LOCAL_AND_SERVER
def test_preempted_job_resumes_and_loses_no_step(cli: Cli) -> None:
    cli.write("src/steps.py", STEPS)
    spec = cli.write("job.yml", TWO_NODES.format(steps=160, max_preemptions=2))
    name = cli.create(spec)
    _wait_for_step(cli, name, 30)
    out = cli.run("job", "preempt", name, "--node", "1", check=True)
    assert "preemption of node(s) 1 requested" in out.stdout
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "preemption"),
        ("Succeeded", None),
    ]
    assert "node(s) [1] preempted" in job["attempts"][0]["error"]["message"]
    for rank in (0, 1):
        done = _steps_done(Path(job["job_dir"]), rank)
        # Every step exactly once across the two attempts: nothing lost, nothing redone.
        assert sorted(step for _, step in done) == list(range(160))
        assert {attempt for attempt, _ in done} == {1, 2}
    # The notice reached every rank; each saved its part and left with 143.
    attempt_1 = Path(job["job_dir"]) / "system_logs" / "attempt_1"
    for rank in (0, 1):
        ended = json.loads((attempt_1 / f"rank_{rank}.json").read_text())
        assert ended["exit_code"] == 143 and "SIGTERM" in ended["signals_received"]


def test_sigterm_to_a_node_counts_as_preemption_and_budget_is_kept(cli: Cli) -> None:
    cli.write("src/steps.py", STEPS)
    spec = cli.write("job.yml", TWO_NODES.format(steps=100000, max_preemptions=0))
    name = cli.create(spec)
    _wait_for_step(cli, name, 10)
    launcher = next(
        p
        for p in job_processes_under(cli.home)
        if "torch.distributed.run" in p.cmdline() and "--node-rank=1" in p.cmdline()
    )
    launcher.send_signal(signal.SIGTERM)  # how a spot eviction reaches a node
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=60)
    # No preemption allowed: the job fails, as a preemption, after one attempt.
    assert job["status"] == "Failed"
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [("Failed", "preemption")]
    assert not psutil.pid_exists(launcher.pid) or launcher.status() == psutil.STATUS_ZOMBIE


def test_always_failing_rank_fails_after_exactly_max_attempts(cli: Cli) -> None:
    cli.write("src/bad.py", "raise ValueError('always broken')\n")
    spec = cli.write("job.yml", "command: python bad.py\ncode: src\nretry: {max_attempts: 3}\n")
    proc = cli.run("run", str(spec))
    assert proc.returncode == 1
    [listed] = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    job = cli.show(listed["name"])
    assert job["status"] == "Failed"
    assert [(a["status"], a["cause"], a["exit_code"]) for a in job["attempts"]] == [
        ("Failed", "user_error", 1)
    ] * 3
    assert job["error"]["message"] == "ValueError: always broken"
    assert "ValueError: always broken" in proc.stdout
    notes = [a["note"] for a in job["attempts"]]
    assert notes[0].startswith("retried: attempt 1 of 3 failed (user_error)")
    assert "the same error as the attempt before" in notes[1]
    assert notes[2] == "not retried: attempt 3 of retry.max_attempts=3"


def test_transient_failure_is_retried_and_the_attempt_is_visible_to_the_script(cli: Cli) -> None:
    cli.write(
        "src/flaky.py",
        "import os, sys\nprint('attempt', os.environ['PHALANX_ATTEMPT'])\n"
        "sys.exit(75 if os.environ['PHALANX_ATTEMPT'] == '1' else 0)\n",
    )
    spec = cli.write(
        "job.yml",
        "command: python flaky.py\ncode: src\n"
        "retry: {max_attempts: 2, retry_on_exit_codes: [75]}\n",
    )
    proc = cli.run("run", str(spec))
    assert proc.returncode == 0, proc.stdout
    assert "attempt 1" in proc.stdout and "attempt 2" in proc.stdout
    [listed] = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    job = cli.show(listed["name"])
    assert [(a["status"], a["exit_code"]) for a in job["attempts"]] == [
        ("Failed", 75),
        ("Succeeded", 0),
    ]


def test_exit_code_not_listed_is_not_retried(cli: Cli) -> None:
    spec = cli.write(
        "job.yml",
        "command: exit 3\nretry: {max_attempts: 5, retry_on_exit_codes: [75]}\n",
    )
    assert cli.run("run", str(spec)).returncode == 1
    [listed] = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    assert len(cli.show(listed["name"])["attempts"]) == 1


def test_preempt_refuses_a_job_that_is_not_running(cli: Cli) -> None:
    spec = cli.write("job.yml", "name: short\ncommand: echo hi\nresources: {instance_count: 2}\n")
    cli.run("run", str(spec), check=True)
    proc = cli.run("job", "preempt", "short")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "error: job 'short' is Completed; only a Running job can be preempted"
    )


def test_rank_killed_with_its_whole_group_is_infrastructure_not_preemption(cli: Cli) -> None:
    # Rank 1's wrapper dies with its command, so it leaves no record, while
    # torchrun's stop sends SIGTERM to rank 0: that must not pass for a preemption.
    cli.write("src/steps.py", STEPS)
    spec = cli.write(
        "job.yml",
        "command: python steps.py 100000\ncode: src\n"
        "distribution: {type: pytorch, process_count_per_instance: 2}\n",
    )
    name = cli.create(spec)
    _wait_for_step(cli, name, 5)
    wrapper = next(
        p
        for p in job_processes_under(cli.home)
        if "phalanx.launch.worker" in p.cmdline() and p.environ().get("RANK") == "1"
    )
    os.killpg(os.getpgid(wrapper.pid), signal.SIGKILL)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=60)
    assert job["status"] == "Failed"
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [("Failed", "infrastructure")]
    assert job["error"]["rank"] == 1
    assert "without a record" in job["error"]["message"]


def test_attempt_that_finishes_within_the_grace_is_a_success(cli: Cli) -> None:
    cli.write(
        "src/finish.py",
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\ntime.sleep(600)\n",
    )
    spec = cli.write("job.yml", "name: finisher\ncommand: python finish.py\ncode: src\n")
    cli.create(spec)
    cli.wait("finisher", ("Running",))
    log = cli.home / "jobs" / "finisher" / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + 60
    while not (log.exists() and "ready" in log.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cli.run("job", "preempt", "finisher", check=True)
    job = cli.wait("finisher", ("Completed", "Failed", "Canceled"), timeout=60)
    assert job["status"] == "Completed"
    assert [a["status"] for a in job["attempts"]] == ["Succeeded"]
