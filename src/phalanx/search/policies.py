"""Early termination: which running trials a sweep stops, and why, in one line.

Azure ML's three policies are rules of their own (none is quite one of
Optuna's pruners: Optuna's median pruner, for one, compares only with trials
that have ended), so each is an Optuna :class:`~optuna.pruners.BasePruner`
here, judging a trial at a step against every trial that reached that step,
and judging it there again when another trial reaches that step later (as Azure
ML applies its policy to every running trial at each evaluation): a trial that
logs ahead of its peers is compared once they catch up.
``asha`` and ``hyperband`` are Optuna's ``SuccessiveHalvingPruner`` and
``HyperbandPruner`` as they are. Every pruner answers :func:`explain`: the
reason a stopped trial's job carries ("bandit: 0.41 not within 20 % of best
0.30 at step 6").
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

from phalanx.spec.sweep import (
    AshaPolicy,
    BanditPolicy,
    HyperbandPolicy,
    MedianStoppingPolicy,
    SweepSpec,
    TruncationSelectionPolicy,
)

if TYPE_CHECKING:
    from optuna.study import Study


class _AzurePolicy(BasePruner):
    """A rule judged at the steps its interval and delay allow."""

    def __init__(self, policy: Any, maximize: bool) -> None:
        self.policy = policy
        self.maximize = maximize

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        return self.explain(study, trial) is not None

    def explain(self, study: Study, trial: FrozenTrial) -> str | None:
        """Why the trial should stop at its last step; ``None`` to let it run."""
        step = trial.last_step
        return None if step is None else self.explain_at(study, trial, step)

    def explain_at(self, study: Study, trial: FrozenTrial, step: int) -> str | None:
        """Why the trial should stop at ``step`` (one it reported), against what every
        trial reported there now; ``None`` to let it run, or when ``step`` is not one its
        interval and delay judge."""
        if not self._due(sum(1 for s in trial.intermediate_values if s <= step)):
            return None
        return self.judge(study, trial, step)

    def _due(self, reports: int) -> bool:
        """As in Azure ML, intervals are the metric's reports: with ``evaluation_interval``
        3 and ``delay_evaluation`` 5, the 6th, 9th, 12th … report is judged."""
        interval = max(1, self.policy.evaluation_interval)
        return reports >= max(1, self.policy.delay_evaluation) and reports % interval == 0

    def judge(self, study: Study, trial: FrozenTrial, step: int) -> str | None:
        raise NotImplementedError

    def _better(self, a: float, b: float) -> bool:
        """Whether ``a`` is better than ``b`` by more than rounding (a running average of
        equal values is not worse than them)."""
        tolerance = 1e-9 * max(1.0, abs(a), abs(b))
        return a > b + tolerance if self.maximize else a < b - tolerance

    def _at(self, study: Study, step: int, *, finished: bool = True) -> list[float]:
        """Every trial's value at ``step`` (those that reported it)."""
        values = []
        for other in study.get_trials(deepcopy=False):
            if not finished and other.state is not TrialState.RUNNING:
                continue
            value = other.intermediate_values.get(step)
            if value is not None:
                values.append(float(value))
        return values


class Bandit(_AzurePolicy):
    policy: BanditPolicy

    def judge(self, study: Study, trial: FrozenTrial, step: int) -> str | None:
        value = trial.intermediate_values[step]
        values = self._at(study, step)
        best = max(values) if self.maximize else min(values)
        factor, amount = self.policy.slack_factor, self.policy.slack_amount
        if factor is not None:
            # Azure ML's best / (1 + factor) and best × (1 + factor), for negative values
            # too (a log-likelihood): the slack is a share of the best's size.
            slack_of = abs(best) * (factor / (1 + factor) if self.maximize else factor)
            bound = best - slack_of if self.maximize else best + slack_of
            slack = f"{factor * 100:g} %"
        else:
            assert amount is not None
            bound = best - amount if self.maximize else best + amount
            slack = f"{amount:g}"
        if self._better(bound, value):
            return f"bandit: {value:.4g} not within {slack} of best {best:.4g} at step {step}"
        return None


