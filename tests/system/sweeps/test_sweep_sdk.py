"""Sweep jobs from the SDK, in Azure ML's shape: ``command(...)(lr=Uniform(...)).sweep(...)``
builds the sweep job.yml the CLI takes, runs to the end on a real workspace (its trials
are jobs whose parent is the sweep), and a bad search space is one line naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.errors import PhalanxError
from phalanx.ml import MLClient, MLError, command
from phalanx.ml.entities import SweepJob
from phalanx.ml.sweep import (
    AshaPolicy,
    BanditPolicy,
    Choice,
    GridSamplingAlgorithm,
    HyperbandPolicy,
    LogUniform,
    MedianStoppingPolicy,
    Objective,
    QUniform,
    Randint,
    RandomSamplingAlgorithm,
    TruncationSelectionPolicy,
    Uniform,
)
from phalanx.ml.sweepdict import validate
from phalanx.spec import load_any_text as load_spec_text
from phalanx.spec.loader import read_spec_file
from phalanx.workspace import JobStatus, Workspace

# A trial of a second: a metric at a few steps, best near lr = 0.01.
TRAIN = """
import argparse, math, time
from phalanx.train import log_metric
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--opt")
p.add_argument("--epochs", type=int)
a = p.parse_args()
for step in range(a.epochs):
    acc = (1 - abs(math.log(a.lr) - math.log(0.01)) / 10) * (step + 1) / a.epochs
    log_metric("acc", acc, step=step)
    time.sleep(0.1)
print("trained", a.lr, a.opt, flush=True)
"""

# Azure ML's hello-sweep, in the SDK: random sampling, a bandit policy, limits.
HELLO_SWEEP = """
import json
from azure.ai.ml import MLClient, command
from azure.ai.ml.sweep import BanditPolicy, Choice, Uniform

ml_client = MLClient()
job = command(
    code="./src",
    command="python train.py --lr ${{inputs.lr}} --opt ${{inputs.opt}} --epochs ${{inputs.epochs}}",
    inputs={"lr": 0.01, "opt": "sgd", "epochs": 4},
    experiment_name="hello-sweep",
)
job_for_sweep = job(
    lr=Uniform(min_value=0.001, max_value=0.1),
    opt=Choice(values=["sgd", "adam"]),
)
sweep_job = job_for_sweep.sweep(
    compute="local",
    sampling_algorithm="random",
    primary_metric="acc",
    goal="Maximize",
)
sweep_job.early_termination = BanditPolicy(slack_factor=0.2, evaluation_interval=1,
                                           delay_evaluation=2)
sweep_job.set_limits(max_total_trials=5, max_concurrent_trials=2, timeout=300)
returned = ml_client.create_or_update(sweep_job)
print("SUBMITTED", returned.name, returned.type)
ml_client.jobs.stream(returned.name)
done = ml_client.jobs.get(returned.name)
trials = [t.__dict__ for t in done.trials]
print("RESULT " + json.dumps({
    "type": type(done).__name__,
    "status": done.status,
    "best_child_run_id": done.properties.get("best_child_run_id"),
    "best": done.best_trial.job_name,
    "trials": trials,
    "children": [j.name for j in ml_client.jobs.list(parent_job_name=returned.name)],
    "child_statuses": [j.status for j in ml_client.jobs.list(parent_job_name=returned.name)],
    "top": [j.name for j in ml_client.jobs.list()],
}))
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with src/train.py as the current folder, on a workspace of this test only."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("PHALANX_SERVER", "PHALANX_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path


def train_job() -> Any:
    return command(
        code="src",
        command="python train.py --lr ${{inputs.lr}} --opt ${{inputs.opt}} "
        "--epochs ${{ inputs.epochs }}",
        inputs={"lr": 0.01, "opt": "sgd", "epochs": 4},
    )


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:  # an end at the instant of a start is counted first
        running += change
        peak = max(peak, running)
    return peak


