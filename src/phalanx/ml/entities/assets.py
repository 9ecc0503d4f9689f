"""Data assets, models and environments, as Azure ML's SDK names them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from phalanx.ml.errors import checked_keywords


@checked_keywords
@dataclass(kw_only=True)
class Data:
    """A data asset: a named, versioned path (``ml_client.data.create_or_update(Data(...))``).

    ``path`` is a local path (relative to the current folder; uploaded when
    the client talks to a server), a datastore URI or ``az://``/``s3://``.
    """

    name: str | None = None
    version: str | None = None
    path: str | os.PathLike[str] | None = None
    type: str = "uri_folder"
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    id: str | None = None
    """``azureml:<name>:<version>`` once registered: what a job's ``Input(path=...)`` takes."""
    creation_context: dict[str, Any] = field(default_factory=dict)


@checked_keywords
@dataclass(kw_only=True)
class Model:
    """A registered model (``ml_client.models.create_or_update(Model(...))``).

    ``path`` is a local file or folder, a datastore URI, or a job's output
    (``azureml://jobs/<job>/outputs/<output>``).
    """

    name: str | None = None
    version: str | None = None
    path: str | os.PathLike[str] | None = None
    type: str = "custom_model"
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    id: str | None = None
    """``azureml:<name>:<version>`` once registered."""
    job_name: str | None = None
    """The job whose output it was, if any."""
    files: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """Each file's relative path, size and sha256 (left out of the repr)."""
    creation_context: dict[str, Any] = field(default_factory=dict)


@checked_keywords
@dataclass(kw_only=True)
class BuildContext:
    """A Docker build context (``path`` with a ``Dockerfile``)."""

    path: str | os.PathLike[str] | None = None
    dockerfile_path: str | None = None


@checked_keywords
@dataclass(kw_only=True)
class Environment:
    """A job's environment: inline (``command(environment=Environment(...))``), or
    registered with ``ml_client.environments.create_or_update`` and named by a job
    as ``"azureml:NAME:VERSION"`` / ``"azureml:NAME@latest"``.

    ``image``, ``conda_file`` and ``pip_file`` (phalanx's own) and ``build`` are
    what phalanx runs in or builds from, as for ``environment:`` in a ``job.yml``.
    """

    name: str | None = None
    version: str | None = None
    image: str | None = None
    conda_file: str | os.PathLike[str] | dict[str, Any] | None = None
    pip_file: str | os.PathLike[str] | None = None
    build: BuildContext | None = None
    description: str | None = None
    tags: dict[str, str] | None = None
    os_type: str | None = None

    def _to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key in ("name", "version", "image", "description", "tags", "os_type"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        for key in ("conda_file", "pip_file"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value if isinstance(value, dict) else os.fspath(value)
        if self.build is not None:
            build: dict[str, Any] = {}
            if self.build.path is not None:
                build["path"] = os.fspath(self.build.path)
            if self.build.dockerfile_path is not None:
                build["dockerfile_path"] = self.build.dockerfile_path
            data["build"] = build
        return data
