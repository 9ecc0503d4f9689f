"""SweepSpec: an Azure ML sweep job (``type: sweep``), as phalanx runs it.

A sweep runs its ``trial`` (a command job) many times, each with values drawn
from ``search_space`` by ``sampling_algorithm``; ``early_termination`` stops
trials that fall behind on ``objective.primary_metric``, and ``limits`` bounds
how many run in all and at once. The trial's command names a value as
``${{search_space.<name>}}``; each trial gets its values as literal inputs of
the same names (as Azure ML's SDK does when ``command(lr=Uniform(...))``
replaces an input by a distribution), and its command gets each value in place,
as one word whatever it holds (``choice`` of ``"hello world"`` is one argument).

:meth:`SweepSpec.trial_spec` is the command job of one trial;
:meth:`SweepSpec.template` the same with each value at a representative point,
which is how a sweep is checked (reach, inputs, environment) before it runs.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from phalanx.errors import SpecError
from phalanx.limits import MAX_DESCRIPTION, MAX_NAME
from phalanx.spec.interpolate import REFERENCE_RE, SECRET_RE, quote_within, quoting_contexts
from phalanx.spec.job import (
    BUILTIN_OUTPUTS,
    COMPUTE_TARGETS,
    Distribution,
    EnvironmentValue,
    InputValue,
    JobSpec,
    LocatedSpec,
    local_code_folder,
    lower_type,
    valid_env_names,
    valid_job_name,
)
from phalanx.spec.parts import (
    InputSpec,
    OutputSpec,
    QueueSettings,
    Resources,
    Retry,
    SpecModel,
)
from phalanx.spec.values import (
    IDENTIFIER_RE,
    MAX_URL,
    coerce_str_mapping,
    limited,
    limited_tags,
    parse_duration,
    recorded,
    render_literal,
    show,
    user_error,
)

#: The most trials one sweep may run (Azure ML's cap too).
MAX_TRIALS = 1000
MAX_CONCURRENT_TRIALS = 100
"""Trials of one sweep in the queue at once: each is a job of its own (Azure ML refuses
more than 100 too)."""
#: The most values a ``choice`` may list, and the most points a grid may have.
MAX_CHOICES = 10_000

_SEARCH_RE = re.compile(r"\$\{\{\s*search_space\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_EXPRESSION_RE = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)

Scalar = StrictBool | StrictInt | StrictFloat | StrictStr


# -- the search space ---------------------------------------------------------


class _Bounded(SpecModel):
    min_value: StrictInt | StrictFloat
    max_value: StrictInt | StrictFloat

    @field_validator("min_value", "max_value")
    @classmethod
    def _finite(cls, value: float, info: ValidationInfo) -> float:
        if not math.isfinite(value):
            raise user_error("must be a finite number")
        low = info.data.get("min_value")
        if info.field_name == "max_value" and low is not None and not low < value:
            raise user_error(
                f"max_value ({value}) must be greater than min_value ({low}); swap them or "
                "widen the range"
            )
        if info.field_name == "max_value" and low is not None and not math.isfinite(value - low):
            raise user_error("the range is wider than a float holds; narrow it")
        return value


def _finite_number(value: Any) -> Any:
    """A parameter a distribution or a policy computes with: no nan, no infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        raise user_error(f"must be a finite number; got {show(value)}")
    return value


class _Quantised(SpecModel):
    q: Annotated[StrictInt | StrictFloat, Field(gt=0)]
    """Values are rounded to a multiple of ``q``."""

    _finite_q = field_validator("q", mode="before")(_finite_number)

    @model_validator(mode="after")
    def _steps_fit(self) -> Any:
        largest = _largest(self)
        if not math.isfinite(largest / self.q):
            raise user_error(
                f"values up to {largest:g} are too many multiples of q ({self.q:g}) for a "
                "float; raise q"
            )
        return self


