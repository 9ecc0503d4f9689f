"""Sweep jobs run as users run them: ``phalanx job create -f sweep.yml``, real trial
jobs in the queue, the sweep's controller a real process, the server and scheduler
killed mid-sweep.

Trials here are tiny: a script that logs its score a few times. Which trials are
good or bad is decided by the script from its trial number (``<sweep>_<n>``), so
what each early-termination policy must do is known in advance.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import servers
from conftest import LOCAL_AND_SERVER, Cli, workspace_processes

pytestmark = pytest.mark.slow

TRAIN = """
import argparse, os, time
from phalanx.train.metrics import log_metric

p = argparse.ArgumentParser()
p.add_argument("--x", type=float, default=0.5)
p.add_argument("--opt", default="sgd")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--by-number", action="store_true")
a = p.parse_args()
steps, pause = a.steps, 0.3  # a stop lands before the script ends
score = 1 - abs(a.x - 0.3) + (0.01 if a.opt == "adam" else 0)
if a.by_number:  # trials 0 and 1 are good, 2 and 3 bad (and slow: they are stopped)
    number = int(os.environ["PHALANX_JOB_NAME"].rsplit("_", 1)[1])
    score = {0: 0.8, 1: 0.9, 2: 0.1, 3: 0.2}[number]
    if number >= 2:
        steps, pause = 40, 0.5
for step in range(steps):
    log_metric("score", score, step=step)
    time.sleep(pause)
"""


def write_sweep(cli: Cli, name: str, body: str) -> Path:
    cli.write("src/train.py", TRAIN)
    return cli.write(name, "type: sweep\n" + body)


HELLO = """
$schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
experiment_name: hello-sweep
trial:
  code: src
  command: >-
    python train.py --x ${{search_space.x}} --opt ${{search_space.opt}}
    --steps ${{inputs.steps}}
inputs:
  steps: 3
sampling_algorithm: {type: random, seed: 5}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
  opt: {type: choice, values: [sgd, adam]}
objective: {primary_metric: score, goal: maximize}
early_termination: {type: bandit, slack_factor: 0.5, delay_evaluation: 1}
limits: {max_total_trials: 4, max_concurrent_trials: 2, timeout: 10m}
"""


def sweep_view(cli: Cli, name: str) -> dict[str, Any]:
    return cli.show(name)["sweep"]


def trial_jobs(cli: Cli, sweep: str) -> list[dict[str, Any]]:
    out = cli.run("job", "list", "--parent", sweep, "--json", "--limit", "1000", check=True)
    return list(json.loads(out.stdout))


def stamp(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def most_at_once(jobs: list[dict[str, Any]]) -> int:
    """The most attempts of these jobs that ran at the same time."""
    edges = []
    for job in jobs:
        for attempt in job["attempts"]:
            edges.append((stamp(attempt["started_at"]), 1))
            edges.append((stamp(attempt["ended_at"]), -1))
    running = most = 0
    for _, change in sorted(edges):
        running += change
        most = max(most, running)
    return most


@LOCAL_AND_SERVER
def test_azure_mls_hello_sweep_runs_its_trials_as_jobs(cli: Cli) -> None:
    spec = write_sweep(cli, "sweep.yml", HELLO)
    name = cli.create(spec)
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=240)
    assert sweep["status"] == "Completed", sweep
    assert sweep["type"] == "sweep"
    view = sweep["sweep"]
    trials = view["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert [t["job_name"] for t in trials] == [f"{name}_{n}" for n in range(4)]

    jobs = [cli.show(j["name"]) for j in trial_jobs(cli, name)]
    assert sorted(j["name"] for j in jobs) == sorted(t["job_name"] for t in trials)
    assert {j["parent"] for j in jobs} == {name}
    assert {j["experiment_name"] for j in jobs} == {"hello-sweep"}
    assert most_at_once(jobs) <= 2
    by_name = {j["name"]: j for j in jobs}
    for trial in trials:
        x, opt = trial["params"]["x"], trial["params"]["opt"]
        assert 0 <= x <= 1 and opt in ("sgd", "adam")
        job = by_name[trial["job_name"]]
        # The values are the trial's MLflow params, as text.
        assert job["params"] == {"x": str(x), "opt": opt}
        if trial["state"] == "completed":
            assert job["status"] == "Completed"
            expected = 1 - abs(x - 0.3) + (0.01 if opt == "adam" else 0)
            assert trial["value"] == pytest.approx(expected)
            assert [s for s, _ in trial["curve"]] == [0, 1, 2]
        else:  # stopped by the bandit policy: its job ends Canceled, saying why
            assert trial["state"] == "pruned"
            assert trial["reason"].startswith("bandit: ")
            assert job["status"] == "Canceled"
            assert job["error"]["message"] == trial["reason"]
    completed = [t for t in trials if t["state"] == "completed"]
    best = max(completed, key=lambda t: t["value"])
    assert view["best_trial"] == best["number"]
    assert view["ended_reason"] == "made limits.max_total_trials (4) trials"

    # A workspace's job list has the sweep, not its trials (Azure ML's `job list`),
    # unless asked: --trials, or --parent for one sweep's.
    top = [j["name"] for j in json.loads(cli.run("job", "list", "--json", check=True).stdout)]
    assert top == [name], top
    every = cli.run("job", "list", "--trials", "--json", "--limit", "100", check=True).stdout
    assert sorted(j["name"] for j in json.loads(every)) == sorted([name, *by_name])
    shown = cli.run("job", "show", name, check=True).stdout
    assert f"best trial         {best['number']} ({best['job_name']})" in shown
    # Its trials write no file: no command that would register an empty folder.
    assert f"register it        nothing to: {best['job_name']} wrote no output or" in shown
    assert view["register"] is None
    # On an 80-column terminal: the trials table cuts no job name, and a stop's reason
    # goes under its trial's row, wrapped at spaces.
    cli.env["COLUMNS"] = "80"
    narrow = cli.run("job", "show", name, check=True).stdout
    cli.env["COLUMNS"] = "200"
    table = narrow[narrow.index("trials by score (maximize)") :].splitlines()
    assert table[1].split()[:4] == ["#", "JOB", "STATUS", "score"], table
    assert max(map(len, table)) <= 80, narrow
    words = narrow.split()
    for trial in trials:
        assert trial["job_name"] in words, narrow
        if trial["reason"]:
            assert " ".join(trial["reason"].split()) in " ".join(words), narrow


GRID = """
trial:
  code: src
  command: python score.py --a ${{search_space.a}} --b ${{search_space.b}}
