"""A :class:`~phalanx.ml.entities.SweepJob` as the mapping a sweep ``job.yml`` holds, its
validation by the loader the CLI uses, and ``Command.sweep()``.

The trial and the sweep's inputs and outputs are made by :mod:`phalanx.ml.specdict`,
as a command job's are, then laid out as a sweep: the trial's fields under
``trial``, and each ``${{inputs.X}}`` of its command whose ``X`` is searched
written ``${{search_space.X}}`` (as Azure ML's SDK writes it).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from phalanx.errors import SpecError, SpecProblem
from phalanx.ml.entities.job import Command, QueueSettings, _relocated
from phalanx.ml.entities.search_space import SweepDistribution
from phalanx.ml.entities.sweep_job import SweepJob
from phalanx.ml.entities.sweep_settings import (
    EarlyTerminationPolicy,
    Objective,
    SamplingAlgorithm,
    SweepJobLimits,
)
from phalanx.ml.errors import COMMAND, SWEEP, MLError, argument_error, from_spec_error
from phalanx.ml.specdict import _plain
from phalanx.ml.specdict import spec_dict as command_dict

if TYPE_CHECKING:
    from phalanx.service.jobs import SpecText
    from phalanx.spec import SweepSpec

# A command job's fields that a sweep's trial holds; the rest are the sweep's own.
_TRIAL_KEYS = ("command", "code", "environment", "environment_variables", "distribution",
               "resources")  # fmt: skip

# The order of a sweep job.yml's keys, as Azure ML's documents write them.
_ORDER = (
    "type", "name", "display_name", "experiment_name", "description", "tags", "trial",
    "inputs", "outputs", "compute", "search_space", "sampling_algorithm", "objective",
    "early_termination", "limits", "retry", "queue_settings", "identity", "services",
)  # fmt: skip

_INPUT_REF = re.compile(r"\$\{\{\s*inputs\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def _searched(command: str, names: Any) -> str:
    """``command`` with ``${{inputs.X}}`` written ``${{search_space.X}}`` for each searched X."""
    return _INPUT_REF.sub(
        lambda m: "${{search_space." + m[1] + "}}" if m[1] in names else m[0], command
    )


def _block(value: Any, field: str, cls: type, what: str) -> Any:
    """A sweep block given as one of our classes, a dict, or (``type`` only) a string."""
    if isinstance(value, cls):
        return _plain(cast(Any, value)._to_dict(), field)
    if isinstance(value, Mapping):
        return _plain(value, field)
    if isinstance(value, str) and cls is not Objective and cls is not SweepJobLimits:
        return value if cls is SamplingAlgorithm else {"type": value}
    got = repr(value) if isinstance(value, str) else type(value).__name__
    raise argument_error(SWEEP, field, f"must be {what} or a dict; got {got}")


def _trial_command(sweep: SweepJob) -> Command:
    """The command job a trial of ``sweep`` is, with the sweep's inputs and outputs."""
    trial = sweep.trial
    if not isinstance(trial, Command):
        got = "nothing" if trial is None else type(trial).__name__
        raise argument_error(SWEEP, "trial", f"must be a command job, command(...); got {got}")
    return Command(
        command=trial.command,
        code=trial.code,
        environment=trial.environment,
        environment_variables=trial.environment_variables,
        distribution=trial.distribution,
        resources=trial.resources,
        inputs=sweep.inputs,
        outputs=sweep.outputs,
        compute=sweep.compute,
        queue_settings=sweep.queue_settings,
        # "Studio" is the page of a sweep read back, not a service it asks for.
        services={k: v for k, v in sweep.services.items() if k != "Studio"},
        identity=sweep.identity,
        retry=None if sweep.retry is None else dict(sweep.retry),
        name=sweep.name,
        display_name=sweep.display_name,
        experiment_name=sweep.experiment_name,
        description=sweep.description,
        tags=sweep.tags,
        base_dir=sweep._base_dir,
    )


