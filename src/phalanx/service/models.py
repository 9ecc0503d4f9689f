"""The model registry of a workspace: register, list, show, download.

A client of a server uploads a local ``--path`` first; the server registers
the unpacked files with the client's path recorded as the source (see
:mod:`phalanx.server.models_api`). A download checks every file against the
sha256 the registry recorded, on whichever machine writes it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Protocol

from phalanx.registry import ModelVersion, download_model, get_model, list_models, register_model
from phalanx.service.access import LOCAL, Caller
from phalanx.service.reach import check_uri
from phalanx.workspace import Workspace


class Models(Protocol):
    """The model verbs, on this machine's workspace or a server's."""

    def create(
        self,
        *,
        name: str,
        path: str,
        version: str | None,
        description: str | None,
        tags: dict[str, str],
    ) -> dict[str, Any]: ...
    def list_all(self, name: str | None) -> list[dict[str, Any]]: ...
    def show(self, name: str, version: str) -> dict[str, Any]: ...
    def download(
        self, name: str, version: str, dest: Path, *, overwrite: bool
    ) -> tuple[dict[str, Any], int]: ...


def when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def model_json(model: ModelVersion) -> dict[str, Any]:
    """The version as ``model show --json`` prints it."""
    return {
        "name": model.name,
        "version": model.version,
        "uri": model.uri,
        "source": model.source,
        "job": model.job_name,
        "created_at": when(model.created_at),
        "description": model.description,
        "tags": model.tags,
        "size": model.size,
        "metrics": model.metrics,
        "files": [f.to_json() for f in model.files],
        "folder": str(model.folder),
        "owner": model.owner,
    }


class WorkspaceModels:
    """The model registry of a workspace on this machine, as ``caller`` may use it: all
    read and download; members register (new versions of names they registered first),
    from what the server shares (:mod:`phalanx.service.reach`) or their upload."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

    def create(
        self,
        *,
        name: str,
        path: str,
        version: str | None,
        description: str | None,
        tags: dict[str, str],
        recorded_as: str | None = None,
        uploaded: bool = False,
    ) -> dict[str, Any]:
        """Copy the files at ``path`` (a URI, job output or absolute path) as a new version.

        Args:
            uploaded: ``path`` is where the server unpacked the caller's upload.

        Raises:
            Forbidden: a viewer, another's name, or a path the caller may not name.
        """
        self.caller.require_member("model create")
        if not uploaded:
            check_uri(self.caller, path, "--path")
        model = register_model(
            self.ws,
            name=name,
            path=path,
            version=version,
            description=description,
            tags=tags,
            recorded_as=recorded_as,
            owner=self.caller.user,
            admin=self.caller.is_admin,
        )
        return model_json(model)

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        return [model_json(m) for m in list_models(self.ws, name)]

    def show(self, name: str, version: str) -> dict[str, Any]:
        return model_json(get_model(self.ws, name, version))

    def download(
        self, name: str, version: str, dest: Path, *, overwrite: bool
    ) -> tuple[dict[str, Any], int]:
        """Copy a version's files into ``dest``, verified; the version and bytes written."""
        model = get_model(self.ws, name, version)
        return model_json(model), download_model(model, dest, overwrite=overwrite)