sampling_algorithm: grid
search_space:
  a: {type: choice, values: [x, "hello world", "it's $HOME `z`"]}  # each one argument
  b: {type: randint, upper: 2}
objective: {primary_metric: score, goal: minimize}
limits: {max_total_trials: 10, max_concurrent_trials: 3}
"""

VALUES = ["x", "hello world", "it's $HOME `z`"]
MLFLOW_SCORE = f"""
import argparse, mlflow
p = argparse.ArgumentParser()
p.add_argument("--a")
p.add_argument("--b", type=int)
a = p.parse_args()
mlflow.log_metric("score", {VALUES!r}.index(a.a) * 10 + a.b, step=0)
"""


def test_grid_covers_the_grid_once_reading_what_mlflow_logged(cli: Cli) -> None:
    cli.write("src/score.py", MLFLOW_SCORE)
    spec = cli.write("grid.yml", "type: sweep\n" + GRID)
    name = cli.create(spec)
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=240)
    assert sweep["status"] == "Completed", sweep
    trials = sweep["sweep"]["trials"]
    points = sorted((t["params"]["a"], t["params"]["b"]) for t in trials)
    assert points == sorted((a, b) for a in VALUES for b in (0, 1))
    # The objective is what each trial logged through MLflow, its value one argument.
    for trial in trials:
        assert trial["value"] == VALUES.index(trial["params"]["a"]) * 10 + trial["params"]["b"]
    assert sweep["sweep"]["ended_reason"] == "covered the grid (6 points)"
    assert sweep["sweep"]["best_value"] == 0
    jobs = [cli.show(j["name"]) for j in trial_jobs(cli, name)]
    assert len(jobs) == 6 and most_at_once(jobs) <= 3


POLICIES = {
    "bandit": "{type: bandit, slack_factor: 0.2, delay_evaluation: 1}",
    "median stopping": "{type: median_stopping, delay_evaluation: 1}",
    "truncation selection": "{type: truncation_selection, truncation_percentage: 50,"
    " delay_evaluation: 1}",
    "asha": "{type: asha, min_resource: 1, reduction_factor: 2}",
}

ONE_AT_A_TIME = """
trial:
  code: src
  command: python train.py --x ${{search_space.x}} --steps 4 --by-number
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
objective: {primary_metric: score, goal: maximize}
limits: {max_total_trials: 3, max_concurrent_trials: 1}
"""


def test_each_policy_stops_the_bad_trials(cli: Cli) -> None:
    names = {}
    for policy, block in POLICIES.items():
        spec = write_sweep(cli, "policy.yml", ONE_AT_A_TIME + f"early_termination: {block}\n")
        names[policy] = cli.create(spec)
    for policy, name in names.items():
        sweep = cli.wait(name, ("Completed", "Failed"), timeout=300)
        assert sweep["status"] == "Completed", sweep
        trials = sweep["sweep"]["trials"]
        assert [t["state"] for t in trials] == ["completed", "completed", "pruned"]
        assert sweep["sweep"]["best_trial"] == 1
        for trial in trials[2:]:
            assert trial["reason"].startswith(f"{policy}: "), trial
            job = cli.show(trial["job_name"])
            assert job["status"] == "Canceled"
            assert job["error"]["message"] == trial["reason"]
            # Stopped early: far from its 40 steps.
            assert len(trial["curve"]) < 20


LEADER = """
import os, pathlib, sys, time
from phalanx.train.metrics import log_metric
number = int(os.environ["PHALANX_JOB_NAME"].rsplit("_", 1)[1])
sync, wait = pathlib.Path(sys.argv[1]), 120.0  # the first step waits for trial 0 to start
for step in range(10):
    if number == 0:  # the bad trial, always a step ahead: it logs, then lets trial 1 log
        log_metric("score", 0.05, step=step)
        (sync / str(step)).touch()
    else:
        deadline = time.monotonic() + wait
        while not (sync / str(step)).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        wait = 3.0 if (sync / str(step)).exists() else 0.0  # trial 0 was stopped
        time.sleep(0.3)
        log_metric("score", 1.0, step=step)
    time.sleep(0.3)
