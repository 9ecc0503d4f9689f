"""The command job and its parts, as Azure ML's SDK names them.

:class:`Command` is both what :func:`phalanx.ml.command` builds and what
``ml_client.jobs`` returns (then with ``name``, ``status``, ``studio_url`` and
``services``). Its spec is :attr:`Command.spec_dict`, the mapping a ``job.yml``
would hold (made by :mod:`phalanx.ml.specdict`), validated by the same loader
as YAML.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from phalanx.ml.distribution import Distribution


def _present(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


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


@dataclass(kw_only=True)
class CommandJobLimits:
    """``limits``: ``timeout`` of the whole job (seconds, or ``"2h"``); ``stall_timeout``
    (phalanx's own) for a job without progress."""

    timeout: int | str | None = None
    stall_timeout: int | str | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


@dataclass(kw_only=True)
class QueueSettings:
    """``queue_settings``: ``job_tier`` (``spot``, ``standard``…) and ``priority``."""

    job_tier: str | None = None
    priority: str | int | None = None

    def _to_dict(self) -> dict[str, Any]:
        return _present(self)


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
        identity: dict[str, Any] | None = None,
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
        self.inputs: dict[str, Any] = dict(inputs or {})
        self.outputs: dict[str, Any] = dict(outputs or {})
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

    def __repr__(self) -> str:
        return f"Command(name={self.name!r}, status={self.status!r}, command={self.command!r})"


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
