"""Sweep specs and the search under them (Optuna), without running a job.

What a sweep controller asks of ``phalanx.search`` — values drawn from each
distribution, a study rebuilt from trial records, a pruner's reason — checked on
in-memory studies; the controller itself runs real jobs in ``test_sweeps.py``.
"""

from __future__ import annotations

import math
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from phalanx.errors import SpecError
from phalanx.search.study import Search
from phalanx.spec import SweepSpec, load_any_text
from phalanx.workspace.trials import TrialRecord, TrialState

BASE = """
type: sweep
trial:
  command: python train.py --x ${{search_space.x}}
search_space:
  x: {type: uniform, min_value: 0, max_value: 1}
objective: {primary_metric: score, goal: maximize}
"""


def sweep(text: str = BASE, **changes: Any) -> SweepSpec:
    spec = load_any_text(text, source="sweep.yml", base_dir=Path("/"))
    assert isinstance(spec, SweepSpec)
    return spec.model_copy(update=changes) if changes else spec


def with_space(space: str, extra: str = "") -> SweepSpec:
    text = BASE.replace("  x: {type: uniform, min_value: 0, max_value: 1}\n", space) + extra
    return sweep(text)


# -- the spec -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ("  x: {type: gaussian, mu: 0}\n", "search_space.x.type", "unknown distribution"),
        ("  x: {type: uniform, min_value: 2, max_value: 1}\n", "search_space.x.max_value",
         "must be greater than min_value"),
        ("  x: {type: choice, values: []}\n", "search_space.x.values", "at least 1"),
        ("  x: {type: normal, mu: 0, sigma: 0}\n", "search_space.x.sigma", "more than 0"),
        ("  x: {type: choice, values: [{a: 1}]}\n", "search_space.x.values", "nested search"),
        ("  y: {type: uniform, min_value: 0, max_value: 1}\n", "trial.command",
         "${{search_space.x}} names nothing in search_space"),
        ("  x: {type: loguniform, min_value: -1, max_value: 710}\n",
         "search_space.x.max_value", "keep it within -700 and 700"),
        ("  x: {type: uniform, min_value: -1.0e+308, max_value: 1.0e+308}\n",
         "search_space.x.max_value", "wider than a float holds"),
        ("  x: {type: lognormal, mu: 0, sigma: 200}\n", "search_space.x",
         "may not fit a float"),
        ("  x: {type: choice, values: [1, true, 2]}\n", "search_space.x.values",
         "lists 1 and true, which are the same value"),
        # No nan, no infinity: a value drawn from them is none a trial can use.
        ("  x: {type: normal, mu: .nan, sigma: 1}\n", "search_space.x.mu",
         "must be a finite number; got nan"),
        ("  x: {type: lognormal, mu: 0, sigma: .inf}\n", "search_space.x.sigma",
         "must be a finite number; got inf"),
        ("  x: {type: qnormal, mu: 0, sigma: 1, q: .inf}\n", "search_space.x.q",
         "must be a finite number; got inf"),
        ("  x: {type: normal, mu: 1.0e+308, sigma: 1.0e+308}\n", "search_space.x",
         "gives values no float holds"),
        ("  x: {type: quniform, min_value: 0, max_value: 1.0e+300, q: 1.0e-300}\n",
         "search_space.x", "too many multiples of q (1e-300) for a float"),
        ("  x: {type: choice, values: [1, .nan]}\n", "search_space.x.values", "lists nan"),
    ],
)  # fmt: skip
def test_bad_search_spaces_name_the_field(change: str, field: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        with_space(change)
    assert caught.value.field == field
    assert message in caught.value.message
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("sampling_algorithm: grid\n", "search_space.x", "grid sampling takes choice and randint"),
        ("limits: {max_total_trials: 2, max_concurrent_trials: 3}\n",
         "limits.max_concurrent_trials", "more than max_total_trials"),
        ("early_termination: {type: bandit}\n", "early_termination.slack_factor",
         "exactly one of slack_factor"),
        ("early_termination: {type: sometimes}\n", "early_termination.type",
         "unknown early_termination type"),
        ("sampling_algorithm: {type: grid, rule: sobol}\n", "sampling_algorithm.rule",
         "type: random only"),
        ("early_termination: {type: bandit, slack_factor: .inf}\n",
         "early_termination.slack_factor", "must be a finite number; got inf"),
        ("early_termination: {type: bandit, slack_amount: .nan}\n",
         "early_termination.slack_amount", "must be a finite number; got nan"),
    ],
)  # fmt: skip
def test_bad_sweep_settings_name_the_field(extra: str, field: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        sweep(BASE + extra)
    assert caught.value.field == field
    assert message in caught.value.message


def test_a_trial_field_at_the_top_of_a_sweep_belongs_under_trial() -> None:
    text = BASE.replace("trial:\n  command:", "trial:\n  code: /\ncommand:")
    text += "resources: {instance_count: 2}\n"
    with pytest.raises(SpecError) as caught:
        sweep(text)
    # Two mistakes, each said once: the trial's command missing is the first one.
    assert [(p.field, p.message) for p in caught.value.problems] == [
        (key, f"{key} belongs under trial: in a sweep job (trial: is the command job each "
              "trial runs); move it there")
        for key in ("command", "resources")
    ]  # fmt: skip


def test_a_sweeps_misspelt_keys_get_the_sweeps_own_suggestions() -> None:
    text = BASE.replace("trial:\n", "trial:\n  resources: {instance_cont: 2}\n") + (
        "limits: {max_trials: 3}\nearly_termination: {type: bandit, slack_facter: 0.1}\n"
    )
    text = text.replace("max_value: 1}", "max_valu: 1}")
    with pytest.raises(SpecError) as caught:
        sweep(text)
    assert sorted((p.field, p.message) for p in caught.value.problems) == sorted([
        ("trial.resources.instance_cont",
         "unknown field 'instance_cont'; did you mean 'instance_count'?"),
        ("search_space.x.max_valu", "unknown field 'max_valu'; did you mean 'max_value'?"),
        ("limits.max_trials", "unknown field 'max_trials'; did you mean 'max_total_trials'?"),
        ("early_termination.slack_facter",
         "unknown field 'slack_facter'; did you mean 'slack_factor'?"),
    ])  # fmt: skip


def test_an_input_the_command_names_must_exist_in_the_trial() -> None:
    text = BASE.replace("--x ${{search_space.x}}", "--x ${{search_space.x}} ${{inputs.epochs}}")
    with pytest.raises(SpecError) as caught:
        sweep(text)
    assert caught.value.field == "trial.command"
    assert "${{inputs.epochs}} names no input" in caught.value.message


def test_a_grid_larger_than_a_sweep_runs_needs_a_limit() -> None:
    space = "  x: {type: randint, upper: 40}\n  y: {type: randint, upper: 40}\n"
    with pytest.raises(SpecError) as caught:
        with_space(space, "sampling_algorithm: grid\n")
    assert "the grid has 1600 points, more than the 1000 trials" in caught.value.message
    spec = with_space(space, "sampling_algorithm: grid\nlimits: {max_total_trials: 50}\n")
    assert spec.max_total_trials == 50


def test_an_environment_variable_names_only_the_search_space() -> None:
    for value, message in (
        ("${{search_space.y}}", "${{search_space.y}} names nothing in search_space"),
        (
            "${{inputs.x}}",
            "an environment variable takes only ${{search_space.<name>}} and ${{secrets.<name>}}",
        ),
    ):
        text = BASE.replace("trial:\n", f"trial:\n  environment_variables: {{A: '{value}'}}\n")
        with pytest.raises(SpecError) as caught:
            sweep(text)
        assert caught.value.field == "trial.environment_variables.A"
        assert message in caught.value.message


def test_an_environment_variable_gets_the_value_itself() -> None:
    text = BASE.replace(
        "trial:\n", "trial:\n  environment_variables: {LR: 'lr=${{search_space.x}}'}\n"
    )
    trial = sweep(text).trial_spec({"x": 0.5})
    assert trial.environment_variables == {"LR": "lr=0.5"}


def test_an_environment_variable_may_name_a_secret_left_for_the_job() -> None:
    text = BASE.replace(
        "trial:\n", "trial:\n  environment_variables: {TOK: '${{secrets.hf_token}}'}\n"
    )
    trial = sweep(text).trial_spec({"x": 0.5})  # resolved only as each trial starts
    assert trial.environment_variables == {"TOK": "${{secrets.hf_token}}"}


def test_a_trial_gets_its_values_as_literal_inputs() -> None:
    spec = sweep(BASE + "inputs: {epochs: 3, x: 9}\ncompute: local\n")
    trial = spec.trial_spec({"x": 0.25}, name="s_0")
    assert trial.name == "s_0"
    assert trial.command == "python train.py --x 0.25"
    # A value of the search space replaces a literal input of the same name.
    assert trial.literal_inputs() == {"epochs": 3, "x": 0.25}


def test_a_value_reaches_the_command_as_one_word_whatever_it_holds() -> None:
    command = (
        """python train.py --a ${{search_space.g}} --b "<${{search_space.g}}>" """
        """--c '<${{search_space.g}}>' --d ${{inputs.g}} # ${{search_space.g}}"""
    )
    text = BASE.replace("python train.py --x ${{search_space.x}}", command)
    text = text.replace(
        "  x: {type: uniform, min_value: 0, max_value: 1}",
        """  g: {type: choice, values: ["hello world", "it's $(id) `id` \\"$HOME\\"\\n"]}""",
    )
    spec = sweep(text)
    for value in spec.search_space["g"].values:  # type: ignore[union-attr]
        line = spec.trial_spec({"g": value}).command.replace("python train.py", "printf '%s|'")
        shown = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True)
        assert shown.stdout == f"--a|{value}|--b|<{value}>|--c|<{value}>|--d|{value}|"