"""

LEADING = """
trial:
  code: src
  command: python leader.py ${{inputs.sync}}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
objective: {primary_metric: score, goal: maximize}
early_termination: {type: bandit, slack_factor: 0.2, delay_evaluation: 1}
limits: {max_total_trials: 2, max_concurrent_trials: 2}
"""


def test_a_trial_that_always_logs_first_is_compared_with_its_peer(cli: Cli) -> None:
    # Trial 0 logs each step 0.3 s before trial 1 does, 20 times worse: it is judged at
    # a step once trial 1 gets there, and stopped.
    sync = cli.workdir / "sync"
    sync.mkdir()
    cli.write("src/leader.py", LEADER)
    spec = cli.write("leading.yml", "type: sweep\n" + LEADING + f"inputs: {{sync: '{sync}'}}\n")
    sweep = cli.wait(cli.create(spec), ("Completed", "Failed"), timeout=180)
    assert sweep["status"] == "Completed", sweep
    first, second = sweep["sweep"]["trials"]
    assert first["state"] == "pruned", first
    assert first["reason"].startswith("bandit: 0.05 not within 20 % of best 1 at step"), first
    assert len(first["curve"]) < 10
    assert second["state"] == "completed" and sweep["sweep"]["best_trial"] == 1


BAYESIAN = """
trial:
  code: src
  command: python train.py --x ${{search_space.x}} --opt ${{search_space.opt}}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
  opt: {type: choice, values: [sgd, adam]}
