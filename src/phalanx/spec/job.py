"""JobSpec: a whole Azure ML-style command job."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from phalanx.errors import SpecError, quote
from phalanx.limits import MAX_DESCRIPTION, MAX_NAME
from phalanx.spec.environment import EnvironmentSpec
from phalanx.spec.interpolate import reference_problem
from phalanx.spec.parts import (
    InputSpec,
    Limits,
    MpiDistribution,
    OutputSpec,
    PyTorchDistribution,
    QueueSettings,
    Resources,
    Retry,
    SpecModel,
    TensorFlowDistribution,
)
from phalanx.spec.values import (
    ENV_VAR_RE,
    IDENTIFIER_RE,
    MAX_URL,
    base_dir_of,
    coerce_str_mapping,
    is_remote,
    limited,
    limited_tags,
    recorded,
    resolve_local,
    show,
    user_error,
)
from phalanx.workspace.names import NAME_RE

# Outputs every job has without declaring them: the checkpoint folder, which
# stays the same across attempts (also in $PHALANX_CHECKPOINT_DIR).
BUILTIN_OUTPUTS = ("checkpoints",)

#: Compute targets phalanx runs on today, and the spellings that mean them.
COMPUTE_TARGETS = {"local": "local", "azureml:local": "local"}
# A Ray address or a registered target's name (phalanx.compute.targets resolves it).
_COMPUTE_RE = re.compile(r"^(ray://[^/\s]+:\d+|[^:/\s]+:\d+|(azureml:)?[A-Za-z0-9][A-Za-z0-9_-]*)$")

# Azure ML job types that are not command jobs.
_OTHER_JOB_TYPES = frozenset({"pipeline", "parallel", "spark", "automl", "import", "data_transfer"})


def valid_job_name(value: str | None) -> str | None:
    """``name`` of a command or sweep job, as Azure ML allows it."""
    if value is not None and not NAME_RE.fullmatch(value):
        raise user_error(
            f"'{value}' is not a valid job name; start with a letter or digit, then use "
            "only letters, digits, '_' and '-' (at most 255 characters)"
        )
    return value


def valid_env_names(value: dict[str, str], field: str | None) -> dict[str, str]:
    """``environment_variables`` whose names a shell takes (``field``: where an error
    points, when the mapping is a top-level field)."""
    for key in value:
        if not ENV_VAR_RE.fullmatch(key):
            raise user_error(
                f"'{key}' is not a valid environment variable name; use letters, digits "
                "and '_', not starting with a digit",
                loc=None if field is None else (field, key),
            )
    return value


def local_code_folder(value: str | None, info: ValidationInfo) -> str | None:
    """``code``: a local folder, absolute once resolved against the spec file's folder."""
    if value is None:
        return None
    if not value.strip() or is_remote(value):
        raise user_error(f"must be a local folder; got {show(value)}")
    base = base_dir_of(info)
    if base is None:
        return value
    folder = resolve_local(value, base)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise user_error(
            f"code folder '{folder}' {what}; code: is relative to the spec file's folder"
        )
    return folder


def lower_type(value: Any) -> Any:
    """A mapping's ``type`` in lower case: Azure ML reads distribution types
    case-insensitively ("PyTorch")."""
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return {**value, "type": value["type"].lower()}
    return value


class LocatedSpec(SpecModel):
    """A spec read from a file: where it came from, its text, a line for every key."""

    _source: str | None = PrivateAttr(default=None)
    _lines: dict[tuple[str, ...], int] = PrivateAttr(default_factory=dict)
    _text: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        """The file (or ``<string>``) the spec was loaded from."""
        return self._source

    @property
    def text(self) -> str | None:
        """The YAML exactly as it was read (before ``--set``), when loaded from text."""
        return self._text

    def line_of(self, field: str) -> int | None:
        """1-based line of a dotted field (or its nearest parent) in the spec file."""
        path = tuple(field.split("."))
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None

    def error(self, field: str, message: str) -> SpecError:
        """A :class:`SpecError` about ``field`` that points at its line in the spec file."""
        return SpecError(message, field=field, source=self._source, line=self.line_of(field))


#: Tags of the two kinds of input; they appear in pydantic error locations.
INPUT_TAGS = ("input", "literal")

LiteralValue = bool | int | float | str
"""An input given as a plain value (``epochs: 10``)."""


def _input_kind(value: Any) -> str | None:
    if isinstance(value, (dict, InputSpec)):
        return "input"
    if isinstance(value, (bool, int, float, str)):
        return "literal"
    return None