def _as_sweep_error(error: MLError) -> MLError:
    """A problem found in the trial's command job, named as the sweep's field."""
    problems = []
    for problem in error.problems:
        field = problem.field
        if field is not None and field.split(".", 1)[0] in _TRIAL_KEYS:
            field = f"trial.{field}"
        problems.append(SpecProblem(problem.message, field=field, source=SWEEP))
    made = MLError.of(problems)
    assert isinstance(made, MLError)
    return made


def spec_dict(sweep: SweepJob, folder: Path | None = None) -> dict[str, Any]:
    """The mapping a sweep ``job.yml`` of ``sweep`` holds; values left out are left out.
    With ``folder``, local paths are written relative to it (for a file there).

    Raises:
        MLError: an attribute of a type the spec cannot hold, named.
    """
    try:
        flat = command_dict(_trial_command(sweep))
    except MLError as exc:
        raise _as_sweep_error(exc) from None
    if folder is not None:
        flat = _relocated(flat, sweep._base_dir, folder)
    if not isinstance(sweep.search_space, Mapping):
        raise argument_error(
            SWEEP, "search_space", f"must be a dict; got {type(sweep.search_space).__name__}"
        )
    space: dict[str, Any] = {}
    for key, dist in sweep.search_space.items():
        space[str(key)] = _block(
            dist, f"search_space.{key}", SweepDistribution,
            "Choice(...), Uniform(...) or another distribution of phalanx.ml.sweep",
        )  # fmt: skip
    trial = {k: flat.pop(k) for k in _TRIAL_KEYS if k in flat}
    if "command" in trial:
        trial["command"] = _searched(trial["command"], space)
    flat.pop("type")
    spec: dict[str, Any] = {"type": "sweep", **flat, "trial": trial}
    if space:
        spec["search_space"] = space
    blocks: tuple[tuple[str, Any, type, str], ...] = (
        ("sampling_algorithm", sweep.sampling_algorithm, SamplingAlgorithm,
         "'random', 'grid', 'bayesian', RandomSamplingAlgorithm(...)"),
        ("objective", sweep.objective, Objective, "Objective(goal=..., primary_metric=...)"),
        ("early_termination", sweep.early_termination, EarlyTerminationPolicy,
         "BanditPolicy(...), MedianStoppingPolicy(...), TruncationSelectionPolicy(...), "
         "AshaPolicy(...), HyperbandPolicy(...)"),
        ("limits", sweep.limits, SweepJobLimits, "SweepJobLimits(...)"),
    )  # fmt: skip
    for key, value, cls, what in blocks:
        if value is not None:
            made = _block(value, key, cls, what)
            if made or key == "objective":
                spec[key] = made
    _trial_timeout(sweep, spec)
    return {key: spec[key] for key in _ORDER if key in spec}


def _trial_timeout(sweep: SweepJob, spec: dict[str, Any]) -> None:
    """The trial command's ``limits.timeout`` is each trial's, unless the sweep sets one."""
    limits = getattr(sweep.trial, "limits", None)
    if limits is None:
        return
    given = limits if isinstance(limits, Mapping) else limits._to_dict()
    if given.get("stall_timeout") is not None:
        raise argument_error(
            SWEEP, "trial.limits.stall_timeout", "a sweep's trials take no stall_timeout; "
            "give limits.trial_timeout (sweep_job.set_limits(trial_timeout=...))",
        )  # fmt: skip
    timeout = given.get("timeout")
    if timeout is not None and "trial_timeout" not in spec.get("limits", {}):
        spec["limits"] = {**spec.get("limits", {}), "trial_timeout": timeout}


def spec_text(sweep: SweepJob) -> SpecText:
    """The sweep as the YAML text a job is created from (relative paths resolve against
    the folder the job was made in); the same text is the same object, parsed once."""
    from phalanx.service.jobs import SpecText

    text = sweep._yaml()
    kept = sweep._spec_text
    if kept is None or kept.text != text or kept.base_dir != sweep._base_dir:
        kept = sweep._spec_text = SpecText(text, SWEEP, sweep._base_dir)
    return kept


