"""``/api/v1/environments``: register, list and show environments; prune built images.

A client sends the environment's YAML and the files it names (conda/pip file, build
context) as an upload (``PUT /api/v1/uploads``), the YAML as ``environment.yml`` with
its paths relative to the upload; the server registers it from there (the files are
copied into the workspace) and drops the upload.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from phalanx.archives import UploadError
from phalanx.server.auth import User
from phalanx.server.settings import request_workspace, settings_of, workspace
from phalanx.server.uploads import receive
from phalanx.service.environments import DOCUMENT, WorkspaceEnvironments

router = APIRouter(prefix="/api/v1/environments", tags=["environments"])


class EnvironmentCreate(BaseModel):
    """A new environment version, from an upload holding ``environment.yml``."""

    model_config = ConfigDict(extra="forbid")

    upload: str = Field(max_length=64)
    name: str | None = Field(None, max_length=256)
    version: str | None = Field(None, max_length=256)


@router.post("", status_code=201)
def create_environment(body: EnvironmentCreate, request: Request, who: User) -> dict[str, Any]:
    """Register a new version of an environment (versions are immutable)."""
    settings = settings_of(request)
    who.require_member("environment create")  # before the upload is unpacked
    dest = settings.home / "server" / "environment-uploads" / uuid.uuid4().hex
    receive(settings.uploads_of(who), body.upload, dest, settings.max_upload)
    try:
        document = dest / DOCUMENT
        if not document.is_file() or document.is_symlink():
            raise UploadError(f"upload: no {DOCUMENT} in it")
        environments = WorkspaceEnvironments(workspace(settings), who)
        return environments.create(document, name=body.name, version=body.version)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


class Prune(BaseModel):
    """Which built images to remove."""

    model_config = ConfigDict(extra="forbid")

    unused_for_s: float | None = Field(None, ge=0)
    """Those no job used for this long; all when none."""
    dry_run: bool = False


@router.post("/prune")
def prune_images(body: Prune, request: Request, who: User) -> dict[str, Any]:
    """Remove the images the workspace's jobs built, unused for ``unused_for_s``."""
    environments = WorkspaceEnvironments(request_workspace(request), who)
    return environments.prune(body.unused_for_s, dry_run=body.dry_run)


@router.get("")
def list_environments(request: Request, who: User, name: str | None = None) -> dict[str, Any]:
    """Every environment version (or those of ``name``), oldest first."""
    return {"environments": WorkspaceEnvironments(request_workspace(request), who).list_all(name)}


@router.get("/{name:path}")
def show_environment(
    name: str, request: Request, who: User, version: str = "latest"
) -> dict[str, Any]:
    """One version of an environment (``latest``: the newest)."""
    return WorkspaceEnvironments(request_workspace(request), who).show(name, version)