def test_a_choice_value_may_not_hold_a_reference() -> None:
    with pytest.raises(SpecError) as caught:
        with_space("  x: {type: choice, values: ['${{inputs.a}}']}\n")
    assert caught.value.field == "search_space.x.values"
    assert "which a command reads as a reference" in caught.value.message


# -- values as each distribution gives them --------------------------------------------


def draws(space: str, n: int = 64, seed: int = 3) -> list[Any]:
    spec = with_space(space, f"sampling_algorithm: {{type: random, seed: {seed}}}\n")
    search = Search("s", spec, [])
    values = []
    for _ in range(n):
        proposal = search.propose()
        search.tell(proposal.number, TrialState.COMPLETED, 0.0)
        values.append(proposal.params["x"])
    return values


def test_loguniform_bounds_are_natural_logarithms_as_in_azure_ml() -> None:
    values = draws("  x: {type: loguniform, min_value: -6, max_value: -1}\n")
    assert all(math.exp(-6) <= v <= math.exp(-1) for v in values)
    # Spread over orders of magnitude, not bunched at the top as a uniform would be.
    assert min(values) < 0.02 < max(values)


def test_quantised_values_are_multiples_of_q_and_whole_for_a_whole_q() -> None:
    values = draws("  x: {type: quniform, min_value: 16, max_value: 128, q: 16}\n")
    assert all(isinstance(v, int) and v % 16 == 0 and 16 <= v <= 128 for v in values)
    halves = draws("  x: {type: quniform, min_value: 0, max_value: 2, q: 0.5}\n")
    assert all(isinstance(v, float) and (v * 2).is_integer() for v in halves)