def validate(sweep: SweepJob) -> SweepSpec:
    """The sweep's spec, validated by the loader ``phalanx job create`` uses.

    Raises:
        MLError: every problem, each field named as the sweep job holds it
            (``sweep(): search_space.lr.max_value: …``).
    """
    from phalanx.spec import SweepSpec

    try:
        spec = spec_text(sweep).load()
    except SpecError as exc:
        if isinstance(exc, MLError):
            raise
        raise from_spec_error(exc, {}, source=SWEEP) from None
    if not isinstance(spec, SweepSpec):  # spec_dict writes type: sweep
        raise TypeError(f"a sweep made a {spec.type} job")
    return spec


def sweep_of(
    job: Command,
    *,
    primary_metric: str,
    goal: str,
    sampling_algorithm: Any = "random",
    compute: str | None = None,
    max_concurrent_trials: int | None = None,
    max_total_trials: int | None = None,
    timeout: int | str | None = None,
    trial_timeout: int | str | None = None,
    early_termination_policy: Any = None,
    search_space: Mapping[str, Any] | None = None,
    identity: Any = None,
    queue_settings: Any = None,
    job_tier: str | None = None,
    priority: str | int | None = None,
    check: bool = True,
) -> SweepJob:
    """``job.sweep(...)``: the sweep of ``job`` (see :meth:`Command.sweep`).

    Raises:
        MLError: the sweep does not validate (when ``check``).
    """
    if search_space is not None and not isinstance(search_space, Mapping):
        raise argument_error(
            SWEEP, "search_space", f"must be a dict; got {type(search_space).__name__}"
        )
    searched = {k: v for k, v in job.inputs.items() if isinstance(v, SweepDistribution)}
    searched.update(search_space or {})
    trial = copy.deepcopy(job)
    trial.inputs = {}
    trial.outputs = {}
    queue = copy.deepcopy(queue_settings if queue_settings is not None else job.queue_settings)
    if job_tier is not None or priority is not None:
        if queue is None:
            queue = QueueSettings()
        for key, value in (("job_tier", job_tier), ("priority", priority)):
            if value is None:
                continue
            if isinstance(queue, dict):
                queue[key] = value
            else:
                setattr(queue, key, value)
    sweep = SweepJob(
        trial=trial,
        search_space=copy.deepcopy(searched),
        objective=Objective(goal=goal, primary_metric=primary_metric),
        sampling_algorithm=copy.deepcopy(sampling_algorithm),
        early_termination=copy.deepcopy(early_termination_policy),
        limits=SweepJobLimits(
            max_concurrent_trials=max_concurrent_trials,
            max_total_trials=max_total_trials,
            timeout=timeout,
            trial_timeout=trial_timeout,
        ),
        inputs=copy.deepcopy({k: v for k, v in job.inputs.items() if k not in searched}),
        outputs=copy.deepcopy(dict(job.outputs)),
        compute=compute if compute is not None else job.compute,
        queue_settings=queue,
        identity=identity if identity is not None else copy.deepcopy(job.identity),
        services=copy.deepcopy(job.services),
        retry=copy.deepcopy(job.retry),
        name=None if job.status is not None else job.name,
        display_name=job.display_name,
        experiment_name=job.experiment_name,
        description=job.description,
        tags=job.tags,
        base_dir=job._base_dir,
    )
    if check:
        validate(sweep)
    return sweep


def check_searched_command(job: Command) -> None:
    """Check a command some of whose inputs are distributions (``job(lr=Uniform(...))``)
    as the sweep it is for, each problem named as the caller wrote it
    (``command(): inputs.lr.max_value: …``).

    Raises:
        MLError: the distributions or the command do not validate.
    """
    try:
        # Any objective will do: the caller gives theirs to sweep().
        validate(sweep_of(job, primary_metric="objective", goal="maximize", check=False))
    except MLError as exc:
        problems = []
        for problem in exc.problems:
            field = problem.field or ""
            if field.startswith("search_space."):
                field = "inputs." + field.removeprefix("search_space.")
            elif field.startswith("trial."):
                field = field.removeprefix("trial.")
            problems.append(SpecProblem(problem.message, field=field or None, source=COMMAND))
        made = MLError.of(problems)
        assert isinstance(made, MLError)
        raise made from None
