"""How a sweep draws, judges and stops its trials, as Azure ML's ``azure.ai.ml.sweep``
names it: sampling algorithms, :class:`Objective`, early-termination policies and
:class:`SweepJobLimits`. Each is the block a sweep ``job.yml`` holds
(:mod:`phalanx.spec.sweep` checks the values); :class:`AshaPolicy` and
:class:`HyperbandPolicy` are phalanx's additions.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from phalanx.ml.errors import checked_keywords


class _Block:
    """A block of a sweep spec: its fields that are set, with its ``type`` if it has one."""

    type: str | None = None

    def _to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        head = {} if self.type is None else {"type": self.type}
        return {**head, **{k: v for k, v in values.items() if v is not None}}


# -- sampling algorithms --------------------------------------------------------


class SamplingAlgorithm(_Block):
    """How each trial's values are picked (``sampling_algorithm``)."""


@checked_keywords
@dataclass(kw_only=True)
class RandomSamplingAlgorithm(SamplingAlgorithm):
    """Values drawn at random; ``seed`` makes a sweep run one trial at a time draw the
    same values again; ``rule="sobol"`` spreads them evenly (a scrambled Sobol sequence)."""

    seed: int | None = None
    rule: str | None = None

    type = "random"


@checked_keywords
@dataclass(kw_only=True)
class GridSamplingAlgorithm(SamplingAlgorithm):
    """Every combination of the ``Choice`` and ``Randint`` values, once."""

    type = "grid"


@checked_keywords
@dataclass(kw_only=True)
class BayesianSamplingAlgorithm(SamplingAlgorithm):
    """Values proposed from the results of the trials so far (Optuna's TPE).
    ``n_startup_trials`` (phalanx's): trials drawn at random first."""

    n_startup_trials: int | None = None

    type = "bayesian"


_ALGORITHMS: dict[str, type[SamplingAlgorithm]] = {
    "random": RandomSamplingAlgorithm,
    "grid": GridSamplingAlgorithm,
    "bayesian": BayesianSamplingAlgorithm,
}


# -- the objective and the limits -------------------------------------------------


@checked_keywords
@dataclass
class Objective(_Block):
    """What a trial is judged by: the last value of ``primary_metric`` (logged with
    ``phalanx.train.log_metric`` or ``mlflow.log_metric``), to ``goal`` ``"Maximize"``
    or ``"Minimize"``."""

    goal: str | None = None
    primary_metric: str | None = None


@checked_keywords
@dataclass(kw_only=True)
class SweepJobLimits(_Block):
    """``limits``: trials in all and at once, the sweep's ``timeout`` and each trial's
    ``trial_timeout`` (seconds, or ``"2h"``)."""

    max_concurrent_trials: int | None = None
    max_total_trials: int | None = None
    timeout: int | str | None = None
    trial_timeout: int | str | None = None


# -- early termination ------------------------------------------------------------


class EarlyTerminationPolicy(_Block):
    """A policy that stops trials falling behind on the primary metric."""


@checked_keywords
@dataclass(kw_only=True)
class BanditPolicy(EarlyTerminationPolicy):
    """Stop a trial whose metric is not within ``slack_factor`` (a ratio) or
    ``slack_amount`` (a difference) of the best trial's at the same step; give one.
    Judged every ``evaluation_interval`` steps, from step ``delay_evaluation``."""

    slack_factor: float | None = None
    slack_amount: float | None = None
    evaluation_interval: int = 1
    delay_evaluation: int = 0

    type = "bandit"


@checked_keywords
@dataclass(kw_only=True)
class MedianStoppingPolicy(EarlyTerminationPolicy):
    """Stop a trial whose best value is worse than the median of the trials' running
    averages at the same step."""

    evaluation_interval: int = 1
    delay_evaluation: int = 0

    type = "median_stopping"


@checked_keywords
@dataclass(kw_only=True)
class TruncationSelectionPolicy(EarlyTerminationPolicy):
    """At each evaluation, stop the trials in the worst ``truncation_percentage`` %;
    ``exclude_finished_jobs`` leaves ended trials out of the comparison."""

    truncation_percentage: int | None = None
    evaluation_interval: int = 1
    delay_evaluation: int = 0
    exclude_finished_jobs: bool = False

    type = "truncation_selection"


@checked_keywords
@dataclass(kw_only=True)
class AshaPolicy(EarlyTerminationPolicy):
    """phalanx's addition: asynchronous successive halving. A trial goes on past step
    ``min_resource * reduction_factor**k`` only if it is in the best
    ``1/reduction_factor`` of the trials that reached that step."""

    min_resource: int = 1
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0

    type = "asha"


@checked_keywords
@dataclass(kw_only=True)
class HyperbandPolicy(EarlyTerminationPolicy):
    """phalanx's addition: Hyperband, several successive-halving brackets; a trial that is
    never stopped reaches step ``max_resource``."""

    min_resource: int = 1
    max_resource: int | None = None
    reduction_factor: int = 3

    type = "hyperband"


_POLICIES: dict[str, type[EarlyTerminationPolicy]] = {
    "bandit": BanditPolicy,
    "median_stopping": MedianStoppingPolicy,
    "truncation_selection": TruncationSelectionPolicy,
    "asha": AshaPolicy,
    "hyperband": HyperbandPolicy,
}


def _of(classes: dict[str, type[Any]], data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    cls = classes.get(str(data.get("type", "")).lower())
    if cls is None:
        return data
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def algorithm_from_dict(data: Any) -> SamplingAlgorithm | Any:
    """The class of a stored ``sampling_algorithm`` mapping (the value if unknown)."""
    return _of(_ALGORITHMS, data)


def policy_from_dict(data: Any) -> EarlyTerminationPolicy | Any:
    """The class of a stored ``early_termination`` mapping (the value if unknown)."""
    return _of(_POLICIES, data)