class MedianStopping(_AzurePolicy):
    policy: MedianStoppingPolicy

    def judge(self, study: Study, trial: FrozenTrial, step: int) -> str | None:
        averages = []
        for other in study.get_trials(deepcopy=False):
            upto = [v for s, v in other.intermediate_values.items() if s <= step]
            if step in other.intermediate_values:
                averages.append(statistics.fmean(upto))
        mine = [v for s, v in trial.intermediate_values.items() if s <= step]
        best = max(mine) if self.maximize else min(mine)
        median = statistics.median(averages)
        if self._better(median, best):
            return (
                f"median stopping: best {best:.4g} worse than the median {median:.4g} of the "
                f"trials' running averages at step {step}"
            )
        return None


class TruncationSelection(_AzurePolicy):
    policy: TruncationSelectionPolicy

    def judge(self, study: Study, trial: FrozenTrial, step: int) -> str | None:
        values = self._at(study, step, finished=not self.policy.exclude_finished_jobs)
        value = trial.intermediate_values[step]
        if value not in values:
            values.append(value)
        cut = len(values) * self.policy.truncation_percentage // 100
        if cut == 0:
            return None
        worst_first = sorted(values, reverse=not self.maximize)
        if self._better(worst_first[cut - 1], value) or value == worst_first[cut - 1]:
            return (
                f"truncation selection: {value:.4g} in the worst "
                f"{self.policy.truncation_percentage} % of {len(values)} trials at step {step}"
            )
        return None


def make_pruner(spec: SweepSpec) -> BasePruner:
    """The pruner of the sweep's ``early_termination`` (none: never stop a trial)."""
    policy = spec.early_termination
    maximize = spec.objective.goal == "maximize"
    if isinstance(policy, BanditPolicy):
        return Bandit(policy, maximize)
    if isinstance(policy, MedianStoppingPolicy):
        return MedianStopping(policy, maximize)
    if isinstance(policy, TruncationSelectionPolicy):
        return TruncationSelection(policy, maximize)
    if isinstance(policy, AshaPolicy):
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=policy.min_resource,
            reduction_factor=policy.reduction_factor,
            min_early_stopping_rate=policy.min_early_stopping_rate,
        )
    if isinstance(policy, HyperbandPolicy):
        return optuna.pruners.HyperbandPruner(
            min_resource=policy.min_resource,
            max_resource=policy.max_resource,
            reduction_factor=policy.reduction_factor,
        )
    return optuna.pruners.NopPruner()


def judges_every_step(pruner: BasePruner) -> bool:
    """Whether ``pruner`` is one of Azure ML's rules, judged with :func:`explain_at` at any
    step a trial reported, again as other trials reach it. Optuna's own pruners judge a
    trial at its last step only, as it reports it (ASHA's rungs are asynchronous)."""
    return isinstance(pruner, _AzurePolicy)


def explain_at(pruner: BasePruner, study: Study, trial: FrozenTrial, step: int) -> str | None:
    """Why an Azure ML rule stops the trial at ``step``; ``None`` to let it run."""
    assert isinstance(pruner, _AzurePolicy)
    return pruner.explain_at(study, trial, step)


def explain(pruner: BasePruner, study: Study, trial: FrozenTrial) -> str | None:
    """Why ``pruner`` stops the trial at its last step; ``None`` to let it run."""
    if isinstance(pruner, _AzurePolicy):
        return pruner.explain(study, trial)
    if not pruner.prune(study, trial):
        return None
    step = trial.last_step
    value = trial.intermediate_values.get(step) if step is not None else None
    shown = f"{value:.4g}" if value is not None else "its value"
    if isinstance(pruner, optuna.pruners.HyperbandPruner):
        return f"hyperband: {shown} not among the best of its bracket at step {step}"
    if isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner):
        factor = pruner._reduction_factor
        return f"asha: {shown} not among the best 1/{factor} of the trials that reached step {step}"
    return f"stopped at step {step}"