@LOCAL_AND_SERVER
def test_hello_sweep_from_the_sdk_runs_to_the_end(cli: Cli) -> None:
    cli.write("src/train.py", TRAIN)
    script = cli.write("hello_sweep.py", HELLO_SWEEP.replace("from azure.ai.ml", "from phalanx.ml"))
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=cli.env,
        cwd=cli.workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    name, kind = next(line for line in out.splitlines() if line.startswith("SUBMITTED")).split()[1:]
    assert kind == "sweep"
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert result["type"] == "SweepJob" and result["status"] == "Completed"

    ws = Workspace(cli.home)
    children = [j for j in ws.list_jobs(limit=100) if j.parent == name]
    names = {j.name for j in children}
    # The trials are jobs whose parent is the sweep, five of them, each ended.
    assert len(children) == 5
    assert {t["job_name"] for t in result["trials"]} == names
    assert sorted(result["children"]) == sorted(names)  # jobs.list(parent_job_name=...)
    assert result["top"] == [name]  # jobs.list(): the sweep, not its trials (as Azure ML)
    assert all(j.status.is_terminal for j in children)
    assert JobStatus.COMPLETED in {j.status for j in children}
    # Each trial got values from its ranges, as literal inputs of its command job.
    for job in children:
        inputs = job.spec["inputs"]
        assert 0.001 <= inputs["lr"] <= 0.1 and inputs["opt"] in ("sgd", "adam")
        assert inputs["epochs"] == 4  # not searched: every trial's
        # The command has them in place; ${{inputs.epochs}} is left for the job.
        assert job.spec["command"] == (
            f"python train.py --lr {inputs['lr']} --opt {inputs['opt']} "
            "--epochs ${{inputs.epochs}}"
        )
    for trial in result["trials"]:
        spec = ws.get_job(trial["job_name"]).spec
        assert trial["params"] == {"lr": spec["inputs"]["lr"], "opt": spec["inputs"]["opt"]}
    # Never more than max_concurrent_trials at once.
    spans = [(j.started_at, j.ended_at) for j in children if j.started_at is not None]
    assert spans and all(end is not None for _, end in spans)
    assert most_at_once(spans) <= 2  # type: ignore[arg-type]
    # The best trial is the one with the best value, as Azure ML's property names it.
    valued = [t for t in result["trials"] if t["value"] is not None]
    best = max(valued, key=lambda t: t["value"])
    assert result["best"] == result["best_child_run_id"] == best["job_name"]
    # stream() printed each trial as it started and ended, then the best.
    for trial in result["trials"]:
        assert f"trial {trial['number']} {trial['job_name']} started: lr=" in out
        assert f"trial {trial['number']} {trial['job_name']} {trial['state']}" in out
    assert f"sweep {name} Completed: best trial {best['number']} ({best['job_name']})" in out


# (what is done to the hello-sweep job, the call named, the field, a phrase of the message).
BAD_SWEEPS = [
    pytest.param(lambda j: j(lr=Uniform(min_value=0.1, max_value=0.001)), "command()",
                 "inputs.lr.max_value", "max_value (0.001) must be greater than min_value (0.1)",
                 id="min-over-max-in-the-call"),
    pytest.param(lambda j: j.sweep(primary_metric="acc", goal="maximize",
                                   search_space={"lr": LogUniform(-1, -6)}), "sweep()",
                 "search_space.lr.max_value", "must be greater than min_value",
                 id="min-over-max-in-search-space"),
    pytest.param(lambda j: j(lrr=Uniform(0.1, 0.2)), "command() called", "lrr",
                 "is not a declared input; did you mean 'lr'?", id="not-an-input"),
    pytest.param(lambda j: j(lr=Choice([])), "command()", "inputs.lr.values",
                 "at least 1 item", id="empty-choice"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(primary_metric="acc", goal="most"),
                 "sweep()", "objective.goal", "must be one of minimize, maximize",
                 id="bad-goal"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize",
                     early_termination_policy=BanditPolicy()),
                 "sweep()", "early_termination.slack_factor", "give exactly one of slack_factor",
                 id="bandit-without-slack"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize", sampling_algorithm="grid"),
                 "sweep()", "search_space.lr", "grid sampling takes choice and randint only",
                 id="grid-of-a-range"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize", sampling_algorithm="genetic"),
                 "sweep()", "sampling_algorithm",
                 "must be one of random, grid, bayesian; got 'genetic'",
                 id="unknown-algorithm"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize", max_total_trials=2,
                     max_concurrent_trials=3),
                 "sweep()", "limits.max_concurrent_trials", "is more than max_total_trials (2)",
                 id="more-at-once-than-in-all"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize",
                     early_termination_policy=HyperbandPolicy(min_resource=4, max_resource=2)),
                 "sweep()", "early_termination.max_resource", "must be greater than min_resource",
                 id="hyperband-backwards"),
    pytest.param(lambda j: Uniform(min_value=0.1, max_vale=0.2), "Uniform()", "max_vale",
                 "did you mean 'max_value'?", id="misspelt-keyword"),
    pytest.param(lambda j: j(lr=Uniform(0.001, 0.1)).sweep(
                     primary_metric="acc", goal="maximize", search_space={"opt": [1, 2]}),
                 "sweep()", "search_space.opt", "must be Choice(...), Uniform(...)",
                 id="a-list-for-a-distribution"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "source", "field", "phrase"), BAD_SWEEPS)
