"""The command job and its parts, as Azure ML's SDK names them.

:class:`Command` is both what :func:`phalanx.ml.command` builds and what
``ml_client.jobs`` returns (then with ``name``, ``status``, ``studio_url`` and
``services``). Its spec is :attr:`Command.spec_dict`, the mapping a ``job.yml``
would hold (made by :mod:`phalanx.ml.specdict`), validated by the same loader
as YAML.
"""

from __future__ import annotations

import copy
import html
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from phalanx.ml.distribution import Distribution
from phalanx.ml.errors import checked_keywords

if TYPE_CHECKING:
    from phalanx.service.jobs import SpecText


class AttrDict(dict[str, Any]):
    """A job's ``inputs`` or ``outputs``: a dict whose keys are attributes too, as in
    Azure ML (``job.inputs.epochs = 5`` is ``job.inputs["epochs"] = 5``)."""

    def __init__(self, values: Mapping[str, Any], kind: str) -> None:
        super().__init__(values)
        object.__setattr__(self, "_kind", kind)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            known = ", ".join(self) or "none"
            raise AttributeError(
                f"the job has no {self._kind[:-1]} {key!r}; its {self._kind}: {known}"
            ) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        del self[key]

    def __deepcopy__(self, memo: dict[int, Any]) -> AttrDict:
        return AttrDict({k: copy.deepcopy(v, memo) for k, v in self.items()}, self._kind)