class Choice(SpecModel):
    """One of ``values``."""

    type: Literal["choice"] = "choice"
    values: Annotated[list[Scalar], Field(min_length=1, max_length=MAX_CHOICES)]

    @field_validator("values", mode="before")
    @classmethod
    def _flat(cls, value: Any) -> Any:
        if isinstance(value, list) and any(isinstance(v, float) and math.isnan(v) for v in value):
            raise user_error("lists nan, which equals no value (not even itself); remove it")
        if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            raise user_error(
                "nested search spaces in a choice are not supported; list plain values "
                "(numbers, strings, true/false), or run one sweep per branch"
            )
        return value

    @field_validator("values")
    @classmethod
    def _distinct(cls, value: list[Any]) -> list[Any]:
        seen: list[Any] = []
        for item in value:
            if isinstance(item, str) and "${{" in item:  # it would be read as a reference
                raise user_error(
                    f"{show(item)} holds '${{{{', which a command reads as a reference; "
                    "write the value without it"
                )
            if item in seen:  # 1, 1.0 and true are one value to the optimiser too
                twin = seen[seen.index(item)]
                raise user_error(
                    f"lists {show(twin)} and {show(item)}, which are the same value; list "
                    "each value once"
                )
            seen.append(item)
        return value


class RandInt(SpecModel):
    """An integer from 0 to ``upper`` - 1 (Azure ML's ``randint``)."""

    type: Literal["randint"] = "randint"
    upper: Annotated[StrictInt, Field(ge=1, le=2**31)]


class Uniform(_Bounded):
    """A float between ``min_value`` and ``max_value``."""

    type: Literal["uniform"] = "uniform"


class _LogBounded(_Bounded):
    @field_validator("min_value", "max_value")
    @classmethod
    def _exp_fits(cls, value: float) -> float:
        # The bounds are exponents: e**709 is near the largest float, e**-700 near 0.
        if not -700 <= value <= 700:
            raise user_error(
                f"is a natural logarithm (the value is exp({value})); keep it within -700 and 700"
            )
        return value


class LogUniform(_LogBounded):
    """``exp(uniform(min_value, max_value))``: the bounds are natural logarithms, as in
    Azure ML (``loguniform(-6, -1)`` spans 0.0025 to 0.37)."""

    type: Literal["loguniform"] = "loguniform"


class QUniform(_Bounded, _Quantised):
    """``round(uniform(min_value, max_value) / q) * q``."""

    type: Literal["quniform"] = "quniform"


class QLogUniform(_LogBounded, _Quantised):
    """``round(exp(uniform(min_value, max_value)) / q) * q``."""

    type: Literal["qloguniform"] = "qloguniform"


class Normal(SpecModel):
    """A float from the normal distribution with mean ``mu`` and deviation ``sigma``."""

    type: Literal["normal"] = "normal"
    mu: StrictInt | StrictFloat
    sigma: Annotated[StrictInt | StrictFloat, Field(gt=0)]

    _finite = field_validator("mu", "sigma", mode="before")(_finite_number)

    @model_validator(mode="after")
    def _spread_fits(self) -> Any:
        if not math.isfinite(abs(self.mu) + MOST_DEVIATIONS * self.sigma):
            raise user_error(
                f"normal({self.mu:g}, {self.sigma:g}) gives values no float holds; lower |mu| "
                "+ 6 × sigma"
            )
        return self


class LogNormal(Normal):
    """``exp(normal(mu, sigma))``."""

    type: Literal["lognormal"] = "lognormal"  # type: ignore[assignment]

    @model_validator(mode="after")
    def _exp_fits(self) -> Any:
        return _exp_fits(self)


class QNormal(Normal, _Quantised):
    """``round(normal(mu, sigma) / q) * q``."""

    type: Literal["qnormal"] = "qnormal"  # type: ignore[assignment]


class QLogNormal(Normal, _Quantised):
    """``round(exp(normal(mu, sigma)) / q) * q``."""

    type: Literal["qlognormal"] = "qlognormal"  # type: ignore[assignment]

    @model_validator(mode="after")
    def _exp_fits(self) -> Any:
        return _exp_fits(self)


#: How far from its mean a normal value is drawn at most (phalanx.search.space clamps
#: the quantile to 1e-9 … 1 - 1e-9: 6.0 deviations).
MOST_DEVIATIONS = 6.1


def _largest(dist: Any) -> float:
    """The largest size a distribution's values reach (infinity when no float holds it)."""
    if isinstance(dist, _LogBounded):
        return math.exp(dist.max_value)
    if isinstance(dist, _Bounded):
        return float(max(abs(dist.min_value), abs(dist.max_value)))
    spread = abs(dist.mu) + MOST_DEVIATIONS * dist.sigma
    if isinstance(dist, (LogNormal, QLogNormal)):
        return math.exp(spread) if spread <= 700 else math.inf
    return spread