sampling_algorithm: {type: bayesian, seed: 11, n_startup_trials: 2}
objective: {primary_metric: score, goal: maximize}
limits: {max_total_trials: 3, max_concurrent_trials: 1}
"""


def test_a_seeded_bayesian_sweep_proposes_the_same_values_again(cli: Cli) -> None:
    spec = write_sweep(cli, "bayes.yml", BAYESIAN)
    first, second = cli.create(spec), cli.create(spec)
    runs = [cli.wait(n, ("Completed", "Failed"), timeout=300) for n in (first, second)]
    params = [[t["params"] for t in run["sweep"]["trials"]] for run in runs]
    assert all(run["status"] == "Completed" for run in runs)
    assert len(params[0]) == 3
    assert params[0] == params[1]


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_a_sweep_goes_on_after_its_server_scheduler_and_controller_are_killed(
    cli: Cli,
) -> None:
    body = HELLO.replace("max_total_trials: 4", "max_total_trials: 6").replace(
        "--steps ${{inputs.steps}}", "--steps 20"
    )
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    deadline = time.monotonic() + 180
    while len([t for t in sweep_view(cli, name)["trials"] if t["state"] != "started"]) < 2:
        assert time.monotonic() < deadline, sweep_view(cli, name)
        time.sleep(0.3)
    # Everything of the workspace but the trials' own jobs: the server, its scheduler,
    # the sweep's controller.
    assert cli.server is not None
    servers.kill_phalanx_server(cli.server)
    killed = []
    for proc in workspace_processes(cli.home):
        cmdline = proc.cmdline()
        if "phalanx.jobs.schedulerd" in cmdline or cmdline[-1:] == [name]:
            proc.send_signal(signal.SIGKILL)
            killed.append(cmdline[-1])
    assert name in killed
    cli.server = servers.start_phalanx_server(
        cli.home, cli.env, *cli.server_args, port=cli.server.port
    )
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=300)
    assert sweep["status"] == "Completed", sweep
    view = sweep["sweep"]
    assert view["restarts"] >= 1
    trials = view["trials"]
    assert [t["number"] for t in trials] == list(range(6))
    jobs = [cli.show(j["name"]) for j in trial_jobs(cli, name)]
    # Every trial once: no job made twice, none run again, no values drawn twice.
    assert sorted(j["name"] for j in jobs) == sorted(f"{name}_{n}" for n in range(6))
    assert all(len(j["attempts"]) == 1 for j in jobs)
    assert len({t["params"]["x"] for t in trials}) == 6
    assert all(t["state"] in ("completed", "pruned") for t in trials)


def test_canceling_a_sweep_cancels_its_trials(cli: Cli) -> None:
    body = HELLO.replace("--steps ${{inputs.steps}}", "--steps 600")
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    deadline = time.monotonic() + 120
    while sum(j["status"] == "Running" for j in trial_jobs(cli, name)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    cli.run("job", "cancel", name, check=True)
    sweep = cli.show(name)
    assert sweep["status"] == "Canceled"
    jobs = [cli.wait(j["name"], ("Canceled",), timeout=60) for j in trial_jobs(cli, name)]
    assert len(jobs) == 2
    for job in jobs:
        assert job["error"]["message"] == "the sweep was canceled"
    assert {t["state"] for t in sweep["sweep"]["trials"]} == {"canceled"}


SPOT = """
trial:
  code: src
  command: python resume.py --x ${{search_space.x}}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
objective: {primary_metric: score, goal: maximize}
queue_settings: {job_tier: spot}
limits: {max_total_trials: 1}
"""

RESUME = """
import argparse, os, pathlib, time
from phalanx.train.metrics import log_metric
p = argparse.ArgumentParser()
p.add_argument("--x", type=float)
a = p.parse_args()
mark = pathlib.Path(os.environ["PHALANX_CHECKPOINT_DIR"]) / "step"
start = int(mark.read_text()) if mark.exists() else 0
for step in range(start, 12):
    log_metric("score", a.x, step=step)
    mark.write_text(str(step + 1))
    time.sleep(0.4 if start or step < 3 else 120)  # the first attempt waits to be preempted
