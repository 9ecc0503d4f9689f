"""``GET /api/v1/jobs/{name}/files/{path}``: a file or folder of a job's folder, as a tar
(or a file as it is, with ``raw``); ``GET /api/v1/jobs/{name}/tree``: the files under a
folder of it (the studio's file tree of outputs and checkpoints).

The path is checked (:mod:`phalanx.service.jobfiles`): plain and relative, no
symbolic link on the way, links inside left out. Nothing there is a 404.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from phalanx.server.auth import User
from phalanx.server.settings import settings_of, workspace
from phalanx.service.jobfiles import NoSuchPath, job_path, pack, tree

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.get("/{name}/tree")
def job_tree(name: str, request: Request, _: User, path: str = "outputs") -> dict[str, Any]:
    """The plain files under ``path`` of the job's folder, with their sizes."""
    try:
        return tree(workspace(settings_of(request)), name, path)
    except NoSuchPath as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/{name}/files/{path:path}")
def job_files(name: str, path: str, request: Request, _: User, raw: bool = False) -> FileResponse:
    """The file or folder at ``path`` in the job's folder (e.g. ``outputs/tensorboard``),
    packed as an uncompressed tar under its own name; with ``raw``, a file as it is."""
    settings = settings_of(request)
    try:
        found = job_path(workspace(settings), name, path)
    except NoSuchPath as exc:
        raise HTTPException(404, str(exc)) from None
    if raw and found.is_file():
        return FileResponse(found, media_type="application/octet-stream", filename=found.name)
    tmp = settings.home / "server" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    fd, archive = tempfile.mkstemp(prefix="files-", suffix=".tar", dir=tmp)
    os.close(fd)
    try:
        pack(found, tmp / os.path.basename(archive))
    except BaseException:
        os.unlink(archive)
        raise
    return FileResponse(
        archive,
        media_type="application/x-tar",
        background=BackgroundTask(os.unlink, archive),
    )
