"""``environment:`` of a job: a registered name, or an inline environment.

Azure ML's keys are accepted as written (``image``, ``conda_file``, ``name``,
``version``, ``description``, ``tags``, ``os_type``, ``build``); phalanx adds
``pip_file``, a pip requirements file. A ``conda_file`` or ``pip_file`` is
built once per content into a cached environment on each node and the job's
``python`` is that environment's. With ``image``, each node's launcher and ranks
run inside a container of that image (:mod:`phalanx.environments.containers`); a registered
``azureml:name@version`` is recorded.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from phalanx.limits import MAX_DESCRIPTION, MAX_NAME
from phalanx.spec.parts import SpecModel
from phalanx.spec.values import base_dir_of, is_remote, limited_tags, resolve_local, user_error


class EnvironmentSpec(SpecModel):
    """An inline environment."""

    image: str | None = None
    """A container image: each node's launcher and ranks run in a container of it."""
    conda_file: str | dict[str, Any] | None = None
    """A conda environment file (path, or the document inline); its pip packages are
    layered on phalanx's environment unless conda is installed on the node."""
    pip_file: str | None = None
    """phalanx's own: a pip requirements file, layered on phalanx's environment."""
    name: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    """Recorded."""
    version: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    """Recorded."""
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION)] | None = None
    """Recorded."""
    tags: dict[str, Any] | None = None
    """Recorded (within :mod:`phalanx.limits`' tag limits)."""
    os_type: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    """Recorded."""
    build: dict[str, Any] | None = None
    """A Docker build context: ``path`` (a folder, relative to the spec file) and
    ``dockerfile_path`` (relative to it; ``Dockerfile``), built into the job's image."""

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: Any) -> Any:
        return limited_tags(value, "tags")

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

    @field_validator("build")
    @classmethod
    def _build_context(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        unknown = sorted(set(value) - {"path", "dockerfile_path"})
        if unknown:
            raise user_error(f"unknown field '{unknown[0]}'; known fields: path, dockerfile_path")
        path = value.get("path")
        if not isinstance(path, str) or not path.strip():
            raise user_error("needs path: the folder of the Docker build context")
        if is_remote(path):
            raise user_error(f"must be a local folder; got '{path}'")
        dockerfile = value.get("dockerfile_path")
        if dockerfile is not None and not isinstance(dockerfile, str):
            raise user_error("dockerfile_path must be a path inside the context")
        base = base_dir_of(info)
        resolved = resolve_local(path, base) if base is not None else path
        if base is not None and not os.path.isdir(resolved):
            raise user_error(
                f"folder '{resolved}' not found; the path is relative to the spec file"
            )
        return {**value, "path": resolved}

    @model_validator(mode="after")
    def _one_package_list(self) -> EnvironmentSpec:
        if self.conda_file is not None and self.pip_file is not None:
            raise user_error("give conda_file or pip_file, not both", loc=("pip_file",))
        if self.build is not None and (self.image is not None or self.builds):
            raise user_error(
                "a build context makes the image: give build, or image (with a conda_file "
                "or pip_file), not both",
                loc=("build",),
            )
        return self

    @property
    def builds(self) -> bool:
        """Whether phalanx builds an environment for it (a conda or pip file)."""
        return self.conda_file is not None or self.pip_file is not None
