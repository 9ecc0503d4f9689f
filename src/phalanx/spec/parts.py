"""The components of a job spec, one small model each.

Field names are Azure ML v2 *command job* YAML keys, so an Azure ML ``job.yml``
validates unchanged where phalanx supports what it asks for. ``retry`` is
phalanx's own block.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator

from phalanx.limits import MAX_NAME
from phalanx.spec.values import (
    base_dir_of,
    is_remote,
    parse_duration,
    resolve_local,
    strip_file_scheme,
    user_error,
)
from phalanx.workspace.names import ASSET_NAME_RE, VERSION_RE

#: GPUs or CPU slots one node may ask for (no machine has more).
MAX_PER_NODE = 1024
#: Bytes of memory one node may ask for (an exbibyte).
MAX_MEMORY = 1 << 60

# Azure ML asset types phalanx does not read yet; named so the error says so
# instead of listing them as typos.
_LATER_ASSET_TYPES = frozenset(
    {"mltable", "mlflow_model", "custom_model", "triton_model", "uri_file_list"}
)


class SpecModel(BaseModel):
    """Base of every spec model: unknown keys are errors; numbers are fine as strings."""

    model_config = ConfigDict(
        extra="forbid",
        coerce_numbers_to_str=True,
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
    )


def _check_asset_type(value: Any, what: str) -> Any:
    if isinstance(value, str) and value in _LATER_ASSET_TYPES:
        if what == "output" and value == "custom_model":
            return value
        also = ", type: custom_model" if what == "output" else ""
        raise user_error(
            f"{what} type '{value}' is not supported yet; use type: uri_folder or "
            f"type: uri_file{also}"
        )
    return value


def _resolve_path(value: str, info: ValidationInfo) -> str:
    if not value.strip():
        raise user_error("must not be empty; give a local path or a URI")
    base = base_dir_of(info)
    return resolve_local(value, base) if base is not None else value


def _is_local(path: str | None) -> bool:
    return path is not None and not is_remote(path)


def _local_path(path: str | None, owner: str) -> Path:
    if path is None or is_remote(path):
        # A caller's bug: check is_local first.
        raise ValueError(f"{owner} path {path!r} is not a local path")
    return Path(strip_file_scheme(path))


class _DataPath:
    """Where a data input or output lives: the helpers both share."""

    if TYPE_CHECKING:  # a pydantic field of the model this is mixed into
        path: str | None

    @property
    def is_local(self) -> bool:
        """Whether ``path`` is on this machine's file system (not ``azureml://``, ``s3://``…)."""
        return _is_local(self.path)

    @property
    def local_path(self) -> Path:
        """``path`` as a local :class:`~pathlib.Path`.

        Raises:
            ValueError: ``path`` is a URI (or absent); check :attr:`is_local` first.
        """
        return _local_path(self.path, type(self).__name__)


class InputSpec(_DataPath, SpecModel):
    """A data input (``inputs.<name>`` given as a mapping).

    After loading, a local ``path`` is absolute (resolved against the spec
    file's folder; ``file://`` removed); URIs are kept as written.
    """

    type: Literal["uri_folder", "uri_file"] = "uri_folder"
    """A folder or a single file."""
    path: str
    """Local path, or a URI: ``azureml://…``, ``azureml:name:version``, ``https://``, ``s3://``…"""
    mode: Literal["ro_mount", "download", "direct"] = "ro_mount"
    """How the data reaches the job: read-only mount, copy to local disk, or the URI itself."""

    @field_validator("type", mode="before")
    @classmethod
    def _type_supported(cls, value: Any) -> Any:
        return _check_asset_type(value, "input")

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return _resolve_path(value, info)


