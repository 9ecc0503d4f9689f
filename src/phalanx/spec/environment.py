"""``environment:`` of a job: a registered name, or an inline environment.

Azure ML's keys are accepted as written (``image``, ``conda_file``, ``name``,
``version``, ``description``, ``tags``, ``os_type``, ``build``); phalanx adds
``pip_file``, a pip requirements file. A ``conda_file`` or ``pip_file`` is
built once per content into a cached environment on each node and the job's
``python`` is that environment's; ``image`` (and a registered
``azureml:name@version``) are recorded for container targets.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationInfo, field_validator, model_validator

from phalanx.spec.parts import SpecModel
from phalanx.spec.values import base_dir_of, is_remote, resolve_local, user_error


class EnvironmentSpec(SpecModel):
    """An inline environment."""

    image: str | None = None
    """A container image; recorded for container targets (none runs here)."""
    conda_file: str | dict[str, Any] | None = None
    """A conda environment file (path, or the document inline); its pip packages are
    layered on phalanx's environment unless conda is installed on the node."""
    pip_file: str | None = None
    """phalanx's own: a pip requirements file, layered on phalanx's environment."""
    name: str | None = None
    """Recorded."""
    version: str | None = None
    """Recorded."""
    description: str | None = None
    """Recorded."""
    tags: dict[str, Any] | None = None
    """Recorded."""
    os_type: str | None = None
    """Recorded."""
    build: dict[str, Any] | None = None
    """A Docker build context; recorded for container targets."""

    @field_validator("conda_file", "pip_file")
    @classmethod
    def _local_file(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or isinstance(value, dict):
            return value
        if not value.strip() or is_remote(value):
            raise user_error(f"must be a local file; got '{value}'")
        base = base_dir_of(info)
        if base is None:
            return value
        path = resolve_local(value, base)
        if not os.path.isfile(path):
            raise user_error(f"file '{path}' not found; the path is relative to the spec file")
        return path

    @model_validator(mode="after")
    def _one_package_list(self) -> EnvironmentSpec:
        if self.conda_file is not None and self.pip_file is not None:
            raise user_error("give conda_file or pip_file, not both", loc=("pip_file",))
        return self

    @property
    def builds(self) -> bool:
        """Whether phalanx builds an environment for it (a conda or pip file)."""
        return self.conda_file is not None or self.pip_file is not None