def _exp_fits(dist: Any) -> Any:
    """A log-normal whose values all fit a float."""
    if abs(dist.mu) + MOST_DEVIATIONS * dist.sigma > 700:
        raise user_error(
            f"exp(normal({dist.mu}, {dist.sigma})) may not fit a float; keep |mu| + 6 × "
            "sigma within 700"
        )
    return dist


SearchDistribution = Annotated[
    Choice
    | RandInt
    | Uniform
    | LogUniform
    | QUniform
    | QLogUniform
    | Normal
    | LogNormal
    | QNormal
    | QLogNormal,
    Field(discriminator="type"),
]
DISTRIBUTIONS = (
    "choice", "randint", "uniform", "loguniform", "quniform", "qloguniform", "normal",
    "lognormal", "qnormal", "qlognormal",
)  # fmt: skip
#: Each distribution's model by its ``type`` (how an error finds a mistyped key's fields).
DISTRIBUTION_MODELS: dict[str, type[SpecModel]] = {
    model.model_fields["type"].default: model
    for model in (Choice, RandInt, Uniform, LogUniform, QUniform, QLogUniform, Normal,
                  LogNormal, QNormal, QLogNormal)
}  # fmt: skip


# -- how values are drawn, judged and stopped ----------------------------------


class SamplingAlgorithm(SpecModel):
    """How each trial's values are picked (Azure ML's ``sampling_algorithm``)."""

    type: Literal["random", "grid", "bayesian"] = "random"
    """``random`` (Optuna's random sampler, or Sobol points with ``rule: sobol``),
    ``grid`` (every combination of ``choice`` and ``randint`` values once) or
    ``bayesian`` (Optuna's TPE, proposing from the trials' results)."""
    seed: Annotated[StrictInt, Field(ge=0, lt=2**32)] | None = None
    """Makes the values of a sweep run one trial at a time the same again."""
    rule: Literal["random", "sobol"] = "random"
    """``random`` only: ``sobol`` spreads the trials evenly (a scrambled Sobol sequence)."""
    n_startup_trials: Annotated[StrictInt, Field(ge=1, le=MAX_TRIALS)] | None = None
    """``bayesian`` only (phalanx): trials drawn at random before it proposes from results
    (default: 10, or a fifth of ``max_total_trials`` when that is fewer, at least 2)."""

    @model_validator(mode="after")
    def _fits_type(self) -> SamplingAlgorithm:
        if self.rule == "sobol" and self.type != "random":
            raise user_error(
                "rule: sobol goes with type: random only", loc=("sampling_algorithm", "rule")
            )
        if self.n_startup_trials is not None and self.type != "bayesian":
            raise user_error(
                "goes with type: bayesian only", loc=("sampling_algorithm", "n_startup_trials")
            )
        return self


