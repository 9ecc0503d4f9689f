"""``/api/v1/models``: register, list and show model versions, and read their files.

A client's local ``--path`` arrives as an upload: it is unpacked into a staging
folder, registered (recorded with the client's path as its source) and the
staging folder removed. A path on the server's own disk is refused. A file is
served only when the version's record names it, and only from inside the
version's folder, with no symbolic link on the way.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from phalanx.archives import UploadError
from phalanx.errors import PhalanxError
from phalanx.registry import get_model
from phalanx.registry.files import check_no_links, inside, safe_relpath
from phalanx.server.auth import User
from phalanx.server.settings import ServerSettings, settings_of, workspace
from phalanx.server.uploads import receive
from phalanx.service.access import Caller
from phalanx.service.models import WorkspaceModels
from phalanx.storage.uri import is_uri

router = APIRouter(prefix="/api/v1/models", tags=["models"])


class ModelCreate(BaseModel):
    """A new model version: from ``path`` (a URI or job output), or the files of ``upload``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    version: str | None = Field(None, max_length=256)
    path: str | None = Field(None, max_length=4096)
    upload: str | None = Field(None, max_length=64)
    kind: Literal["file", "folder"] = "folder"
    """What the upload holds: one file, or a folder's contents."""
    source: str | None = Field(None, max_length=4096)
    """The client's own path, recorded as where the files came from."""
    description: str | None = Field(None, max_length=4096)
    tags: dict[str, str] = Field(default_factory=dict, max_length=1000)


def _models(request: Request, who: Caller) -> tuple[WorkspaceModels, ServerSettings]:
    settings = settings_of(request)
    return WorkspaceModels(workspace(settings), who), settings


@router.post("", status_code=201)
def create_model(body: ModelCreate, request: Request, who: User) -> dict[str, Any]:
    """Copy a model's files into the registry as a new, immutable version."""
    models, settings = _models(request, who)
    who.require_member("model create")  # before an upload is unpacked
    if (body.path is None) == (body.upload is None):
        raise PhalanxError("give either path (a URI or job output) or upload")
    if body.path is not None:
        if not is_uri(body.path):
            raise PhalanxError(
                f"--path {body.path}: a local path is the client's; the CLI uploads it (give a "
                "job output or a datastore URI for files the server can read)"
            )
        return models.create(
            name=body.name, path=body.path, version=body.version,
            description=body.description, tags=body.tags,
        )  # fmt: skip
    assert body.upload is not None
    staging = settings.home / "server" / "staging" / uuid.uuid4().hex
    receive(settings.uploads_of(who), body.upload, staging, settings.max_upload)
    try:
        path = staging
        if body.kind == "file":
            entries = list(staging.iterdir())
            if len(entries) != 1:
                raise UploadError("upload: kind 'file' wants exactly one file in the upload")
            path = entries[0]
        return models.create(
            name=body.name, path=str(path), version=body.version,
            description=body.description, tags=body.tags, recorded_as=body.source or "upload",
            uploaded=True,
        )  # fmt: skip
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@router.get("")
def list_all(request: Request, who: User, name: str | None = None) -> dict[str, Any]:
    """Registered model versions (or those of ``name``), by name then oldest first."""
    return {"models": _models(request, who)[0].list_all(name)}


@router.get("/{name:path}/file")
def model_file(
    name: str,
    request: Request,
    who: User,
    path: Annotated[str, Query(max_length=4096)],
    version: str = "latest",
) -> FileResponse:
    """One file of a version, as the registry keeps it (the client checks its sha256)."""
    models, _settings = _models(request, who)
    model = get_model(models.ws, name, version)
    if not any(f.path == path for f in model.files):
        raise PhalanxError(f"model {model.name}:{model.version} has no file {path!r}")
    safe_relpath(path, "file")
    check_no_links(model.folder, path)
    target = model.folder / path
    if not inside(model.folder, target) or not target.is_file():
        raise PhalanxError(f"model {model.name}:{model.version}: {path!r} is not a plain file")
    return FileResponse(target, media_type="application/octet-stream")


@router.get("/{name:path}")
def show(name: str, request: Request, who: User, version: str = "latest") -> dict[str, Any]:
    """One version (``latest``: the newest registered)."""
    return _models(request, who)[0].show(name, version)