print("started at", start)
"""


def test_a_spot_sweeps_trial_resumes_after_preemption_and_counts_once(cli: Cli) -> None:
    cli.write("src/resume.py", RESUME)
    name = cli.create(cli.write("spot.yml", "type: sweep\n" + SPOT))
    trial = f"{name}_0"
    deadline = time.monotonic() + 120
    while True:
        view = sweep_view(cli, name)
        if view["trials"] and len(view["trials"][0]["curve"]) >= 3:
            break
        assert time.monotonic() < deadline, view
        time.sleep(0.3)
    cli.run("job", "preempt", trial, check=True)
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert sweep["status"] == "Completed", sweep
    job = cli.show(trial)
    assert job["status"] == "Completed"
    assert [a["cause"] for a in job["attempts"]] == ["preemption", None]
    # The second attempt went on from the checkpoint the first left.
    log = cli.run("job", "stream", trial, check=True).stdout
    starts = [line for line in log.splitlines() if line.startswith("started at")]
    assert starts[-1] != "started at 0", log
    assert len(sweep["sweep"]["trials"]) == 1
    assert [s for s, _ in sweep["sweep"]["trials"][0]["curve"]] == list(range(12))
    # Its trial wrote a checkpoint: the command shown registers it.
    register = sweep["sweep"]["register"]
    assert register.endswith(f"--path azureml://jobs/{trial}/outputs/checkpoints"), register
    cli.run(*register.split()[1:], check=True)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("x: {type: uniform, min_value: 0, max_value: 1}", "x: {type: gaussian, mu: 0}"),
         "sweep.yml:14: search_space.x.type: unknown distribution 'gaussian'"),
        (("x: {type: uniform, min_value: 0, max_value: 1}",
          "x: {type: uniform, min_value: 1, max_value: 0}"),
         "sweep.yml:14: search_space.x.max_value: max_value (0) must be greater than "
         "min_value (1)"),
        (("--opt ${{search_space.opt}}", "--opt ${{search_space.optimizer}}"),
         "sweep.yml:7: trial.command: ${{search_space.optimizer}} names nothing in "
         "search_space"),
        (("  code: src\n  command:", "  code: src\ncommand:"),
         "sweep.yml:7: command: command belongs under trial: in a sweep job"),
        (("x: {type: uniform, min_value: 0, max_value: 1}",
          "x: {type: normal, mu: .nan, sigma: 1}"),
         "sweep.yml:14: search_space.x.mu: must be a finite number; got nan"),
        (("max_total_trials: 4, max_concurrent_trials: 2",
          "max_total_trials: 1000, max_concurrent_trials: 1000"),
         "sweep.yml:18: limits.max_concurrent_trials: at most 100 trials run at once"),
    ],
)  # fmt: skip
def test_bad_sweep_specs_get_one_line_and_exit_2(
    cli: Cli, change: tuple[str, str], expected: str
) -> None:
    spec = write_sweep(cli, "sweep.yml", HELLO.replace(*change))
    proc = cli.run("job", "create", "-f", spec.name)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {expected}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert not (cli.home / "jobs").exists() or not any((cli.home / "jobs").iterdir())


def test_a_sweep_stops_at_its_timeout(cli: Cli) -> None:
    body = HELLO.replace("--steps ${{inputs.steps}}", "--steps 600").replace(
        "timeout: 10m", "timeout: 12"
    )
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    sweep = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=120)
    # No trial could finish: the sweep fails, saying why.
    assert sweep["status"] == "Failed"
    assert "the sweep reached limits.timeout (12 s)" in sweep["error"]["message"]
    for job in trial_jobs(cli, name):
        assert cli.wait(job["name"], ("Canceled",), timeout=60)["status"] == "Canceled"
    assert os.path.isdir(sweep["job_dir"])


def test_a_sweep_whose_first_trials_all_fail_makes_no_more(cli: Cli) -> None:
    cli.write("src/broken.py", "import sys\nsys.exit('no such optimiser: ' + sys.argv[1])\n")
    body = HELLO.replace("train.py", "broken.py").replace(
        "max_concurrent_trials: 2", "max_concurrent_trials: 1"
    )
    name = cli.create(
        write_sweep(cli, "sweep.yml", body.replace("max_total_trials: 4", "max_total_trials: 20"))
    )
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert sweep["status"] == "Failed"
    trials = sweep["sweep"]["trials"]
    assert [t["state"] for t in trials] == ["failed"] * 3
    message = sweep["error"]["message"]
    assert "its first 3 trials failed and none completed" in message
    assert f"trial 0 ({name}_0): " in message and "no such optimiser" in message


def test_a_sweep_whose_metric_is_never_logged_stops_at_its_first_trial(cli: Cli) -> None:
    body = HELLO.replace("primary_metric: score", "primary_metric: scores")
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    sweep = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert sweep["status"] == "Failed"
    # The first trial that completed is enough: no trial was made after the first two.
    trials = sweep["sweep"]["trials"]
    assert [t["number"] for t in trials] == [0, 1], trials
    ended = [t for t in trials if t["state"] == "completed"]
    assert ended, trials
    first = ended[0]
    said = "logged no 'scores' (objective.primary_metric), only 'score': did you mean 'score'?"
    assert first["reason"] == said and first["value"] is None
    assert sweep["error"]["message"] == (
        f"no trial completed with a value of 'scores': trial {first['number']} "
        f"({first['job_name']}) {said}"
    )
    # A trial is what its job is: Completed in the job list, completed in the sweep's.
    jobs = {j["name"]: j["status"] for j in trial_jobs(cli, name)}
    for trial in trials:
        assert trial["state"] in ("completed", "canceled"), trial
        assert jobs[trial["job_name"]] == trial["state"].capitalize()
    shown = cli.run("job", "show", name, check=True).stdout
    row = next(line for line in shown.splitlines() if first["job_name"] in line.split())
    assert row.split()[2] == "completed", shown


def test_canceling_a_sweep_whose_controller_is_gone_stops_its_trials(cli: Cli) -> None:
    body = HELLO.replace("--steps ${{inputs.steps}}", "--steps 600")
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    deadline = time.monotonic() + 120
    while sum(j["status"] == "Running" for j in trial_jobs(cli, name)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    controller = [
        p
        for p in workspace_processes(cli.home)
        if "phalanx.jobs.supervisor" in p.cmdline() and p.cmdline()[-1:] == [name]
    ]
    assert len(controller) == 1
    controller[0].send_signal(signal.SIGKILL)
    cli.run("job", "cancel", name, check=True)
    assert cli.show(name)["status"] == "Canceled"
    for job in trial_jobs(cli, name):
        assert cli.wait(job["name"], ("Canceled",), timeout=60)["status"] == "Canceled"


def test_a_sweeps_trial_names_are_kept_for_it(cli: Cli) -> None:
    cli.write("src/train.py", TRAIN)
    plain = cli.write("plain.yml", "command: 'true'\n")
    cli.wait(cli.create(plain, "name=pre_1"), ("Completed",))
    spec = write_sweep(cli, "sweep.yml", HELLO)
    taken = cli.run("job", "create", "-f", str(spec), "--set", "name=pre")
    assert taken.returncode == 2
    assert taken.stderr.startswith(
        "error: name: a sweep named 'pre' names its trials pre_0, pre_1, …, and job 'pre_1' exists"
    ), taken.stderr
    name = cli.create(
        spec, "name=kept", "limits.max_total_trials=1", "limits.max_concurrent_trials=1"
    )
    refused = cli.run("job", "create", "-f", str(plain), "--set", "name=kept_7")
    assert refused.returncode == 2
    assert "'kept_7' is kept for trial 7 of sweep 'kept'" in refused.stderr
    assert cli.wait(name, ("Completed", "Failed"), timeout=120)["status"] == "Completed"


def _supervised(cli: Cli) -> set[str]:
    """The jobs of the workspace that have a supervisor process now."""
    names = set()
    for proc in workspace_processes(cli.home):
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            if "phalanx.jobs.supervisor" in cmdline:
                names.add(cmdline[-1])
    return names


def test_queued_trials_cost_no_process_until_they_start(cli: Cli) -> None:
    """Six trials at once on a target that runs one: the others wait as records in the
    queue, and only the sweep's controller and a trial that started have a supervisor."""
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "none",
            "--cpus", "1", check=True)  # fmt: skip
    body = HELLO.replace(
        "max_total_trials: 4, max_concurrent_trials: 2",
        "max_total_trials: 6, max_concurrent_trials: 6",
    ).replace("--steps ${{inputs.steps}}", "--steps 600")
    name = cli.create(write_sweep(cli, "sweep.yml", body))
    deadline = time.monotonic() + 120
    looks = 0
    while looks < 3:
        assert time.monotonic() < deadline, trial_jobs(cli, name)
        waiting = {j["name"] for j in trial_jobs(cli, name) if j["status"] == "Queued"}
        supervised = _supervised(cli)
        if len(waiting) >= 4:
            # At most one trial of those just seen waiting has started since (one slot).
            assert len(supervised & waiting) <= 1, (supervised, waiting)
            assert len(supervised) <= 3, supervised  # the controller, a trial, its successor
            looks += 1
        time.sleep(0.5)
    cli.run("job", "cancel", name, check=True)
    jobs = trial_jobs(cli, name)
    assert len(jobs) == 6
    for job in jobs:  # the waiting ones too: nothing runs them, so the cancel ends them
        assert cli.wait(job["name"], ("Canceled",), timeout=60)["status"] == "Canceled"