def test_normal_values_have_the_mean_and_spread_asked_for() -> None:
    values = draws("  x: {type: normal, mu: 10, sigma: 2}\n", n=200)
    assert abs(statistics.fmean(values) - 10) < 0.6
    assert 1.5 < statistics.stdev(values) < 2.5
    logs = draws("  x: {type: lognormal, mu: 0, sigma: 1}\n")
    assert all(v > 0 for v in logs)


def test_randint_and_choice_give_only_their_values() -> None:
    assert set(draws("  x: {type: randint, upper: 3}\n")) == {0, 1, 2}
    assert set(draws("  x: {type: choice, values: [a, 2, true]}\n")) == {"a", 2, True}


def test_sobol_points_cover_the_range_evenly() -> None:
    spec = with_space(
        "  x: {type: uniform, min_value: 0, max_value: 1}\n",
        "sampling_algorithm: {type: random, rule: sobol, seed: 1}\n",
    )
    search = Search("s", spec, [])
    values = []
    for _ in range(16):
        proposal = search.propose()
        search.tell(proposal.number, TrialState.COMPLETED, 0.0)
        values.append(proposal.params["x"])
    # After the first (random) point, 15 Sobol points: every sixteenth of the range but
    # one or two holds one of them, which random points rarely manage.
    filled = {int(v * 16) for v in values[1:]}
    assert len(filled) >= 14