def _present(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


@checked_keywords
@dataclass(kw_only=True)
class JobResourceConfiguration:
    """``resources``: nodes, and what each node needs.

    ``gpus_per_instance``, ``cpus_per_instance`` and ``memory_per_instance`` are
    phalanx's own (see the job spec's ``resources``).
    """

    instance_count: int | None = None
    instance_type: str | None = None
    shm_size: str | None = None
    gpus_per_instance: int | None = None
    cpus_per_instance: float | None = None
    memory_per_instance: int | str | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


def fill_block(owner: object, key: str, cls: type, given: dict[str, Any]) -> None:
    """Set the given (not ``None``) fields of ``owner``'s block ``key`` (a ``cls`` made
    when it has none, or a plain mapping): what ``set_limits``-like calls share."""
    block = getattr(owner, key)
    if block is None:
        block = cls()
        setattr(owner, key, block)
    for name, value in given.items():
        if value is None:
            continue
        if isinstance(block, dict):
            block[name] = value
        else:
            setattr(block, name, value)


@checked_keywords
@dataclass(kw_only=True)
class CommandJobLimits:
    """``limits``: ``timeout`` of the whole job (seconds, or ``"2h"``); ``stall_timeout``
    (phalanx's own) for a job without progress."""

    timeout: int | str | None = None
    stall_timeout: int | str | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


@checked_keywords
@dataclass(kw_only=True)
class QueueSettings:
    """``queue_settings``: ``job_tier`` (``spot``, ``standard``…) and ``priority``."""

    job_tier: str | None = None
    priority: str | int | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


@checked_keywords
@dataclass(kw_only=True)
class JobService:
    """An endpoint of a job: ``services["Studio"].endpoint`` is its web page. Services
    given to ``command(services=...)`` (jupyter, ssh…) are recorded, not started."""

    type: str | None = None
    endpoint: str | None = None
    port: int | None = None
    nodes: str | None = None
    properties: dict[str, Any] | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


class Command:
    """A command job. Build one with :func:`phalanx.ml.command`; submit it with
    ``ml_client.jobs.create_or_update(job)``.

    Its attributes may be changed before submission (``job.display_name = ...``,
    ``job.inputs["data"] = Input(...)``); the spec is made from them, and
    validated by the same loader as a ``job.yml``, at ``command()`` and again at
    submission.

    Attributes of a submitted job: ``name``, ``status`` (``Queued``,
    ``Running``, ``Completed``, ``Failed``, ``Canceled``…), ``studio_url``,
    ``services["Studio"].endpoint``, ``outputs[<name>].path``, ``error`` (the
    root cause of a failed job, one line).
    """

    def __init__(
        self,
        *,
        command: str | None = None,
        code: str | os.PathLike[str] | None = None,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        environment: Any = None,
        environment_variables: dict[str, Any] | None = None,
        compute: str | None = None,
        resources: JobResourceConfiguration | dict[str, Any] | None = None,
        distribution: Distribution | dict[str, Any] | None = None,
        limits: CommandJobLimits | dict[str, Any] | None = None,
        queue_settings: QueueSettings | dict[str, Any] | None = None,
        services: dict[str, Any] | None = None,
        identity: Any = None,
        retry: dict[str, Any] | None = None,
        name: str | None = None,
        display_name: str | None = None,
        experiment_name: str | None = None,
        description: str | None = None,
        tags: dict[str, Any] | None = None,
        base_dir: Path | None = None,
    ) -> None:
        self.command = command
        self.code = code
        self.inputs = inputs or {}
        self.outputs = outputs or {}
        self.environment = environment
        self.environment_variables: dict[str, Any] = dict(environment_variables or {})
        self.compute = compute
        self.resources = resources if resources is not None else JobResourceConfiguration()
        self.distribution = distribution
        self.limits = limits if limits is not None else CommandJobLimits()
        self.queue_settings = queue_settings
        self.services: dict[str, Any] = dict(services or {})
        self.identity = identity
        self.retry = retry
        self.name = name
        self.display_name = display_name
        self.experiment_name = experiment_name
        self.description = description
        self.tags: dict[str, Any] = dict(tags or {})
        self.type = "command"
        self.status: str | None = None
        """``None`` until submitted; then the job's state when it was last read."""
        self.studio_url: str | None = None
        self.error: str | None = None
        self.creation_context: dict[str, Any] = {}
        self._base_dir = base_dir if base_dir is not None else Path.cwd()
        self._renames: dict[str, str] = {}
        self._spec_text: SpecText | None = None
        """The job's YAML as last validated (:func:`phalanx.ml.specdict.spec_text`)."""

    @property
    def inputs(self) -> AttrDict:
        """The inputs by name: ``job.inputs["epochs"]`` or ``job.inputs.epochs``."""
        return self._inputs

    @inputs.setter
    def inputs(self, value: Mapping[str, Any]) -> None:
        # Anything else is kept as given, for the spec to name at submission.
        self._inputs = AttrDict(value, "inputs") if isinstance(value, Mapping) else value

    @property
    def outputs(self) -> AttrDict:
        """The outputs by name: ``job.outputs["model"]`` or ``job.outputs.model``."""
        return self._outputs

    @outputs.setter
    def outputs(self, value: Mapping[str, Any]) -> None:
        self._outputs = AttrDict(value, "outputs") if isinstance(value, Mapping) else value

    def __call__(self, **inputs: Any) -> Command:
        """A copy of this job with ``inputs`` bound, as calling Azure ML's command does
        (``job = train(data=Input(path=...), epochs=3)``).

        An input given a distribution (``lr=Uniform(min_value=0.001, max_value=0.1)``,
        from :mod:`phalanx.ml.sweep`) is to be searched: make the sweep with
        :meth:`sweep`.

        Raises:
            MLError: a name that is not one of the job's inputs, or a value the spec
                cannot take.
        """
        from phalanx.ml.entities.search_space import SweepDistribution
        from phalanx.ml.errors import unknown_keywords
        from phalanx.ml.specdict import validate
        from phalanx.ml.sweepdict import check_searched_command

        unknown_keywords("command() called", inputs, self.inputs, what="declared input")
        job = copy.deepcopy(self)
        job.inputs.update(inputs)
        if any(isinstance(v, SweepDistribution) for v in job.inputs.values()):
            check_searched_command(job)
        else:
            validate(job)
        return job

    def sweep(
        self,
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
        search_space: dict[str, Any] | None = None,
        identity: Any = None,
        queue_settings: QueueSettings | dict[str, Any] | None = None,
        job_tier: str | None = None,
        priority: str | int | None = None,
    ) -> Any:
        """A sweep job of this command, as Azure ML's ``Command.sweep`` makes it: the
        inputs given distributions (``job(lr=Uniform(...))``) and ``search_space`` are
        searched, the other inputs are every trial's. The command's ``timeout`` is each
        trial's unless ``trial_timeout`` is given.

        Returns:
            A :class:`~phalanx.ml.entities.SweepJob`, validated now; submit it with
            ``ml_client.jobs.create_or_update(sweep_job)``.

        Raises:
            MLError: the sweep does not validate, in one line naming the field
                (``sweep(): search_space.lr.max_value: …``).
        """
        from phalanx.ml.sweepdict import sweep_of

        return sweep_of(
            self,
            primary_metric=primary_metric, goal=goal, sampling_algorithm=sampling_algorithm,
            compute=compute, max_concurrent_trials=max_concurrent_trials,
            max_total_trials=max_total_trials, timeout=timeout, trial_timeout=trial_timeout,
            early_termination_policy=early_termination_policy, search_space=search_space,
            identity=identity, queue_settings=queue_settings, job_tier=job_tier,
            priority=priority,
        )  # fmt: skip

    def set_resources(
        self,
        *,
        instance_type: str | None = None,
        instance_count: int | None = None,
        shm_size: str | None = None,
        locations: list[str] | None = None,
        properties: dict[str, Any] | None = None,
        docker_args: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Set ``resources`` as Azure ML's ``Command.set_resources`` does; ``locations``,
        ``properties`` and ``docker_args`` mean nothing to phalanx (a note says so once).

        Raises:
            MLError: an unknown keyword, or a value the spec cannot take.
        """
        from phalanx.ml.errors import unknown_keywords
        from phalanx.ml.notes import note_once

        known = (
            *("instance_type", "instance_count", "shm_size", "locations", "properties"),
            *("docker_args", "gpus_per_instance", "cpus_per_instance", "memory_per_instance"),
        )
        unknown_keywords("job.set_resources()", kwargs, known)
        if (locations, properties, docker_args) != (None, None, None):
            note_once(
                "set_resources",
                "locations, properties and docker_args of set_resources() are Azure's; "
                "phalanx leaves them out",
            )
        given = {"instance_type": instance_type, "instance_count": instance_count,
                 "shm_size": shm_size, **kwargs}  # fmt: skip
        self._set("resources", JobResourceConfiguration, given)

    def set_limits(self, *, timeout: int | str | None = None, **kwargs: Any) -> None:
        """Set ``limits`` (``timeout``; phalanx's own ``stall_timeout``).

        Raises:
            MLError: an unknown keyword, or a value the spec cannot take.
        """
        from phalanx.ml.errors import unknown_keywords

        unknown_keywords("job.set_limits()", kwargs, ("timeout", "stall_timeout"))
        self._set("limits", CommandJobLimits, {"timeout": timeout, **kwargs})

    def set_queue_settings(
        self, *, job_tier: str | None = None, priority: str | int | None = None
    ) -> None:
        """Set ``queue_settings`` (``job_tier``, ``priority``).

        Raises:
            MLError: a value the spec cannot take.
        """
        self._set("queue_settings", QueueSettings, {"job_tier": job_tier, "priority": priority})

    def _set(self, key: str, cls: type, given: dict[str, Any]) -> None:
        from phalanx.ml.specdict import validate

        fill_block(self, key, cls, given)
        validate(self)

    @property
    def spec_dict(self) -> dict[str, Any]:
        """The job spec as a ``job.yml`` holds it (local paths as given).

        Raises:
            MLError: an attribute of the wrong type.
        """
        from phalanx.ml.specdict import spec_dict

        return spec_dict(self)

    def _yaml(self, spec: dict[str, Any] | None = None) -> str:
        data = spec if spec is not None else self.spec_dict
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)

    def dump(self, dest: str | os.PathLike[str]) -> None:
        """Write the job as YAML that ``phalanx job create -f`` accepts.

        Local paths (``code``, inputs, ``environment.conda_file``/``pip_file``)
        are written relative to the file's folder.
        """
        target = Path(dest)
        folder = target.absolute().parent
        spec = _relocated(self.spec_dict, self._base_dir, folder)
        target.write_text(self._yaml(spec), encoding="utf-8")

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
        if self.status is None:  # not submitted: what it will run
            return (
                f"Command(name={self.name!r}, command={self.command!r}, compute={self.compute!r})"
            )
        shown = ", ".join(f"{k}={v!r}" for k, v in self._summary().items())
        return f"Command({shown})"

    def _repr_html_(self) -> str:
        """A small table for notebooks: the job's name, status, and its page."""
        return html_table(self._summary())


def html_table(summary: dict[str, Any]) -> str:
    """A job's summary as a notebook shows it: a table, its studio URL a link."""
    rows = []
    for key, value in summary.items():
        text = html.escape("" if value is None else str(value))
        if key == "studio_url" and value is not None:
            text = f'<a href="{text}" target="_blank" rel="noopener">{text}</a>'
        rows.append(f"<tr><th>{html.escape(key)}</th><td>{text}</td></tr>")
    return f"<table>{''.join(rows)}</table>"


def _relocated(spec: dict[str, Any], base: Path, folder: Path) -> dict[str, Any]:
    """``spec`` with its local paths (relative to ``base``) made relative to ``folder``."""
    from phalanx.spec.values import is_remote, strip_file_scheme

    def move(path: str) -> str:
        if is_remote(path):
            return path
        absolute = (base / strip_file_scheme(path)).resolve()
        return os.path.relpath(absolute, folder)

    out = dict(spec)
    if isinstance(out.get("code"), str):
        out["code"] = move(out["code"])
    if isinstance(out.get("inputs"), dict):
        out["inputs"] = {
            k: {**v, "path": move(v["path"])} if isinstance(v, dict) and "path" in v else v
            for k, v in out["inputs"].items()
        }
    if isinstance(out.get("outputs"), dict):
        out["outputs"] = {
            k: {**v, "path": move(v["path"])} if isinstance(v, dict) and "path" in v else v
            for k, v in out["outputs"].items()
        }
    env = out.get("environment")
    if isinstance(env, dict):
        out["environment"] = {
            k: move(v) if k in ("conda_file", "pip_file") and isinstance(v, str) else v
            for k, v in env.items()
        }
    return out
