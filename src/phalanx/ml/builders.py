"""``command(...)``: a command job from Azure ML's SDK parameters."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phalanx.errors import suggest
from phalanx.ml.distribution import Distribution
from phalanx.ml.entities.assets import Environment
from phalanx.ml.entities.identity import IDENTITIES, Identity
from phalanx.ml.entities.job import (
    Command,
    CommandJobLimits,
    JobResourceConfiguration,
    JobService,
    QueueSettings,
)
from phalanx.ml.errors import COMMAND, argument_error
from phalanx.ml.specdict import _mapping, check_local_inputs, validate

# Azure ML parameters that mean nothing for a command job run by phalanx: accepted
# and left out of the spec (component reuse, Azure placement).
_IGNORED = frozenset({"is_deterministic", "properties", "locations"})


def command(
    *,
    command: str | None = None,
    code: str | os.PathLike[str] | None = None,
    inputs: Mapping[str, Any] | None = None,
    outputs: Mapping[str, Any] | None = None,
    environment: str | Environment | Mapping[str, Any] | None = None,
    environment_variables: Mapping[str, Any] | None = None,
    compute: str | None = None,
    instance_count: int | None = None,
    instance_type: str | None = None,
    shm_size: str | None = None,
    distribution: Distribution | Mapping[str, Any] | None = None,
    resources: JobResourceConfiguration | Mapping[str, Any] | None = None,
    limits: CommandJobLimits | Mapping[str, Any] | None = None,
    timeout: int | str | None = None,
    queue_settings: QueueSettings | Mapping[str, Any] | None = None,
    job_tier: str | None = None,
    priority: str | int | None = None,
    services: Mapping[str, JobService | Mapping[str, Any]] | None = None,
    identity: Identity | Mapping[str, Any] | None = None,
    retry: Mapping[str, Any] | None = None,
    name: str | None = None,
    display_name: str | None = None,
    experiment_name: str | None = None,
    description: str | None = None,
    tags: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Command:
    """A command job, validated now by the loader ``phalanx job create`` uses.

    The parameters are Azure ML's (``azure.ai.ml.command``); ``retry`` is
    phalanx's own block. ``code`` and local input paths are relative to the
    current folder. ``instance_count``, ``instance_type`` and ``shm_size`` go
    into ``resources``; ``timeout`` into ``limits``; ``job_tier`` and
    ``priority`` into ``queue_settings``.

    Returns:
        The job, to submit with ``ml_client.jobs.create_or_update(job)``.

    Raises:
        MLError: a parameter of the wrong type, or a spec that does not validate,
            in one line naming the parameter (``command(): inputs.data.mode: …``).
    """
    for key in kwargs:
        if key not in _IGNORED:
            close = suggest(key, _PARAMETERS)
            hint = f"; did you mean {close!r}?" if close else ""
            raise argument_error(
                COMMAND, key, f"is not a parameter phalanx supports for a command job{hint}"
            )
    renames: dict[str, str] = {}
    merged_resources = _merge(
        resources, "resources", JobResourceConfiguration, "JobResourceConfiguration(...)",
        {"instance_count": instance_count, "instance_type": instance_type, "shm_size": shm_size},
        renames,
    )  # fmt: skip
    merged_limits = _merge(
        limits, "limits", CommandJobLimits, "CommandJobLimits(...)", {"timeout": timeout}, renames
    )
    merged_queue = _merge(
        queue_settings, "queue_settings", QueueSettings, "QueueSettings(...)",
        {"job_tier": job_tier, "priority": priority}, renames,
    )  # fmt: skip
    job = Command(
        command=command,
        code=code,
        inputs=_as_dict(inputs, "inputs"),
        outputs=_as_dict(outputs, "outputs"),
        environment=environment,
        environment_variables=_as_dict(environment_variables, "environment_variables"),
        compute=compute,
        resources=merged_resources,
        distribution=distribution,  # type: ignore[arg-type]  # a Mapping is checked later
        limits=merged_limits,
        queue_settings=merged_queue,
        services=_as_dict(services, "services"),
        identity=identity if isinstance(identity, IDENTITIES) else _as_dict(identity, "identity"),
        retry=_as_dict(retry, "retry"),
        name=name,
        display_name=display_name,
        experiment_name=experiment_name,
        description=description,
        tags=_as_dict(tags, "tags"),
        base_dir=Path.cwd(),
    )
    job._renames = renames
    check_local_inputs(job, validate(job))
    return job


_PARAMETERS = tuple(p for p in inspect.signature(command).parameters if p != "kwargs")


def _as_dict(value: Any, field: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    raise argument_error(COMMAND, field, f"must be a dict; got {type(value).__name__}")


def _merge(
    value: Any,
    field: str,
    cls: type,
    what: str,
    shortcuts: dict[str, Any],
    renames: dict[str, str],
) -> Any:
    """``value`` (one of our dataclasses or a dict) with the shortcut parameters given
    to ``command()`` laid over it; each shortcut's errors name the shortcut.

    A dataclass (or nothing) stays a dataclass, so ``job.resources.instance_count``
    reads as in Azure ML; a dict stays a dict (its unknown keys are the loader's to name).
    ``None`` when nothing was given."""
    merged = {} if value is None else _mapping(value, field, cls, what)
    for key, given in shortcuts.items():
        if given is not None:
            merged[key] = given
            renames[f"{field}.{key}"] = key
    if value is None and not merged:
        return None
    if value is None or isinstance(value, cls):
        return cls(**merged)
    return merged