# -- the study, as a controller that starts again sees it ------------------------------


def records_of(search: Search, spec: SweepSpec, results: dict[int, float]) -> list[TrialRecord]:
    out = []
    for number, value in results.items():
        out.append(
            TrialRecord(
                number=number,
                job_name=f"s_{number}",
                params={},
                internal=search.study.trials[number].params,
                state=TrialState.COMPLETED,
                created_at=0.0,
                value=value,
                attrs=search.attrs(number),
                curve=[(0, value)],
            )
        )
    return out


def test_a_rebuilt_grid_search_never_proposes_a_point_again() -> None:
    spec = with_space(
        "  x: {type: choice, values: [a, b, c]}\n  y: {type: randint, upper: 2}\n",
        "sampling_algorithm: grid\n",
    ).model_copy()
    first = Search("s", spec, [])
    seen = []
    for _ in range(3):
        p = first.propose()
        first.tell(p.number, TrialState.COMPLETED, 1.0)
        seen.append((p.params["x"], p.params["y"]))
    # A new controller, from the records alone.
    again = Search("s", spec, records_of(first, spec, {0: 1.0, 1: 1.0, 2: 1.0}))
    while not again.exhausted:
        p = again.propose()
        assert p.number == len(seen)
        again.tell(p.number, TrialState.COMPLETED, 1.0)
        seen.append((p.params["x"], p.params["y"]))
    assert sorted(seen) == sorted((x, y) for x in "abc" for y in (0, 1))


def bayesian_run(seed: int, n: int = 24) -> list[float]:
    spec = with_space(
        "  x: {type: uniform, min_value: 0, max_value: 1}\n",
        f"sampling_algorithm: {{type: bayesian, seed: {seed}, n_startup_trials: 6}}\n"
        "limits: {max_total_trials: 30}\n",
    )
    search = Search("s", spec, [])
    xs = []
    for _ in range(n):
        p = search.propose()
        x = float(p.params["x"])
        search.tell(p.number, TrialState.COMPLETED, -((x - 0.3) ** 2))
        xs.append(x)
    return xs


def test_bayesian_proposes_from_past_results_and_a_seed_repeats_it() -> None:
    xs = bayesian_run(seed=7)
    assert xs == bayesian_run(seed=7)
    assert xs != bayesian_run(seed=8)
    # After its six random trials, TPE proposes near the best value (0.3): closer on
    # average than uniform draws come (0.29 expected) or its own first six came.
    start, later = xs[:6], xs[6:]
    distance = lambda values: statistics.fmean(abs(v - 0.3) for v in values)  # noqa: E731
    assert distance(later) < 0.15
    assert distance(later) < distance(start)


# -- early termination ----------------------------------------------------------------