InputValue = Annotated[
    Annotated[InputSpec, Tag("input")]
    | Annotated[StrictBool | StrictInt | StrictFloat | StrictStr, Tag("literal")],
    Discriminator(
        _input_kind,
        custom_error_type="input_value",
        custom_error_message=(
            "must be a literal (string, number, true/false) or a mapping with type: and path:"
        ),
    ),
]


def _environment_kind(value: Any) -> str | None:
    if isinstance(value, (dict, EnvironmentSpec)):
        return "inline"
    if isinstance(value, str):
        return "name"
    return None


EnvironmentValue = Annotated[
    Annotated[EnvironmentSpec, Tag("inline")] | Annotated[str, Tag("name")],
    Discriminator(
        _environment_kind,
        custom_error_type="environment_value",
        custom_error_message=(
            "must be a registered environment (azureml:name@latest) or a mapping with "
            "image:, conda_file: or pip_file:"
        ),
    ),
]

Distribution = Annotated[
    PyTorchDistribution | MpiDistribution | TensorFlowDistribution,
    Field(discriminator="type"),
]


class JobSpec(LocatedSpec):
    """An Azure ML v2 command job, as phalanx runs it.

    Build one with :func:`phalanx.spec.load_spec`; that resolves local paths and
    gives errors with line numbers. ``JobSpec.model_validate(job.to_record())``
    rebuilds a stored spec (paths are then already absolute and kept as they are).
    """

    schema_: str | None = Field(default=None, alias="$schema")
    """The ``$schema`` URL of an Azure ML job.yml; recorded."""
    type: Literal["command"] = "command"
    """Job type; phalanx runs command jobs only."""
    name: str | None = None
    """Job name; phalanx generates one when absent."""
    display_name: str | None = None
    """Human-readable name shown in listings."""
    experiment_name: str = "Default"
    """Group of related jobs."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Free key/value labels; numbers and booleans become strings. At most 100, keys of
    256 characters and values of 1024 (:mod:`phalanx.limits`)."""
    command: str
    """The program to run on every worker, with ``${{inputs.x}}`` references."""
    code: str | None = None
    """Local folder snapshotted and used as the working directory (absolute after loading)."""
    environment: EnvironmentValue | None = None
    """A registered Azure ML environment (``azureml:name@latest``; recorded), or an
    inline one (:class:`~phalanx.spec.environment.EnvironmentSpec`)."""
    environment_variables: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables of every worker."""
    inputs: dict[str, InputValue] = Field(default_factory=dict)
    """Literal values and data inputs, by name."""
    outputs: dict[str, OutputSpec] = Field(default_factory=dict)
    """Data outputs, by name."""
    compute: str = "local"
    """Where the job runs: ``local``, a Ray cluster (``ray://HOST:PORT``) or a registered
    target's name (``gpu-cluster``, ``azureml:gpu-cluster``)."""
    resources: Resources = Field(default_factory=Resources)
    """Number of instances (nodes)."""
    distribution: Distribution | None = None
    """How workers are started; absent means one PyTorch process per instance."""
    limits: Limits = Field(default_factory=Limits)
    """Timeout of the whole job."""
    retry: Retry = Field(default_factory=Retry)
    """phalanx's retry policy."""
    queue_settings: QueueSettings | None = None
    """Azure ML queue settings; recorded."""
    identity: dict[str, Any] | None = None
    """Azure ML identity block; recorded (at most 16 KiB as JSON)."""
    services: dict[str, Any] | None = None
    """Azure ML interactive services (jupyter, ssh…); recorded (at most 16 KiB as JSON)."""

    # -- field rules -------------------------------------------------------

    @field_validator("type", mode="before")
    @classmethod
    def _command_only(cls, value: Any) -> Any:
        if isinstance(value, str) and value in _OTHER_JOB_TYPES:
            raise user_error(
                f"job type '{value}' is not supported; phalanx runs command jobs (type: "
                "command) and sweep jobs (type: sweep)"
            )
        return value

    @field_validator("name")
    @classmethod
    def _azure_name(cls, value: str | None) -> str | None:
        return valid_job_name(value)

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise user_error("must not be empty; give the program to run, e.g. python train.py")
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

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env_as_str(cls, value: Any) -> Any:
        return coerce_str_mapping(value, "environment_variables")

    @field_validator("environment_variables")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return valid_env_names(value, "environment_variables")

    @field_validator("inputs", "outputs", mode="before")
    @classmethod
    def _names_and_nulls(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, dict):
            return value
        kind = str(info.field_name)
        for key in value:
            if not isinstance(key, str) or not IDENTIFIER_RE.fullmatch(key):
                reference = "${{" + kind + ".<name>}}"
                raise user_error(
                    f"{show(key)} is not a valid name; use letters, digits and '_', "
                    f"not starting with a digit, so {reference} can refer to it",
                    loc=(kind, str(key)),
                )
            if kind == "outputs" and key in BUILTIN_OUTPUTS:
                raise user_error(
                    f"'{key}' is built in (the job's checkpoint folder, kept across attempts); "
                    "use ${{outputs." + key + "}} without declaring it, or pick another name",
                    loc=(kind, key),
                )
        if info.field_name == "outputs":
            # `outputs: {model: }` asks for an output with every default.
            return {key: ({} if item is None else item) for key, item in value.items()}
        return value

    @field_validator("code")
    @classmethod
    def _code_folder(cls, value: str | None, info: ValidationInfo) -> str | None:
        return local_code_folder(value, info)

    @field_validator("compute", mode="before")
    @classmethod
    def _local_compute(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value in COMPUTE_TARGETS:
                return COMPUTE_TARGETS[value]
            if not _COMPUTE_RE.match(value):
                raise user_error(
                    f"compute target {quote(value)} is not local, a Ray address "
                    "(ray://HOST:PORT, HOST:PORT) or a target name (azureml:NAME)"
                )
        return value

    @field_validator("distribution", mode="before")
    @classmethod
    def _lower_type(cls, value: Any) -> Any:
        return lower_type(value)

    @model_validator(mode="after")
    def _references(self) -> JobSpec:
        problem = reference_problem(
            self.command, self.inputs.keys(), self.outputs.keys(), BUILTIN_OUTPUTS
        )
        if problem is not None:
            raise user_error(problem, loc=("command",))
        return self

    # -- what callers use --------------------------------------------------

    @property
    def instance_count(self) -> int:
        """Number of nodes."""
        return self.resources.instance_count

    @property
    def process_count_per_instance(self) -> int:
        """Worker processes per node (1 without a distribution; for TensorFlow, its
        workers and parameter servers shared evenly among the nodes)."""
        if isinstance(self.distribution, (PyTorchDistribution, MpiDistribution)):
            return self.distribution.process_count_per_instance
        if isinstance(self.distribution, TensorFlowDistribution):
            return max(1, self.tensorflow_tasks // self.instance_count)
        return 1

    @property
    def tensorflow_workers(self) -> int:
        """TensorFlow workers: ``worker_count``, else one per node (Azure ML's default)."""
        if isinstance(self.distribution, TensorFlowDistribution):
            return self.distribution.worker_count or self.instance_count
        return 0

    @property
    def tensorflow_tasks(self) -> int:
        """TensorFlow processes: workers plus parameter servers."""
        if isinstance(self.distribution, TensorFlowDistribution):
            return self.tensorflow_workers + self.distribution.parameter_server_count
        return 0

    @property
    def world_size(self) -> int:
        """Worker processes in all."""
        return self.instance_count * self.process_count_per_instance

    @property
    def distribution_type(self) -> str:
        """``pytorch``, ``mpi`` or ``tensorflow``; ``pytorch`` when absent."""
        return self.distribution.type if self.distribution is not None else "pytorch"

    @property
    def inline_environment(self) -> EnvironmentSpec | None:
        """``environment`` when given inline (not a registered name)."""
        return self.environment if isinstance(self.environment, EnvironmentSpec) else None

    @property
    def code_path(self) -> Path | None:
        """``code`` as a :class:`~pathlib.Path`."""
        return None if self.code is None else Path(self.code)

    def data_inputs(self) -> dict[str, InputSpec]:
        """The inputs that are data (given as a mapping), by name."""
        return {k: v for k, v in self.inputs.items() if isinstance(v, InputSpec)}

    def literal_inputs(self) -> dict[str, LiteralValue]:
        """The inputs that are plain values, by name."""
        return {k: v for k, v in self.inputs.items() if not isinstance(v, InputSpec)}

    def check_supported(self) -> None:
        """Refuse what the schema accepts but phalanx cannot run.

        Raises:
            SpecError: TensorFlow tasks that do not share evenly among the nodes.
        """
        tasks = self.tensorflow_tasks
        if tasks and tasks % self.instance_count:
            raise self.error(
                "distribution.worker_count",
                f"worker_count + parameter_server_count = {tasks} processes do not share "
                f"evenly among instance_count = {self.instance_count} nodes; make the sum a "
                "multiple of instance_count",
            )

    def to_record(self) -> dict[str, Any]:
        """A JSON-serialisable dict for the database (YAML key names, no ``None`` values)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
