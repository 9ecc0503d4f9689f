"""The sweep job of Azure ML's SDK: a command job run many times over a search space.

Made as in Azure ML, from a command whose inputs were replaced by distributions::

    job_for_sweep = job(lr=Uniform(min_value=0.001, max_value=0.1))
    sweep_job = job_for_sweep.sweep(primary_metric="acc", goal="Maximize")

or with :class:`SweepJob` itself. Its spec is :attr:`SweepJob.spec_dict`, the
mapping a sweep ``job.yml`` holds (:mod:`phalanx.ml.sweepdict`), validated by the
loader ``phalanx job create`` uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from phalanx.ml.entities.job import AttrDict, Command, html_table
from phalanx.ml.entities.sweep_settings import (
    EarlyTerminationPolicy,
    Objective,
    SamplingAlgorithm,
    SweepJobLimits,
)
from phalanx.ml.errors import checked_keywords

if TYPE_CHECKING:
    from phalanx.ml.entities.search_space import SweepDistribution
    from phalanx.service.jobs import SpecText
    from phalanx.workspace.trials import SweepView


@dataclass(frozen=True)
class SweepTrial:
    """One trial of a submitted sweep (phalanx's own: ``sweep_job.trials``)."""

    number: int
    job_name: str
    """The trial's job: ``ml_client.jobs.get(job_name)``, its logs, outputs and metrics."""
    params: dict[str, Any]
    """The values drawn for it, by search-space name."""
    status: str | None
    """Its job's status (``Running``, ``Completed``, ``Canceled``…)."""
    state: str
    """As the sweep sees it: ``pending``, ``started``, ``completed``, ``failed``,
    ``pruned`` (stopped by the early-termination policy) or ``canceled``."""
    value: float | None
    """The last value of the primary metric it logged."""
    reason: str | None
    """Why it was stopped or failed, in one line."""


class SweepJob:
    """A sweep job. Make one with ``command(...)(lr=Uniform(...)).sweep(...)`` or
    ``SweepJob(trial=command(...), search_space=..., objective=...)``; submit it with
    ``ml_client.jobs.create_or_update(sweep_job)``.

    Attributes may be changed before submission (``sweep_job.early_termination =
    BanditPolicy(...)``, ``sweep_job.set_limits(...)``); the spec is made from them and
    validated again at submission.

    A submitted sweep also has ``name``, ``status``, ``studio_url``, ``error``,
    ``properties["best_child_run_id"]`` (the best trial's job, as in Azure ML), and,
    phalanx's own, :attr:`trials` and :attr:`best_trial`, read when asked.
    """

    def __init__(
        self,
        *,
        trial: Command | None = None,
        search_space: Mapping[str, Any] | None = None,
        objective: Objective | Mapping[str, Any] | None = None,
        sampling_algorithm: str | SamplingAlgorithm | Mapping[str, Any] | None = "random",
        early_termination: EarlyTerminationPolicy | str | Mapping[str, Any] | None = None,
        limits: SweepJobLimits | Mapping[str, Any] | None = None,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        compute: str | None = None,
        queue_settings: Any = None,
        identity: Any = None,
        services: Mapping[str, Any] | None = None,
        retry: Mapping[str, Any] | None = None,
        name: str | None = None,
        display_name: str | None = None,
        experiment_name: str | None = None,
        description: str | None = None,
        tags: Mapping[str, Any] | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.trial = trial
        self.search_space: dict[str, SweepDistribution | Any] = dict(search_space or {})
        self.objective = objective
        self.sampling_algorithm = sampling_algorithm
        self.early_termination = early_termination
        self.limits = limits if limits is not None else SweepJobLimits()
        self.inputs = inputs or {}
        self.outputs = outputs or {}
        self.compute = compute
        self.queue_settings = queue_settings
        self.identity = identity
        self.services: dict[str, Any] = dict(services or {})
        self.retry = retry
        self.name = name
        self.display_name = display_name
        self.experiment_name = experiment_name
        self.description = description
        self.tags: dict[str, Any] = dict(tags or {})
        self.type = "sweep"
        self.status: str | None = None
        """``None`` until submitted; then the sweep's state when it was last read."""
        self.studio_url: str | None = None
        self.error: str | None = None
        self.creation_context: dict[str, Any] = {}
        self.properties: dict[str, str] = {}
        """Of a submitted sweep read with ``jobs.get``: ``best_child_run_id``, the best
        trial's job name, once a trial has a value (as in Azure ML)."""
        self._base_dir = base_dir if base_dir is not None else Path.cwd()
        self._spec_text: SpecText | None = None
        self._view: Callable[[], SweepView] | None = None
        """Reads the submitted sweep's trials (``jobs.sweep(name)``)."""

    @property
    def inputs(self) -> AttrDict:
        """Every trial's inputs that are not searched, by name."""
        return self._inputs

    @inputs.setter
    def inputs(self, value: Mapping[str, Any]) -> None:
        self._inputs = AttrDict(value, "inputs") if isinstance(value, Mapping) else value

    @property
    def outputs(self) -> AttrDict:
        """Every trial's outputs (each trial writes its own)."""
        return self._outputs

    @outputs.setter
    def outputs(self, value: Mapping[str, Any]) -> None:
        self._outputs = AttrDict(value, "outputs") if isinstance(value, Mapping) else value

    def set_limits(
        self,
        *,
        max_concurrent_trials: int | None = None,
        max_total_trials: int | None = None,
        timeout: int | str | None = None,
        trial_timeout: int | str | None = None,
    ) -> None:
        """Set ``limits``, as Azure ML's ``SweepJob.set_limits`` does; values not given
        are kept.

        Raises:
            MLError: a value the spec cannot take (``limits.max_concurrent_trials: …``).
        """
        self._set_block(
            "limits", SweepJobLimits,
            {"max_concurrent_trials": max_concurrent_trials, "max_total_trials": max_total_trials,
             "timeout": timeout, "trial_timeout": trial_timeout},
        )  # fmt: skip

    def set_objective(self, *, goal: str | None = None, primary_metric: str | None = None) -> None:
        """Set ``objective`` (``goal`` ``"Maximize"``/``"Minimize"``, ``primary_metric``).

        Raises:
            MLError: a value the spec cannot take.
        """
        self._set_block("objective", Objective, {"goal": goal, "primary_metric": primary_metric})

    def _set_block(self, key: str, cls: type, given: dict[str, Any]) -> None:
        from phalanx.ml.entities.job import fill_block
        from phalanx.ml.sweepdict import validate

        fill_block(self, key, cls, given)
        validate(self)

    @property
    def spec_dict(self) -> dict[str, Any]:
        """The sweep as a sweep ``job.yml`` holds it (local paths as given). Each
        ``${{inputs.X}}`` of the trial's command whose ``X`` is in ``search_space``
        is written ``${{search_space.X}}``, as Azure ML writes it.

        Raises:
            MLError: an attribute of a type the spec cannot hold, named.
        """
        from phalanx.ml.sweepdict import spec_dict

        return spec_dict(self)

    def _yaml(self, spec: dict[str, Any] | None = None) -> str:
        data = spec if spec is not None else self.spec_dict
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)

    def dump(self, dest: str | os.PathLike[str]) -> None:
        """Write the sweep as YAML that ``phalanx job create -f`` accepts; local paths
        (``trial.code``, inputs…) are written relative to the file's folder."""
        from phalanx.ml.sweepdict import spec_dict

        target = Path(dest)
        target.write_text(self._yaml(spec_dict(self, target.absolute().parent)), encoding="utf-8")

    # -- a submitted sweep --------------------------------------------------------

    @property
    def trials(self) -> list[SweepTrial]:
        """The trials made so far, by number, read now (phalanx's own). Empty for a
        sweep not submitted."""
        if self._view is None:
            return []
        view = self._view()
        return [_trial(t, view) for t in sorted(view.trials, key=lambda t: t.number)]

    @property
    def best_trial(self) -> SweepTrial | None:
        """The trial with the best value of the primary metric so far, read now
        (phalanx's own); ``None`` before one has a value."""
        if self._view is None:
            return None
        view = self._view()
        best = view.best
        return None if best is None else _trial(best, view)

    def _summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "display_name": self.display_name,
            "experiment_name": self.experiment_name,
            "compute": self.compute,
            "studio_url": self.studio_url,
        }

    def __repr__(self) -> str:
        if self.status is None:
            space = ", ".join(self.search_space) or "nothing"
            return f"SweepJob(name={self.name!r}, search_space=[{space}], compute={self.compute!r})"
        shown = ", ".join(f"{k}={v!r}" for k, v in self._summary().items())
        return f"SweepJob({shown})"

    def _repr_html_(self) -> str:
        """A small table for notebooks: the sweep's name, status, and its page."""
        return html_table(self._summary())


def _trial(record: Any, view: SweepView) -> SweepTrial:
    return SweepTrial(
        number=record.number,
        job_name=record.job_name,
        params=dict(record.params),
        status=view.statuses.get(record.job_name),
        state=str(record.state),
        value=record.value,
        reason=record.reason,
    )


checked_keywords(SweepJob)