def judged(policy: str, curves: list[list[float]], goal: str = "maximize") -> list[str | None]:
    """Each trial in turn reports its curve, step by step; the reason it was stopped."""
    spec = sweep(BASE.replace("goal: maximize", f"goal: {goal}") + policy)
    search = Search("s", spec, [])
    reasons: list[str | None] = []
    for curve in curves:
        p = search.propose()
        reason = None
        for step, value in enumerate(curve):
            search.report(p.number, [(step, value)])
            reason = search.judge(p.number)
            if reason is not None:
                search.tell(p.number, TrialState.PRUNED, None)
                break
        else:
            search.tell(p.number, TrialState.COMPLETED, curve[-1])
        reasons.append(reason)
    return reasons


GOOD_THEN_BAD = [[0.8] * 4, [0.9] * 4, [0.1] * 4, [0.2] * 4]


@pytest.mark.parametrize(
    ("policy", "prefix"),
    [
        ("early_termination: {type: bandit, slack_factor: 0.2, delay_evaluation: 1}\n",
         "bandit: 0.1 not within 20 % of best 0.9 at step 0"),
        ("early_termination: {type: median_stopping, delay_evaluation: 1}\n",
         "median stopping: best 0.1 worse than the median"),
        ("early_termination: {type: truncation_selection, truncation_percentage: 50,"
         " delay_evaluation: 1}\n", "truncation selection: 0.1 in the worst 50 % of 3 trials"),
        ("early_termination: {type: asha, min_resource: 1, reduction_factor: 2}\n",
         "asha: 0.1 not among the best 1/2"),
    ],
)  # fmt: skip
def test_each_policy_stops_the_bad_trials_and_says_why(policy: str, prefix: str) -> None:
    reasons = judged(policy, GOOD_THEN_BAD)
    assert reasons[0] is None and reasons[1] is None
    assert reasons[2] is not None and reasons[2].startswith(prefix), reasons
    assert reasons[3] is not None


def test_bandit_with_slack_amount_when_minimizing() -> None:
    policy = "early_termination: {type: bandit, slack_amount: 0.5}\n"
    reasons = judged(policy, [[1.0] * 3, [1.4] * 3, [1.6] * 3], goal="minimize")
    assert reasons[:2] == [None, None]
    assert reasons[2] == "bandit: 1.6 not within 0.5 of best 1 at step 0"


def test_evaluation_interval_and_delay_count_reports_as_azure_ml_does() -> None:
    policy = (
        "early_termination: {type: bandit, slack_factor: 0.1, evaluation_interval: 3,"
        " delay_evaluation: 5}\n"
    )
    # Steps 10, 20, 30, …: the 6th report (step 60) is the first judged.
    spec = sweep(BASE + policy)
    search = Search("s", spec, [])
    good = search.propose()
    search.report(good.number, [(10 * k, 1.0) for k in range(1, 10)])
    search.tell(good.number, TrialState.COMPLETED, 1.0)
    bad = search.propose()
    reasons = []
    for k in range(1, 10):
        search.report(bad.number, [(10 * k, 0.1)])
        reasons.append(search.judge(bad.number))
    assert reasons[:5] == [None] * 5
    assert reasons[5] == "bandit: 0.1 not within 10 % of best 1 at step 60"


@pytest.mark.parametrize("goal", ["maximize", "minimize"])
def test_bandit_slack_factor_with_negative_values(goal: str) -> None:
    policy = "early_termination: {type: bandit, slack_factor: 0.2}\n"
    sign = 1 if goal == "maximize" else -1
    # The best is -1.0 (maximising) or 1.0 (minimising a loss of 1): within 20 % of it
    # lies -1.1 / 1.1; -1.5 / 1.5 does not.
    reasons = judged(policy, [[sign * -1.0] * 2, [sign * -1.1] * 2, [sign * -1.5] * 2], goal)
    assert reasons[:2] == [None, None]
    assert reasons[2] is not None and reasons[2].startswith("bandit: ")