def test_a_bad_sweep_is_one_line_naming_the_field(
    change: Any, source: str, field: str, phrase: str, here: Path
) -> None:
    with pytest.raises(MLError) as caught:
        change(train_job())
    err = caught.value
    assert (err.source, err.field) == (source, field), str(err)
    assert phrase in str(err) and "\n" not in str(err), str(err)
    assert str(err).startswith(f"{source}: {field}: ")


def test_an_input_that_was_searched_and_then_dropped_is_named_at_submission(here: Path) -> None:
    sweep_job = train_job()(lr=Uniform(0.001, 0.1), opt=Choice(["sgd", "adam"])).sweep(
        primary_metric="acc", goal="maximize"
    )
    # lr is neither searched nor an input any more; the command still names it.
    sweep_job.search_space = {"opt": Choice(["sgd"])}
    client = MLClient()
    with pytest.raises(MLError) as caught:
        client.jobs.create_or_update(sweep_job)
    err = caught.value
    assert err.source == "sweep()" and err.field is not None and err.field.startswith("trial")
    assert "${{inputs.lr}} names no input; declared inputs: epochs, opt" in str(err)
    # A command whose inputs are distributions is a sweep to make, not a job to submit.
    with pytest.raises(MLError) as caught:
        client.jobs.create_or_update(train_job()(lr=Uniform(0.001, 0.1)))
    assert caught.value.field == "inputs.lr" and "job.sweep(primary_metric=" in str(caught.value)
    assert list(client.jobs.list()) == []  # nothing was submitted


HELLO_YAML = """
type: sweep
experiment_name: hello-sweep
trial:
  code: src
  command: >-
    python train.py --lr ${{search_space.lr}} --opt ${{search_space.opt}}
    --epochs ${{ inputs.epochs }}
inputs:
  epochs: 4
compute: local
search_space:
  lr: {type: uniform, min_value: 0.001, max_value: 0.1}
  opt: {type: choice, values: [sgd, adam]}
sampling_algorithm: {type: random, seed: 7, rule: sobol}
objective: {primary_metric: acc, goal: maximize}
early_termination: {type: bandit, slack_amount: 0.1, evaluation_interval: 2, delay_evaluation: 1}
limits: {max_total_trials: 3, max_concurrent_trials: 1, timeout: 600, trial_timeout: 60}
queue_settings: {job_tier: spot}
"""


def record(spec: Any) -> dict[str, Any]:
    data: dict[str, Any] = spec.to_record()
    data.pop("$schema", None)
    return data


