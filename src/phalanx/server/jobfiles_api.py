"""``GET /api/v1/jobs/{name}/files/{path}``: a file or folder of a job's folder, as a tar
(or a file as it is, with ``raw``); ``GET /api/v1/jobs/{name}/tree``: the files under a
folder of it (the studio's file tree of outputs and checkpoints).

The path is checked (:mod:`phalanx.service.jobfiles`): plain and relative, no
symbolic link on the way, links inside left out. Nothing there is a 404.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from phalanx.server.auth import User
from phalanx.server.settings import settings_of, workspace
from phalanx.service.jobfiles import NoSuchPath, job_file, pack, tree

CHUNK = 1 << 20

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


@router.get("/{name}/tree")
def job_tree(name: str, request: Request, who: User, path: str = "outputs") -> dict[str, Any]:
    """The plain files under ``path`` of the job's folder, with their sizes."""
    try:
        return tree(workspace(settings_of(request)), name, path, caller=who)
    except NoSuchPath as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/{name}/files/{path:path}", response_model=None)
def job_files(
    name: str, path: str, request: Request, who: User, raw: bool = False
) -> FileResponse | StreamingResponse:
    """The file or folder at ``path`` in the job's folder (e.g. ``outputs/tensorboard``),
    packed as an uncompressed tar under its own name; with ``raw``, a file as it is."""
    settings = settings_of(request)
    ws = workspace(settings)
    if raw:
        try:
            fd, size = job_file(ws, name, path, who)
        except NoSuchPath:
            pass  # a folder, or nothing: the tar below says which
        else:
            filename = os.path.basename(path)
            return StreamingResponse(
                file_chunks(fd, size),
                media_type="application/octet-stream",
                headers={
                    "content-length": str(size),
                    "content-disposition": f'attachment; filename="{filename}"',
                },
            )
    tmp = settings.home / "server" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    fd, archive = tempfile.mkstemp(prefix="files-", suffix=".tar", dir=tmp)
    os.close(fd)
    try:
        pack(ws, name, path, Path(archive), who)
    except NoSuchPath as exc:
        os.unlink(archive)
        raise HTTPException(404, str(exc)) from None
    except BaseException:
        os.unlink(archive)
        raise
    return FileResponse(
        archive,
        media_type="application/x-tar",
        background=BackgroundTask(os.unlink, archive),
    )


def file_chunks(fd: int, size: int) -> Iterator[bytes]:
    """The file's first ``size`` bytes (its size when opened), then it is closed."""
    with os.fdopen(fd, "rb") as f:
        left = size
        while left > 0 and (data := f.read(min(CHUNK, left))):
            left -= len(data)
            yield data