class Objective(SpecModel):
    """What a trial is judged by."""

    primary_metric: Annotated[str, Field(min_length=1, max_length=250)]
    """A metric each trial logs (``phalanx.train.log_metric`` or ``mlflow.log_metric``);
    its last value is the trial's result."""
    goal: Literal["minimize", "maximize"]

    @field_validator("goal", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class _Policy(SpecModel):
    evaluation_interval: Annotated[StrictInt, Field(ge=0, le=10**9)] = 1
    """Judge every this many reports of the primary metric (0 or 1: each), as Azure ML."""
    delay_evaluation: Annotated[StrictInt, Field(ge=0, le=10**9)] = 0
    """Judge no report before this many have come."""


class BanditPolicy(_Policy):
    """Stop a trial whose metric is not within ``slack_factor`` (a ratio) or
    ``slack_amount`` (an absolute difference) of the best trial's at the same step."""

    type: Literal["bandit"] = "bandit"
    slack_factor: Annotated[StrictInt | StrictFloat, Field(gt=0)] | None = None
    slack_amount: Annotated[StrictInt | StrictFloat, Field(gt=0)] | None = None

    _finite = field_validator("slack_factor", "slack_amount", mode="before")(_finite_number)

    @model_validator(mode="after")
    def _one_slack(self) -> BanditPolicy:
        if (self.slack_factor is None) == (self.slack_amount is None):
            raise user_error(
                "give exactly one of slack_factor (e.g. 0.1: within 10 % of the best) and "
                "slack_amount (an absolute difference)",
                loc=("early_termination", "slack_factor"),
            )
        return self


class MedianStoppingPolicy(_Policy):
    """Stop a trial whose best value so far is worse than the median of the trials'
    running averages at the same step."""

    type: Literal["median_stopping"] = "median_stopping"


class TruncationSelectionPolicy(_Policy):
    """At each evaluation, stop the trials in the worst ``truncation_percentage`` %."""

    type: Literal["truncation_selection"] = "truncation_selection"
    truncation_percentage: Annotated[StrictInt, Field(ge=1, le=99)]
    exclude_finished_jobs: StrictBool = False
    """Leave trials that have ended out of the comparison."""


class AshaPolicy(SpecModel):
    """phalanx's addition: asynchronous successive halving (Optuna's
    ``SuccessiveHalvingPruner``). A trial goes on past rung ``k`` (step
    ``min_resource * reduction_factor**k``) only if it is in the best
    ``1/reduction_factor`` of the trials that reached that rung."""

    type: Literal["asha"] = "asha"
    min_resource: Annotated[StrictInt, Field(ge=1, le=10**9)] = 1
    """The step of the first rung."""
    reduction_factor: Annotated[StrictInt, Field(ge=2, le=100)] = 3
    min_early_stopping_rate: Annotated[StrictInt, Field(ge=0, le=30)] = 0


class HyperbandPolicy(SpecModel):
    """phalanx's addition: Hyperband (Optuna's ``HyperbandPruner``): several ASHA
    brackets, each trial in one."""

    type: Literal["hyperband"] = "hyperband"
    min_resource: Annotated[StrictInt, Field(ge=1, le=10**9)] = 1
    max_resource: Annotated[StrictInt, Field(ge=1, le=10**9)]
    """The step a trial that is never stopped reaches last."""
    reduction_factor: Annotated[StrictInt, Field(ge=2, le=100)] = 3

    @model_validator(mode="after")
    def _ordered(self) -> HyperbandPolicy:
        if self.max_resource <= self.min_resource:
            raise user_error(
                f"max_resource ({self.max_resource}) must be greater than min_resource "
                f"({self.min_resource})",
                loc=("early_termination", "max_resource"),
            )
        return self


EarlyTermination = Annotated[
    BanditPolicy | MedianStoppingPolicy | TruncationSelectionPolicy | AshaPolicy | HyperbandPolicy,
    Field(discriminator="type"),
]
POLICIES = ("bandit", "median_stopping", "truncation_selection", "asha", "hyperband")
#: Each policy's model by its ``type``.
POLICY_MODELS: dict[str, type[SpecModel]] = {
    model.model_fields["type"].default: model
    for model in (BanditPolicy, MedianStoppingPolicy, TruncationSelectionPolicy, AshaPolicy,
                  HyperbandPolicy)
}  # fmt: skip


class SweepLimits(SpecModel):
    """How much a sweep runs."""

    max_total_trials: Annotated[StrictInt, Field(ge=1, le=MAX_TRIALS)] | None = None
    """Trials in all (default: the grid's size for ``grid``, else 20)."""
    max_concurrent_trials: Annotated[StrictInt, Field(ge=1)] | None = None
    """Trials at once, at most :data:`MAX_CONCURRENT_TRIALS` (default: ``max_total_trials``
    up to that; the queue bounds them too)."""
    timeout: int | None = None
    """Seconds the sweep may run; then its running trials are canceled. Same forms as a
    command job's ``limits.timeout`` (``7200``, ``2h``)."""
    trial_timeout: int | None = None
    """Seconds each trial may run (its ``limits.timeout``)."""

    @field_validator("timeout", "trial_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("max_concurrent_trials")
    @classmethod
    def _at_once(cls, value: int | None) -> int | None:
        if value is not None and value > MAX_CONCURRENT_TRIALS:
            raise user_error(
                f"at most {MAX_CONCURRENT_TRIALS} trials run at once (Azure ML's bound too); "
                f"got {value}: lower it (the sweep makes more trials as others end)"
            )
        return value


class TrialSpec(SpecModel):
    """The command job each trial runs (Azure ML's ``trial``)."""

    command: str
    """The program, with ``${{search_space.x}}``, ``${{inputs.x}}`` and ``${{outputs.x}}``."""
    code: str | None = None
    """Local folder snapshotted once for every trial (relative to the spec file)."""
    environment: EnvironmentValue | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)
    distribution: Distribution | None = None
    resources: Resources | None = None

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise user_error("must not be empty; give the program to run, e.g. python train.py")
        return value

    @field_validator("code")
    @classmethod
    def _code_folder(cls, value: str | None, info: ValidationInfo) -> str | None:
        # As a command job's code: the trials run a snapshot taken when the sweep is made.
        return local_code_folder(value, info)

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env_as_str(cls, value: Any) -> Any:
        return coerce_str_mapping(value, "environment_variables")

    @field_validator("environment_variables")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return valid_env_names(value, None)

    @field_validator("distribution", mode="before")
    @classmethod
    def _lower_type(cls, value: Any) -> Any:
        return lower_type(value)


#: The trial's fields that a command job has at its top level.
TRIAL_FIELDS = ("command", "code", "environment", "environment_variables", "distribution",
                "resources")  # fmt: skip


class SweepSpec(LocatedSpec):
    """An Azure ML v2 sweep job. Build one with :func:`phalanx.spec.load_spec_text`."""

    schema_: str | None = Field(default=None, alias="$schema")
    type: Literal["sweep"]
    name: str | None = None
    display_name: str | None = None
    experiment_name: str = "Default"
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    trial: TrialSpec
    inputs: dict[str, InputValue] = Field(default_factory=dict)
    """Every trial's inputs; a search-space value of the same name replaces a literal one."""
    outputs: dict[str, OutputSpec] = Field(default_factory=dict)
    """Every trial's outputs (each trial writes its own)."""
    compute: str = "local"
    search_space: Annotated[dict[str, SearchDistribution], Field(min_length=1)]
    sampling_algorithm: SamplingAlgorithm = Field(default_factory=SamplingAlgorithm)
    """``random``, ``grid``, ``bayesian``, or a mapping with ``type``, ``seed`` …"""
    objective: Objective
    early_termination: EarlyTermination | None = None
    limits: SweepLimits = Field(default_factory=SweepLimits)
    retry: Retry = Field(default_factory=Retry)
    """phalanx's retry policy of each trial."""
    queue_settings: QueueSettings | None = None
    """The trials' tier and priority (a ``spot`` sweep's trials may be preempted)."""
    identity: dict[str, Any] | None = None
    services: dict[str, Any] | None = None

    # -- field rules -------------------------------------------------------

    @field_validator("name")
    @classmethod
    def _azure_name(cls, value: str | None) -> str | None:
        value = valid_job_name(value)
        if value is not None and len(value) > 240:
            raise user_error("a sweep's name must leave room for its trials' (at most 240)")
        return value

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_str(cls, value: Any) -> Any:
        return limited_tags(coerce_str_mapping(value, "tags"), "tags")

    @field_validator("display_name", "experiment_name")
    @classmethod
    def _short_text(cls, value: str | None) -> str | None:
        return limited(value, MAX_NAME)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        return limited(value, MAX_DESCRIPTION)

    @field_validator("schema_")
    @classmethod
    def _schema_url(cls, value: str | None) -> str | None:
        return limited(value, MAX_URL)

    @field_validator("identity", "services")
    @classmethod
    def _recorded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return recorded(value)

    @field_validator("compute", mode="before")
    @classmethod
    def _local_compute(cls, value: Any) -> Any:
        return COMPUTE_TARGETS.get(value, value) if isinstance(value, str) else value

    @field_validator("search_space", mode="before")
    @classmethod
    def _space(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or not IDENTIFIER_RE.fullmatch(key):
                raise user_error(
                    f"{show(key)} is not a valid name; use letters, digits and '_', not "
                    "starting with a digit, so ${{search_space.<name>}} can refer to it",
                    loc=("search_space", str(key)),
                )
            if isinstance(item, dict) and isinstance(item.get("type"), str):
                kind = item["type"].lower()
                if kind not in DISTRIBUTIONS:
                    raise user_error(
                        f"unknown distribution {show(item['type'])}; use one of "
                        f"{', '.join(DISTRIBUTIONS)}",
                        loc=("search_space", key, "type"),
                    )
                item = {**item, "type": kind}
            elif isinstance(item, dict):
                raise user_error(
                    f"give the distribution's type, one of {', '.join(DISTRIBUTIONS)}",
                    loc=("search_space", key),
                )
            out[key] = item
        return out

    @field_validator("sampling_algorithm", mode="before")
    @classmethod
    def _algorithm(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = {"type": value}
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            value = {**value, "type": value["type"].lower()}
            if isinstance(value.get("rule"), str):
                value["rule"] = value["rule"].lower()
        return value

    @field_validator("early_termination", mode="before")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            kind = value["type"].lower().replace("medianstopping", "median_stopping")
            kind = kind.replace("truncationselection", "truncation_selection")
            if kind not in POLICIES:
                raise user_error(
                    f"unknown early_termination type {show(value['type'])}; use one of "
                    f"{', '.join(POLICIES)}",
                    loc=("early_termination", "type"),
                )
            return {**value, "type": kind}
        return value

    @field_validator("inputs", "outputs", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str) or not IDENTIFIER_RE.fullmatch(key):
                    raise user_error(
                        f"{show(key)} is not a valid name; use letters, digits and '_', not "
                        "starting with a digit"
                    )
            return {k: ({} if v is None else v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _whole(self) -> SweepSpec:
        for key, item in self.inputs.items():
            if key in self.search_space and isinstance(item, InputSpec):
                raise user_error(
                    f"search_space.{key} has the name of a data input; rename one of them",
                    loc=("search_space", key),
                )
        if self.sampling_algorithm.type == "grid":
            for key, dist in self.search_space.items():
                if not isinstance(dist, (Choice, RandInt)):
                    raise user_error(
                        f"grid sampling takes choice and randint only; {key} is "
                        f"{dist.type}: list its values as a choice, or use random or bayesian",
                        loc=("search_space", key),
                    )
            if self.grid_size() > MAX_TRIALS and self.limits.max_total_trials is None:
                raise user_error(
                    f"the grid has {self.grid_size()} points, more than the {MAX_TRIALS} trials "
                    "a sweep runs; list fewer values, or set limits.max_total_trials to run "
                    "part of it",
                    loc=("search_space",),
                )
            if self.grid_size() > MAX_CHOICES:
                raise user_error(
                    f"the grid has {self.grid_size()} points, more than {MAX_CHOICES}; list "
                    "fewer values",
                    loc=("search_space",),
                )
        limits = self.limits
        total = self.max_total_trials
        if limits.max_concurrent_trials is not None and limits.max_concurrent_trials > total:
            raise user_error(
                f"max_concurrent_trials ({limits.max_concurrent_trials}) is more than "
                f"max_total_trials ({total}); lower it",
                loc=("limits", "max_concurrent_trials"),
            )
        places: dict[tuple[str, ...], str] = {("trial", "command"): self.trial.command}
        for key, text in self.trial.environment_variables.items():
            places[("trial", "environment_variables", key)] = text
        for where, text in places.items():
            for match in _EXPRESSION_RE.finditer(text):
                found = _SEARCH_RE.fullmatch(match.group(0))
                if found is not None and found[1] not in self.search_space:
                    raise user_error(
                        f"{match.group(0)} names nothing in search_space (it has "
                        f"{', '.join(sorted(self.search_space))}); add it or fix the name",
                        loc=where,
                    )
                secret = SECRET_RE.fullmatch(match.group(0))
                if found is None and secret is None and where[1] == "environment_variables":
                    raise user_error(
                        f"{match.group(0)}: an environment variable takes only "
                        "${{search_space.<name>}} and ${{secrets.<name>}}",
                        loc=where,
                    )
        try:
            self.template()
        except ValidationError as exc:
            first = exc.errors()[0]
            located = (first.get("ctx") or {}).get("loc") or first["loc"]
            field = ".".join(str(part) for part in located)
            raise user_error(first["msg"], loc=_loc(field)) from None
        return self

    # -- what callers use --------------------------------------------------

    @property
    def max_total_trials(self) -> int:
        given = self.limits.max_total_trials
        if given is not None:
            return given
        return min(self.grid_size(), MAX_TRIALS) if self.sampling_algorithm.type == "grid" else 20

    @property
    def max_concurrent_trials(self) -> int:
        return self.limits.max_concurrent_trials or min(
            self.max_total_trials, MAX_CONCURRENT_TRIALS
        )

    def grid_size(self) -> int:
        """The number of combinations of the search space's values (grid sampling)."""
        size = 1
        for dist in self.search_space.values():
            size *= len(dist.values) if isinstance(dist, Choice) else getattr(dist, "upper", 1)
        return size

    def trial_spec(self, params: dict[str, Any], *, name: str | None = None) -> JobSpec:
        """The command job of the trial that got ``params`` (search-space name → value).

        Raises:
            ValueError: the result is not a valid command job (a pydantic error).
        """
        record = self.to_record()
        trial = record.pop("trial")
        command = _with_values(trial.pop("command"), params)
        # An environment variable gets the value itself (variables are not interpolated).
        variables = trial.get("environment_variables") or {}
        trial["environment_variables"] = {
            k: _SEARCH_RE.sub(lambda m: render_literal(params[m[1]]), v)
            for k, v in variables.items()
        }
        job: dict[str, Any] = {
            "type": "command",
            "command": command,
            **{k: v for k, v in trial.items() if v is not None},
            "experiment_name": self.experiment_name,
            "inputs": {**record.get("inputs", {}), **params},
            "outputs": record.get("outputs", {}),
            "compute": self.compute,
            "retry": record.get("retry", {}),
            "tags": dict(self.tags),
        }
        if self.queue_settings is not None:
            job["queue_settings"] = record["queue_settings"]
        if self.limits.trial_timeout is not None:
            job["limits"] = {"timeout": self.limits.trial_timeout}
        if name is not None:
            job["name"] = name
        return JobSpec.model_validate(job)

    def template(self) -> JobSpec:
        """A trial's command job with each value at a representative point: what is
        checked of a sweep before it runs (inputs, outputs, environment, reach)."""
        return self.trial_spec({k: _representative(d) for k, d in self.search_space.items()})

    @staticmethod
    def template_field(field: str) -> str:
        """The sweep's field a field of :meth:`template` came from (``code`` →
        ``trial.code``), for placing uploaded files and naming errors."""
        head = field.split(".", 1)[0]
        return f"trial.{field}" if head in TRIAL_FIELDS else field

    @property
    def code_path(self) -> Path | None:
        """``trial.code`` as a :class:`~pathlib.Path`: snapshotted with the sweep."""
        return None if self.trial.code is None else Path(self.trial.code)

    def check_supported(self) -> None:
        """Refuse what the schema accepts but phalanx cannot run (as for the trial)."""
        try:
            self.template().check_supported()
        except SpecError as exc:
            raise self.error(self.template_field(exc.field or "trial"), exc.message) from None

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable dict for the database (YAML key names, no ``None`` values)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _with_values(command: str, params: dict[str, Any]) -> str:
    """``command`` with each search-space value in place, one word whatever it holds
    (``hello world``, a quote, a ``$``), quoted for where it sits as a path phalanx made
    is (:mod:`phalanx.spec.interpolate`). ``${{inputs.x}}`` of a searched ``x`` is its
    value too; every other reference is left for the job's own interpolation."""
    text = _SEARCH_RE.sub(lambda m: "${{inputs." + m[1] + "}}", command)
    contexts = quoting_contexts(text)

    def value_of(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind != "inputs" or name not in params:
            return match.group(0)
        value = render_literal(params[name])
        where = contexts.get(match.start())
        if where is None:  # in a comment, which a line break would end
            return " ".join(value.splitlines())
        return quote_within(where, value)

    return REFERENCE_RE.sub(value_of, text)


def _loc(field: str | None) -> tuple[str, ...]:
    return tuple(SweepSpec.template_field(field or "trial").split("."))


def _representative(dist: Any) -> bool | int | float | str:
    """A value the distribution can give: its first choice, its lowest integer, the
    middle of its range, its mean."""
    if isinstance(dist, Choice):
        return dist.values[0]
    if isinstance(dist, RandInt):
        return 0
    if isinstance(dist, _LogBounded):
        return math.exp((dist.min_value + dist.max_value) / 2)
    if isinstance(dist, _Bounded):
        return float((dist.min_value + dist.max_value) / 2)
    if isinstance(dist, (LogNormal, QLogNormal)):
        return math.exp(dist.mu)
    return float(dist.mu)


def is_sweep(data: Any) -> bool:
    """Whether a parsed spec document is a sweep job."""
    return isinstance(data, dict) and str(data.get("type", "")).lower() == "sweep"


__all__ = [
    "BUILTIN_OUTPUTS",
    "DISTRIBUTIONS",
    "POLICIES",
    "Choice",
    "InputSpec",
    "OutputSpec",
    "SweepSpec",
    "TrialSpec",
    "is_sweep",
]
