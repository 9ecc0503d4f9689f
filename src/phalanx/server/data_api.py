"""``/api/v1/data``: create, list and show data assets.

A client's local ``--path`` arrives as an upload (``PUT /api/v1/uploads``): it
is unpacked into the default datastore, under ``uploads/<id>``, and the asset
points there (``azureml://datastores/default/paths/uploads/<id>``). A path on
the server's own disk is refused: name it through a datastore instead.
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from phalanx.archives import UploadError
from phalanx.errors import PhalanxError
from phalanx.server.auth import User
from phalanx.server.settings import request_workspace, settings_of, workspace
from phalanx.server.uploads import receive
from phalanx.service.data import WorkspaceData
from phalanx.storage.datastores import DEFAULT_DATASTORE, default_datastore
from phalanx.storage.uri import is_uri

router = APIRouter(prefix="/api/v1/data", tags=["data"])
UPLOADED = "uploads"


class DataCreate(BaseModel):
    """A new data asset version: at ``path`` (a URI), or the files of ``upload``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    version: str | None = Field(None, max_length=256)
    path: str | None = Field(None, max_length=4096)
    upload: str | None = Field(None, max_length=64)
    type: Literal["uri_folder", "uri_file"] = "uri_folder"
    description: str | None = Field(None, max_length=4096)
    no_check: bool = False


@router.post("", status_code=201)
def create_data(body: DataCreate, request: Request, who: User) -> dict[str, Any]:
    """Register a new version of a data asset (versions are immutable)."""
    settings = settings_of(request)
    data = WorkspaceData(workspace(settings), who)
    who.require_member("data create")  # before an upload is unpacked
    if (body.path is None) == (body.upload is None):
        raise PhalanxError("give either path (a URI) or upload (from PUT /api/v1/uploads)")
    if body.path is not None:
        if not is_uri(body.path):
            raise PhalanxError(
                f"--path {body.path}: a local path is the client's; the CLI uploads it (give a "
                "datastore URI for data the server can read)"
            )
        return data.create(
            name=body.name, version=body.version, path=body.path, type=body.type,
            description=body.description, no_check=body.no_check,
        )  # fmt: skip
    assert body.upload is not None
    key = uuid.uuid4().hex
    dest = Path(default_datastore(settings.home).path) / UPLOADED / key
    receive(settings.uploads_of(who), body.upload, dest, settings.max_upload)
    try:
        uri = f"azureml://datastores/{DEFAULT_DATASTORE}/paths/{UPLOADED}/{key}"
        if body.type == "uri_file":
            entries = list(dest.iterdir())
            if len(entries) != 1 or not entries[0].is_file() or entries[0].is_symlink():
                raise UploadError("upload: --type uri_file wants exactly one file in the upload")
            # The name goes into a URI: anything but plain characters becomes '_'.
            plain = re.sub(r"[^A-Za-z0-9._-]", "_", entries[0].name).lstrip(".") or "file"
            entries[0].rename(dest / plain)
            uri += f"/{plain}"
        return data.create(
            name=body.name, version=body.version, path=uri, type=body.type,
            description=body.description, no_check=False,
        )  # fmt: skip
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


@router.get("")
def list_data(request: Request, who: User, name: str | None = None) -> dict[str, Any]:
    """Every data asset version (or those of ``name``), oldest first."""
    return {"assets": WorkspaceData(request_workspace(request), who).list_all(name)}


@router.get("/{name:path}")
def show_data(name: str, request: Request, who: User, version: str = "latest") -> dict[str, Any]:
    """One version of an asset (``latest``: the newest)."""
    return WorkspaceData(request_workspace(request), who).show(name, version)
