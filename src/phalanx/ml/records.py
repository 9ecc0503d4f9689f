"""What phalanx stores, as the SDK's objects: a spec mapping or a job's record as a
:class:`~phalanx.ml.entities.Command` (a sweep's as a
:class:`~phalanx.ml.entities.SweepJob`), asset and model records as ``Data``/``Model``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phalanx.ml.distribution import distribution_from_dict
from phalanx.ml.entities.assets import Data, Model
from phalanx.ml.entities.io import Input, Output
from phalanx.ml.entities.job import (
    Command,
    CommandJobLimits,
    JobResourceConfiguration,
    JobService,
    QueueSettings,
)
from phalanx.ml.entities.search_space import distribution_from_dict as search_from_dict
from phalanx.ml.entities.sweep_job import SweepJob
from phalanx.ml.entities.sweep_settings import (
    Objective,
    SweepJobLimits,
    algorithm_from_dict,
    policy_from_dict,
)
from phalanx.ml.studio import studio_url
from phalanx.workspace import JobRecord
from phalanx.workspace.trials import SweepView


def command_from_spec(spec: dict[str, Any], base_dir: Path) -> Command:
    """A :class:`Command` holding a (valid) spec mapping: inputs as :class:`Input`,
    outputs as :class:`Output`, the blocks as their classes."""
    inputs = {
        k: Input(**v) if isinstance(v, dict) else v for k, v in (spec.get("inputs") or {}).items()
    }
    outputs = {k: Output(**(v or {})) for k, v in (spec.get("outputs") or {}).items()}
    distribution = spec.get("distribution")
    queue = spec.get("queue_settings")
    return Command(
        command=spec.get("command"),
        code=spec.get("code"),
        inputs=inputs,
        outputs=outputs,
        environment=spec.get("environment"),
        environment_variables=spec.get("environment_variables"),
        compute=spec.get("compute"),
        resources=JobResourceConfiguration(**(spec.get("resources") or {})),
        distribution=None if distribution is None else distribution_from_dict(distribution),
        limits=CommandJobLimits(**(spec.get("limits") or {})),
        queue_settings=None if queue is None else QueueSettings(**queue),
        services=spec.get("services"),
        identity=spec.get("identity"),
        retry=spec.get("retry"),
        name=spec.get("name"),
        display_name=spec.get("display_name"),
        experiment_name=spec.get("experiment_name"),
        description=spec.get("description"),
        tags=spec.get("tags"),
        base_dir=base_dir,
    )


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def sweep_from_spec(spec: dict[str, Any], base_dir: Path) -> SweepJob:
    """A :class:`SweepJob` holding a (valid) sweep spec mapping, its blocks as their
    classes; the trial's command is kept as written (``${{search_space.X}}``)."""
    trial = command_from_spec(
        {k: v for k, v in (spec.get("trial") or {}).items() if k != "inputs"}, base_dir
    )
    limits = spec.get("limits") or {}
    objective = spec.get("objective") or {}
    return SweepJob(
        trial=trial,
        search_space={
            k: search_from_dict(v) if isinstance(v, dict) else v
            for k, v in (spec.get("search_space") or {}).items()
        },
        objective=Objective(
            goal=objective.get("goal"), primary_metric=objective.get("primary_metric")
        ),
        sampling_algorithm=algorithm_from_dict(spec.get("sampling_algorithm") or "random"),
        early_termination=policy_from_dict(spec.get("early_termination")),
        limits=SweepJobLimits(**{k: v for k, v in limits.items() if k in _SWEEP_LIMITS}),
        inputs={
            k: Input(**v) if isinstance(v, dict) else v
            for k, v in (spec.get("inputs") or {}).items()
        },
        outputs={k: Output(**(v or {})) for k, v in (spec.get("outputs") or {}).items()},
        compute=spec.get("compute"),
        queue_settings=None
        if spec.get("queue_settings") is None
        else QueueSettings(**spec["queue_settings"]),
        identity=spec.get("identity"),
        services=spec.get("services"),
        retry=spec.get("retry"),
        name=spec.get("name"),
        display_name=spec.get("display_name"),
        experiment_name=spec.get("experiment_name"),
        description=spec.get("description"),
        tags=spec.get("tags"),
        base_dir=base_dir,
    )


_SWEEP_LIMITS = ("max_concurrent_trials", "max_total_trials", "timeout", "trial_timeout")


def _submitted(job: Command | SweepJob, record: JobRecord, studio: str | None) -> None:
    """What a submitted job has besides its spec: name, status, pages, outputs' paths."""
    job.name = record.name
    job.display_name = record.display_name
    job.experiment_name = record.experiment_name
    job.description = record.description
    job.tags = dict(record.tags)
    job.status = record.status.value
    for key, output in job.outputs.items():
        if output.path is None and isinstance(job, Command):  # a sweep's are its trials'
            output.path = f"azureml://jobs/{record.name}/outputs/{key}"
            output._kept_for = record.name
    # None where nothing serves the page (no server, no `phalanx studio` running).
    job.studio_url = studio_url(record.name, studio)
    job.services = {**job.services, "Studio": JobService(type="Studio", endpoint=job.studio_url)}
    job.error = None if record.error is None else record.error.message.strip().splitlines()[-1]
    job.creation_context = {
        "created_at": _iso(record.created_at),
        "created_by": record.created_by,
        "started_at": _iso(record.started_at),
        "ended_at": _iso(record.ended_at),
    }


def sweep_from_record(
    record: JobRecord, studio: str | None, view: Callable[[], SweepView] | None
) -> SweepJob:
    """A submitted sweep as ``ml_client.jobs`` returns it; ``view`` reads its trials."""
    job = sweep_from_spec(record.spec, Path.cwd())
    _submitted(job, record, studio)
    job._view = view
    return job


def job_from_record(record: JobRecord, studio: str | None) -> Command:
    """A submitted job as ``ml_client.jobs`` returns it.

    An output without a ``path`` is kept with the job: its path is
    ``azureml://jobs/<job>/outputs/<output>``, which ``Model(path=...)`` and
    ``Data(path=...)`` take.
    """
    # Paths set on it later (a copy submitted again) are relative to the current folder.
    job = command_from_spec(record.spec, Path.cwd())
    _submitted(job, record, studio)
    return job


def data_from_json(data: dict[str, Any]) -> Data:
    """A data asset version as ``ml_client.data`` returns it."""
    return Data(
        name=data["name"],
        version=data["version"],
        path=data["path"],
        type=data["type"],
        description=data.get("description"),
        tags=dict(data.get("tags") or {}),
        id=data.get("uri"),
        creation_context={"created_at": data.get("created_at")},
    )


def model_from_json(data: dict[str, Any]) -> Model:
    """A model version as ``ml_client.models`` returns it (``path``: its folder in the registry)."""
    return Model(
        name=data["name"],
        version=data["version"],
        path=data.get("folder"),
        description=data.get("description"),
        tags=dict(data.get("tags") or {}),
        id=data.get("uri"),
        job_name=data.get("job"),
        files=list(data.get("files") or []),
        creation_context={"created_at": data.get("created_at"), "source": data.get("source")},
    )