def test_dumped_sweep_is_the_yaml_sweep_and_the_cli_takes_it(cli: Cli, monkeypatch: Any) -> None:
    cli.write("src/train.py", TRAIN)
    monkeypatch.chdir(cli.workdir)
    job = train_job()
    job.experiment_name = "hello-sweep"
    job.set_limits(timeout=60)  # the command's timeout is each trial's
    sweep_job = job(lr=Uniform(0.001, 0.1), opt=Choice(["sgd", "adam"])).sweep(
        compute="local",
        sampling_algorithm=RandomSamplingAlgorithm(seed=7, rule="sobol"),
        primary_metric="acc",
        goal="Maximize",
        early_termination_policy=BanditPolicy(
            slack_amount=0.1, evaluation_interval=2, delay_evaluation=1
        ),
        max_total_trials=3,
        max_concurrent_trials=1,
        timeout=600,
        job_tier="spot",
    )
    from_yaml = load_spec_text(HELLO_YAML, base_dir=cli.workdir)
    assert record(validate(sweep_job)) == record(from_yaml)
    # The same sweep made as a SweepJob, as Azure ML also allows.
    direct = SweepJob(
        trial=job,  # its inputs are the sweep's to give
        inputs={"epochs": 4},
        search_space={"lr": Uniform(0.001, 0.1), "opt": Choice(["sgd", "adam"])},
        objective=Objective("maximize", "acc"),
        sampling_algorithm=RandomSamplingAlgorithm(seed=7, rule="sobol"),
        early_termination=BanditPolicy(slack_amount=0.1, evaluation_interval=2, delay_evaluation=1),
        compute="local",
        experiment_name="hello-sweep",
        queue_settings={"job_tier": "spot"},
    )
    direct.set_limits(max_total_trials=3, max_concurrent_trials=1, timeout=600, trial_timeout=60)
    assert record(validate(direct)) == record(from_yaml)

    dumped = cli.workdir / "specs" / "sweep.yml"
    dumped.parent.mkdir()
    sweep_job.dump(dumped)
    text = dumped.read_text()
    assert "code: ../src" in text and "--lr ${{search_space.lr}}" in text
    reread = load_spec_text(read_spec_file(dumped), base_dir=dumped.parent)
    assert record(reread) == record(from_yaml)
    assert "${{ inputs.epochs }}" in reread.trial.command  # not searched: left an input
    created = cli.run("job", "create", "-f", str(dumped))
    assert created.returncode == 0, created.stderr
    name = created.stdout.strip().splitlines()[-1]
    cli.run("job", "cancel", name, check=True)
    stored = Workspace(cli.home).get_job(name)
    assert stored.spec["search_space"] == record(from_yaml)["search_space"]
    # Read back, it is a SweepJob that makes the same spec again.
    monkeypatch.setenv("PHALANX_HOME", str(cli.home))
    again = MLClient().jobs.get(name)
    assert isinstance(again, SweepJob) and again.status == "Canceled"
    assert isinstance(again.early_termination, BanditPolicy)
    assert again.search_space["lr"] == Uniform(0.001, 0.1)
    assert record(validate(again)) == {**record(from_yaml), "name": name}


TRIAL_COMMAND = (
    "python train.py --lr ${{search_space.lr}} --opt ${{inputs.opt}} --epochs ${{ inputs.epochs }}"
)


def test_every_policy_and_distribution_is_the_yaml_block(here: Path) -> None:
    space = {
        "a": Choice([1, 2]), "b": Randint(upper=4), "c": QUniform(1, 9, 2),
        "d": LogUniform(min_value=-4, max_value=-1),
    }  # fmt: skip
    policies = [
        (MedianStoppingPolicy(evaluation_interval=2, delay_evaluation=3),
         "{type: median_stopping, evaluation_interval: 2, delay_evaluation: 3}"),
        (TruncationSelectionPolicy(truncation_percentage=20, exclude_finished_jobs=True),
         "{type: truncation_selection, truncation_percentage: 20, exclude_finished_jobs: true}"),
        (AshaPolicy(min_resource=2, reduction_factor=2),
         "{type: asha, min_resource: 2, reduction_factor: 2}"),
        (HyperbandPolicy(max_resource=9), "{type: hyperband, max_resource: 9}"),
    ]  # fmt: skip
    for policy, policy_yaml in policies:
        sweep_job = train_job()(lr=Uniform(0.001, 0.1)).sweep(
            primary_metric="acc", goal="minimize", early_termination_policy=policy,
            search_space=space, sampling_algorithm="bayesian",
        )  # fmt: skip
        yaml_text = f"""
type: sweep
trial:
  code: src
  command: {TRIAL_COMMAND}
inputs: {{opt: sgd, epochs: 4}}
search_space:
  lr: {{type: uniform, min_value: 0.001, max_value: 0.1}}
  a: {{type: choice, values: [1, 2]}}
  b: {{type: randint, upper: 4}}
  c: {{type: quniform, min_value: 1, max_value: 9, q: 2}}
  d: {{type: loguniform, min_value: -4, max_value: -1}}
sampling_algorithm: bayesian
objective: {{primary_metric: acc, goal: minimize}}
early_termination: {policy_yaml}
"""
        assert record(validate(sweep_job)) == record(load_spec_text(yaml_text, base_dir=here))
    grid = train_job()(opt=Choice(["sgd", "adam"]), lr=Choice([0.01, 0.1])).sweep(
        primary_metric="acc", goal="minimize", sampling_algorithm=GridSamplingAlgorithm()
    )
    assert validate(grid).grid_size() == 4


def test_the_trials_of_an_unknown_sweep_are_an_error(here: Path) -> None:
    client = MLClient()
    with pytest.raises(PhalanxError, match="job 'no_such_sweep' not found"):
        list(client.jobs.list(parent_job_name="no_such_sweep"))