@pytest.mark.parametrize("rule", ["random", "sobol"])
def test_a_resumed_seeded_search_draws_new_values(rule: str) -> None:
    spec = with_space(
        "  x: {type: uniform, min_value: 0, max_value: 1}\n",
        f"sampling_algorithm: {{type: random, rule: {rule}, seed: 4}}\n",
    )
    first = Search("s", spec, [])
    drawn = []
    for _ in range(3):
        p = first.propose()
        first.tell(p.number, TrialState.COMPLETED, 0.5)
        drawn.append(p.params["x"])
    again = Search("s", spec, records_of(first, spec, {0: 0.5, 1: 0.5, 2: 0.5}),
                   first.study_attrs())  # fmt: skip
    later = [again.propose().params["x"] for _ in range(3)]
    assert not set(later) & set(drawn)
    if rule == "sobol":  # the sequence goes on where it was: the same points as unbroken
        unbroken = [first.propose().params["x"] for _ in range(3)]
        assert later == unbroken


def test_hyperband_stops_a_bad_trial_in_its_bracket() -> None:
    policy = (
        "early_termination: {type: hyperband, min_resource: 1, max_resource: 9,"
        " reduction_factor: 3}\n"
    )
    # Good trials first, then bad ones: Hyperband's brackets share the trials out, and
    # a bad trial meeting good ones at its bracket's first rung is stopped there.
    reasons = judged(policy, [[0.9] * 9] * 6 + [[0.1] * 9] * 6)
    assert reasons[:6] == [None] * 6
    stopped = [r for r in reasons[6:] if r is not None]
    assert stopped and all(r.startswith("hyperband: 0.1 not among the best") for r in stopped)


@pytest.mark.parametrize(
    ("policy", "prefix"),
    [
        ("{type: bandit, slack_factor: 0.2, delay_evaluation: 1}", "bandit: 0.05 not within"),
        ("{type: median_stopping, delay_evaluation: 1}", "median stopping: best 0.05 worse"),
        ("{type: truncation_selection, truncation_percentage: 50, delay_evaluation: 1}",
         "truncation selection: 0.05 in the worst 50 % of 2 trials"),
    ],
)  # fmt: skip
def test_a_trial_that_reports_first_is_judged_once_its_peers_catch_up(
    policy: str, prefix: str
) -> None:
    # Two trials at once, as a controller's rounds see them: the bad one has always
    # logged one step more than the good one. Each step of the bad trial is judged
    # alone when it comes; it must be judged there again when the good one gets there.
    spec = sweep(BASE + f"early_termination: {policy}\n")
    search = Search("s", spec, [])
    bad, good = search.propose().number, search.propose().number
    stopped: dict[int, str] = {}
    for round_ in range(1, 6):
        curves = {
            bad: [(s, 0.05) for s in range(round_)],
            good: [(s, 1.0) for s in range(round_ - 1)],
        }
        stopped = search.advance(curves)
        if stopped:
            break
    assert round_ == 2, stopped  # the good trial reached step 0 in round 2
    assert list(stopped) == [bad]
    assert stopped[bad].startswith(prefix) and stopped[bad].endswith("at step 0"), stopped


def test_a_trial_is_judged_again_only_at_the_steps_its_interval_judges() -> None:
    spec = sweep(
        BASE + "early_termination: {type: bandit, slack_amount: 0.1, evaluation_interval: 2,"
        " delay_evaluation: 2}\n"
    )
    search = Search("s", spec, [])
    bad, good = search.propose().number, search.propose().number
    # The bad trial is ahead: its steps 0 … 2 are in; the good one reports step 0 (not
    # judged: the 1st report), then step 1 (the 2nd report: judged).
    assert search.advance({bad: [(0, 0.0), (1, 0.0), (2, 0.0)], good: [(0, 1.0)]}) == {}
    assert search.advance({bad: [(0, 0.0), (1, 0.0), (2, 0.0)], good: [(0, 1.0), (1, 1.0)]}) == {
        bad: "bandit: 0 not within 0.1 of best 1 at step 1"
    }
