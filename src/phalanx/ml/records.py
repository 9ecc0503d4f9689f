"""What phalanx stores, as the SDK's objects: a spec mapping or a job's record as a
:class:`~phalanx.ml.entities.Command`, asset and model records as ``Data``/``Model``."""

from __future__ import annotations

import datetime as dt
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
from phalanx.ml.studio import studio_url
from phalanx.workspace import JobRecord


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


def job_from_record(record: JobRecord, server_url: str | None) -> Command:
    """A submitted job as ``ml_client.jobs`` returns it.

    An output without a ``path`` is kept with the job: its path is
    ``azureml://jobs/<job>/outputs/<output>``, which ``Model(path=...)`` and
    ``Data(path=...)`` take.
    """
    job = command_from_spec(record.spec, Path(record.job_dir))
    job.name = record.name
    job.display_name = record.display_name
    job.experiment_name = record.experiment_name
    job.description = record.description
    job.tags = dict(record.tags)
    job.status = record.status.value
    for key, output in job.outputs.items():
        if output.path is None:
            output.path = f"azureml://jobs/{record.name}/outputs/{key}"
    job.studio_url = studio_url(record.name, server_url)
    job.services = {**job.services, "Studio": JobService(type="Studio", endpoint=job.studio_url)}
    job.error = None if record.error is None else record.error.message.strip().splitlines()[-1]
    job.creation_context = {
        "created_at": _iso(record.created_at),
        "created_by": record.created_by,
        "started_at": _iso(record.started_at),
        "ended_at": _iso(record.ended_at),
    }
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
