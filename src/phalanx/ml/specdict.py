"""A :class:`~phalanx.ml.entities.Command` as the mapping a ``job.yml`` holds, and its
validation by the one loader the CLI uses.

Only types are checked here, the ones YAML could not hold (an object where a
mapping belongs, a list where a value belongs): each is an
:class:`~phalanx.ml.errors.MLError` naming the argument. Everything else (names,
counts, modes, ``${{inputs.x}}`` references…) is the loader's, so a spec built
in Python and one read from YAML meet the same rules and the same messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from phalanx.errors import SpecError
from phalanx.ml.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from phalanx.ml.entities.assets import Environment
from phalanx.ml.entities.identity import IDENTITIES
from phalanx.ml.entities.io import Input, Output
from phalanx.ml.entities.job import (
    Command,
    CommandJobLimits,
    JobResourceConfiguration,
    JobService,
    QueueSettings,
)
from phalanx.ml.errors import COMMAND, argument_error, from_spec_error
from phalanx.ml.notes import note_once

if TYPE_CHECKING:
    from phalanx.ml.entities.sweep_job import SweepJob
    from phalanx.service.jobs import SpecText
    from phalanx.spec import JobSpec, SweepSpec

# The order of a job.yml's keys, as Azure ML's documents write them.
_ORDER = (
    "type", "name", "display_name", "experiment_name", "description", "tags", "code", "command",
    "environment", "environment_variables", "inputs", "outputs", "compute", "resources",
    "distribution", "limits", "retry", "queue_settings", "identity", "services",
)  # fmt: skip

_DISTRIBUTIONS = (PyTorchDistribution, MpiDistribution, TensorFlowDistribution)


class _Block(Protocol):
    """One of the SDK's classes for a block of the spec (``resources``, ``limits``…)."""

    def _to_dict(self) -> dict[str, Any]: ...


def _type_name(value: Any) -> str:
    return type(value).__name__