class OutputSpec(_DataPath, SpecModel):
    """A data output (``outputs.<name>``; a null value means all defaults).

    With ``name``, the output is registered when the job completes, as Azure ML
    does: a ``custom_model`` output as a version of the model ``name`` (its files
    copied into the registry), a ``uri_folder``/``uri_file`` output as a version of
    the data asset ``name``.
    """

    type: Literal["uri_folder", "uri_file", "custom_model"] = "uri_folder"
    """A folder, a single file, or a model's folder."""
    path: str | None = None
    """Where the output is kept; ``None`` lets phalanx choose a folder in the job's record."""
    mode: Literal["rw_mount", "upload"] = "rw_mount"
    """Written in place through a mount, or written locally and uploaded at the end."""
    name: str | None = None
    """Register the output under this model (or data asset) name when the job completes."""
    version: str | None = None
    """The version to register; the next number when absent."""

    @field_validator("type", mode="before")
    @classmethod
    def _type_supported(cls, value: Any) -> Any:
        return _check_asset_type(value, "output")

    @field_validator("name")
    @classmethod
    def _name_valid(cls, value: str | None) -> str | None:
        if value is not None and (not ASSET_NAME_RE.fullmatch(value) or ".." in value):
            raise user_error(
                f"'{value}' is not a valid name to register; use letters, digits, '_', '-' "
                "and '.', starting with a letter or digit"
            )
        return value

    @field_validator("version")
    @classmethod
    def _version_valid(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.data.get("name") is None:
            raise user_error("a version needs a name to register the output under; add name:")
        if not VERSION_RE.fullmatch(value) or ".." in value or value == "latest":
            raise user_error(
                f"'{value}' is not a valid version; use letters, digits, '_', '-' and '.' "
                "(not 'latest'), or leave it out to get the next number"
            )
        return value

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _resolve_path(value, info)


class Resources(SpecModel):
    """How many machines (instances) the job runs on, and what each node needs."""

    instance_count: Annotated[StrictInt, Field(ge=1)] = 1
    """Number of nodes; each runs ``process_count_per_instance`` workers."""
    instance_type: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    """Azure ML VM size; recorded, not used by local compute."""
    shm_size: Annotated[str, Field(max_length=64)] | None = None
    """Docker shared-memory size (``8g``); recorded."""
    gpus_per_instance: Annotated[StrictInt, Field(ge=0, le=MAX_PER_NODE)] | None = None
    """phalanx's own: GPUs each node is given. On a target with GPUs the default
    is one per process (``process_count_per_instance``); 0 runs on CPUs only."""
    cpus_per_instance: Annotated[float, Field(gt=0, le=MAX_PER_NODE)] | None = None
    """phalanx's own: CPU slots each node holds. The default on a target without
    GPUs is one per process (at most the whole machine); on a GPU target, none
    are counted unless this is given."""
    memory_per_instance: Annotated[int, Field(ge=0, le=MAX_MEMORY)] | None = None
    """phalanx's own: memory each node holds, in bytes or as ``64G`` / ``500Gi``;
    none is counted when absent."""

    @field_validator("memory_per_instance", mode="before")
    @classmethod
    def _parse_memory(cls, value: Any) -> Any:
        if isinstance(value, str):
            from phalanx.sizes import parse_size

            try:
                return parse_size(value)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return value


class PyTorchDistribution(SpecModel):
    """PyTorch DDP through ``torch.distributed.run``."""

    type: Literal["pytorch"] = "pytorch"
    process_count_per_instance: Annotated[StrictInt, Field(ge=1)] = 1
    """Worker processes per node, usually one per GPU."""


class MpiDistribution(SpecModel):
    """MPI (Horovod, mpi4py): one Open MPI ``mpirun`` starts every node's ranks."""

    type: Literal["mpi"] = "mpi"
    process_count_per_instance: Annotated[StrictInt, Field(ge=1)] = 1
    """Worker processes per node."""


class TensorFlowDistribution(SpecModel):
    """TensorFlow: a process per worker and parameter server, each with its ``TF_CONFIG``."""

    type: Literal["tensorflow"] = "tensorflow"
    worker_count: Annotated[StrictInt, Field(ge=1)] | None = None
    """Number of workers; ``None`` means one per instance (Azure ML's default)."""
    parameter_server_count: Annotated[StrictInt, Field(ge=0)] = 0
    """Number of parameter servers."""


class Limits(SpecModel):
    """Limits on the whole job."""

    timeout: int | None = None
    """Seconds the job may run before it is canceled. YAML takes an int (Azure ML)
    or a duration string: ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d``."""

    stall_timeout: int | None = None
    """phalanx's own: seconds without progress from any rank (a heartbeat from
    ``phalanx.train.heartbeat`` or a line of log) after which the attempt is
    stopped as hung. Counting starts at the first sign of life of the
    attempt. Off when absent. Same forms as ``timeout``."""

    @field_validator("timeout", "stall_timeout", mode="before")
    @classmethod
    def _parse_timeout(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)


class Retry(SpecModel):
    """phalanx's retry policy: how often a failed or preempted job is tried again."""

    max_attempts: Annotated[StrictInt, Field(ge=1, le=1000)] = 1
    """Attempts in all for failures (1 means no retry)."""
    retry_on_exit_codes: list[Annotated[StrictInt, Field(ge=-255, le=255)]] = Field(
        default_factory=list, max_length=256
    )
    """Exit codes worth another attempt; empty means any non-zero exit code."""
    max_preemptions: Annotated[StrictInt, Field(ge=0, le=10_000)] = 10
    """Preemptions (spot/low-priority node taken away) tolerated; they do not
    count against ``max_attempts``."""
    preemption_grace: int = 30
    """Seconds between a preemption notice (SIGTERM to every rank) and SIGKILL:
    time for an emergency checkpoint. Azure gives spot VMs 30 s. Same forms as
    ``limits.timeout``."""

    @field_validator("preemption_grace", mode="before")
    @classmethod
    def _parse_grace(cls, value: Any) -> Any:
        return parse_duration(value)


class QueueSettings(SpecModel):
    """Azure ML's queue settings: where the job stands in its target's queue."""

    job_tier: Literal["spot", "basic", "standard", "premium"] | None = None
    """Azure ML job tier (``standard`` when absent); ``spot`` jobs may be preempted
    for jobs that rank above them."""
    priority: (
        Literal["low", "medium", "high"] | Annotated[StrictInt, Field(ge=0, le=1000)] | None
    ) = None
    """``low``, ``medium`` (the default) or ``high``; or a number on the same scale
    (1 = low, 2 = medium, 3 = high, more is higher, at most 1000). Low-priority jobs may be
    preempted for jobs that rank above them."""

    @field_validator("priority", mode="before")
    @classmethod
    def _normalise_priority(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 1000:
            # Said here: the union below would also call the number not one of the words.
            raise user_error(f"must be low, medium, high or a number from 0 to 1000; got {value}")
        return value.lower() if isinstance(value, str) else value

    @field_validator("job_tier", mode="before")
    @classmethod
    def _normalise_tier(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.lower()
            return None if value == "null" else value
        return value