def _plain(value: Any, field: str) -> Any:
    """``value`` as YAML holds it: paths as text, mappings with text keys."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{field}.{i}") for i, v in enumerate(value)]
    raise argument_error(COMMAND, field, f"must be a value YAML can hold; got {_type_name(value)}")


def _mapping(value: Any, field: str, cls: type | None = None, what: str = "") -> dict[str, Any]:
    """A parameter given as a dataclass of ours or a dict, as a dict."""
    if cls is not None and isinstance(value, cls):
        block = cast(_Block, value)
        return {k: _plain(v, f"{field}.{k}") for k, v in block._to_dict().items()}
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{field}.{k}") for k, v in value.items()}
    shape = f"{what} or a dict" if what else "a dict"
    raise argument_error(COMMAND, field, f"must be {shape}; got {_type_name(value)}")


# Azure ML's default datastore, in the short and the long form of a datastore URI.
_AZURE_DEFAULT_STORE = re.compile(r"^azureml://(?:[^?#]*/)?datastores/workspaceblobstore(?=/|$)")


def default_store(path: Any) -> Any:
    """``path`` with Azure ML's default datastore ``workspaceblobstore`` read as phalanx's
    ``default`` (a note says so once); anything else as given."""
    if not isinstance(path, str) or not _AZURE_DEFAULT_STORE.match(path):
        return path
    note_once(
        "workspaceblobstore",
        "azureml://datastores/workspaceblobstore/… (Azure ML's default datastore) is read as "
        "phalanx's default datastore, azureml://datastores/default/…",
    )
    return _AZURE_DEFAULT_STORE.sub("azureml://datastores/default", path)


def _with_store(data: dict[str, Any]) -> dict[str, Any]:
    if "path" in data:
        data["path"] = default_store(data["path"])
    return data


def _input(name: str, value: Any) -> Any:
    from phalanx.ml.entities.search_space import SweepDistribution

    field = f"inputs.{name}"
    if isinstance(value, SweepDistribution):
        raise argument_error(
            COMMAND, field, f"{type(value).__name__}(...) is a search-space value; make the "
            "sweep with job.sweep(primary_metric=..., goal=...) and submit that",
        )  # fmt: skip
    if isinstance(value, Input):
        if value._extra:
            extra = ", ".join(sorted(value._extra))
            raise argument_error(
                COMMAND, field, f"Input({extra}=...) is for components; a command job's input "
                "takes type, path and mode",
            )  # fmt: skip
        return _with_store(_plain(value._to_dict(), field))
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return _with_store(_plain(value, field))
    raise argument_error(
        COMMAND, field, "must be Input(type=..., path=...) or a literal (str, int, float, bool); "
        f"got {_type_name(value)}",
    )  # fmt: skip


def _output(name: str, value: Any) -> Any:
    field = f"outputs.{name}"
    if value is None:
        return {}
    if isinstance(value, Output):
        if value._extra:
            extra = ", ".join(sorted(value._extra))
            raise argument_error(
                COMMAND, field, f"Output({extra}=...) is not a field of a command job's output",
            )  # fmt: skip
        data = value._to_dict()
        if value._kept_for and value.path == f"azureml://jobs/{value._kept_for}/outputs/{name}":
            # Read back from a submitted job: where phalanx kept it, not where to write.
            del data["path"]
        return _with_store(_plain(data, field))
    if isinstance(value, Mapping):
        return _with_store(_plain(value, field))
    raise argument_error(COMMAND, field, f"must be Output(type=...); got {_type_name(value)}")


def _distribution(value: Any) -> dict[str, Any]:
    if isinstance(value, _DISTRIBUTIONS):
        return value._to_dict()
    if isinstance(value, Mapping):
        return dict(_plain(value, "distribution"))
    got = repr(value) if isinstance(value, str) else _type_name(value)
    raise argument_error(
        COMMAND, "distribution", "must be PyTorchDistribution(...), MpiDistribution(...), "
        f"TensorFlowDistribution(...) or a dict with type: pytorch, mpi or tensorflow; got {got}",
    )  # fmt: skip


def _environment(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, Environment):
        return _plain(value._to_dict(), "environment")
    if isinstance(value, Mapping):
        return _plain(value, "environment")
    raise argument_error(
        COMMAND, "environment", "must be Environment(image=..., conda_file=...), a dict, or a "
        f"registered name (azureml:NAME:VERSION); got {_type_name(value)}",
    )  # fmt: skip


def _text(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise argument_error(COMMAND, field, f"must be a string; got {_type_name(value)}")


def spec_dict(job: Command) -> dict[str, Any]:
    """The mapping a ``job.yml`` of ``job`` holds; values left out are left out.

    Raises:
        MLError: an attribute of a type the spec cannot hold, named.
    """
    spec: dict[str, Any] = {"type": "command"}
    for key in ("name", "display_name", "experiment_name", "description", "compute"):
        value = _text(getattr(job, key), key)
        if value is not None:
            spec[key] = value
    if job.command is not None:
        spec["command"] = _text(job.command, "command")
    if job.code is not None:
        if not isinstance(job.code, (str, os.PathLike)):
            raise argument_error(
                COMMAND, "code", f"must be a local folder (str or path); got {_type_name(job.code)}"
            )
        spec["code"] = os.fspath(job.code)
    if job.tags:
        spec["tags"] = _mapping(job.tags, "tags")
    if job.environment is not None:
        spec["environment"] = _environment(job.environment)
    if job.environment_variables:
        spec["environment_variables"] = _mapping(job.environment_variables, "environment_variables")
    if job.inputs:
        if not isinstance(job.inputs, Mapping):
            raise argument_error(COMMAND, "inputs", f"must be a dict; got {_type_name(job.inputs)}")
        spec["inputs"] = {str(k): _input(str(k), v) for k, v in job.inputs.items()}
    if job.outputs:
        if not isinstance(job.outputs, Mapping):
            raise argument_error(
                COMMAND, "outputs", f"must be a dict; got {_type_name(job.outputs)}"
            )
        spec["outputs"] = {str(k): _output(str(k), v) for k, v in job.outputs.items()}
    parts: tuple[tuple[str, Any, type, str], ...] = (
        ("resources", job.resources, JobResourceConfiguration, "JobResourceConfiguration(...)"),
        ("limits", job.limits, CommandJobLimits, "CommandJobLimits(...)"),
        ("queue_settings", job.queue_settings, QueueSettings, "QueueSettings(...)"),
    )
    for key, value, cls, what in parts:
        if value is not None:
            made = _mapping(value, key, cls, what)
            if made:
                spec[key] = made
    if job.distribution is not None:
        spec["distribution"] = _distribution(job.distribution)
    if job.retry is not None:
        spec["retry"] = _mapping(job.retry, "retry")
    if job.identity is not None:
        identity = job.identity
        if isinstance(identity, IDENTITIES):
            identity = identity._to_dict()
        spec["identity"] = _mapping(identity, "identity")
    if job.services:
        spec["services"] = {
            str(k): _mapping(v, f"services.{k}", JobService, "JobService(...)")
            for k, v in job.services.items()
        }
    return {key: spec[key] for key in _ORDER if key in spec}


def spec_text(job: Command) -> SpecText:
    """The job as the YAML text a job is created from; relative paths resolve against
    the folder ``command()`` was called in, as in Azure ML. The same text is the
    same object, so a job validated by ``command()`` and created unchanged is
    parsed once (:meth:`SpecText.load` keeps its result)."""
    from phalanx.service.jobs import SpecText

    text = job._yaml()
    kept = job._spec_text
    if kept is None or kept.text != text or kept.base_dir != job._base_dir:
        # A new text: the job was changed since it was last validated.
        kept = job._spec_text = SpecText(text, COMMAND, job._base_dir)
    return kept


def validate(job: Command) -> JobSpec:
    """The job's spec, validated by the loader ``phalanx job create`` uses.

    Raises:
        MLError: every problem, each field named as the caller wrote it.
    """
    from phalanx.spec import JobSpec

    try:
        spec = spec_text(job).load()
    except SpecError as exc:
        raise from_spec_error(exc, job._renames) from None
    if not isinstance(spec, JobSpec):  # command() dumps a command job
        raise TypeError(f"command() made a {spec.type} job")
    return spec


def check_local_inputs(
    job: Command | SweepJob, spec: JobSpec | SweepSpec, source: str = COMMAND
) -> None:
    """Each local input of ``spec`` exists and is what its type says, as ``command()``
    checks ``code``; the path is named as the caller wrote it, the call as ``source``.

    Raises:
        MLError: ``command(): inputs.data.path: './nope' does not exist; …``.
    """
    from phalanx.spec.parts import InputSpec

    for name, value in spec.inputs.items():
        if not isinstance(value, InputSpec) or not value.is_local:
            continue
        given = job.inputs.get(name)
        written = given.get("path") if isinstance(given, Mapping) else getattr(given, "path", None)
        shown = repr(written if written is not None else value.path)
        path, field = value.local_path, f"inputs.{name}.path"
        if not path.exists():
            raise argument_error(
                source, field, f"{shown} does not exist; the path is relative to the current "
                "folder (or give a URI: azureml://datastores/..., azureml:NAME:VERSION)",
            )  # fmt: skip
        if value.type == "uri_folder" and not path.is_dir():
            raise argument_error(
                source, field, f"{shown} is a file, not a folder; use Input(type='uri_file')"
            )
        if value.type == "uri_file" and path.is_dir():
            raise argument_error(
                source, field, f"{shown} is a folder, not a file; use Input(type='uri_folder')"
            )
