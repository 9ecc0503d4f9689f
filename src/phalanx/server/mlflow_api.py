"""``/api/2.0/mlflow/…`` and ``/api/2.0/mlflow-artifacts/artifacts/…``: the workspace as
an MLflow tracking server, for the official MLflow client.

Only HTTP lives here: the caller (the same bearer tokens as ``/api/v1``; MLflow
sends ``MLFLOW_TRACKING_TOKEN`` as one), the route table of
:mod:`phalanx.tracking.protocol`, and MLflow's error shape. What a caller may
read or change is :class:`phalanx.service.tracking.WorkspaceRuns`'s.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse

from phalanx.errors import PhalanxError
from phalanx.server.auth import User
from phalanx.server.jobfiles_api import file_chunks
from phalanx.server.settings import request_workspace, settings_of
from phalanx.service.jobfiles import NoSuchPath, job_file, opened
from phalanx.service.tracking import WorkspaceRuns, as_tracking_error
from phalanx.tracking.artifacts import OUTPUTS, split, target
from phalanx.tracking.protocol import TrackingError, dispatch, invalid

router = APIRouter(tags=["mlflow"], include_in_schema=False)


def _error(exc: TrackingError) -> JSONResponse:
    return JSONResponse(exc.wire(), status_code=exc.status)


@router.api_route("/api/2.0/mlflow/{route:path}", methods=["GET", "POST"])
async def tracking(route: str, request: Request, who: User) -> Response:
    """One call of MLflow's tracking API."""
    body: dict[str, Any] = {}
    if request.method == "POST":
        raw = await request.body()
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):  # RecursionError: nested too deeply to read
            return _error(TrackingError("MALFORMED_REQUEST", "the body is not JSON"))
        if not isinstance(body, dict):
            return _error(TrackingError("MALFORMED_REQUEST", "the body is not a JSON object"))
    runs = WorkspaceRuns(request_workspace(request), who)
    query = dict(request.query_params)
    try:
        answer = await run_in_threadpool(dispatch, request.method, route, query, body, runs)
    except TrackingError as exc:
        return _error(exc)
    except PhalanxError as exc:
        return _error(as_tracking_error(exc))
    return JSONResponse(answer)


@router.get("/api/2.0/mlflow-artifacts/artifacts")
def list_artifacts(request: Request, who: User, path: str = "") -> Response:
    """One folder of a run's artifacts (its job's outputs), as MLflow lists them."""
    try:
        name, rel = _where(path)
        listing = _listing(request, name, rel)
    except TrackingError as exc:
        return _error(exc)
    return JSONResponse(listing)


@router.get("/api/2.0/mlflow-artifacts/artifacts/{path:path}")
def get_artifact(path: str, request: Request, who: User) -> Response:
    """One artifact's bytes."""
    try:
        name, rel = _where(path)
        fd, size = job_file(request_workspace(request), name, f"{OUTPUTS}/{rel}")
    except TrackingError as exc:
        return _error(exc)
    except NoSuchPath:
        return _error(TrackingError("RESOURCE_DOES_NOT_EXIST", f"artifact {path!r} not found",
                                    404))  # fmt: skip
    except PhalanxError as exc:
        return _error(as_tracking_error(exc))
    return StreamingResponse(
        file_chunks(fd, size),
        media_type="application/octet-stream",
        headers={"content-length": str(size)},
    )


@router.put("/api/2.0/mlflow-artifacts/artifacts/{path:path}")
async def put_artifact(path: str, request: Request, who: User) -> Response:
    """Store an artifact of a run made from outside a job (a job's run stores its own from
    inside), within the server's ``--max-upload``."""
    settings = settings_of(request)
    runs = WorkspaceRuns(request_workspace(request), who)
    try:
        name, _ = _where(path)
        job_dir = await run_in_threadpool(runs.artifact_folder, name)
        dest = target(job_dir, name, path)
    except TrackingError as exc:
        return _error(exc)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.uploading")
    size = 0
    try:
        with open(tmp, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_upload:
                    return _error(TrackingError(
                        "INVALID_PARAMETER_VALUE",
                        f"artifact refused: more than {settings.max_upload // 2**20} MiB "
                        "(the server's --max-upload)", 413))  # fmt: skip
                f.write(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return JSONResponse({})


def _where(path: str) -> tuple[str, str]:
    """The job and the path in its outputs that ``jobs/<name>/<rest>`` names."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) < 2 or parts[0] != "jobs":
        raise invalid(f"artifact path {path!r}: runs' artifacts are under jobs/<run id>/")
    return parts[1], split(parts[1], path)


def _listing(request: Request, name: str, rel: str) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    try:
        with opened(request_workspace(request), name, f"{OUTPUTS}/{rel}".rstrip("/")) as found:
            if found.is_file:
                leaf = rel.rsplit("/", 1)[-1]
                return {"files": [{"path": leaf, "is_dir": False, "file_size": found.size}]}
            for entry in sorted(os.listdir(found.fd)):
                info = os.stat(entry, dir_fd=found.fd, follow_symlinks=False)
                if entry.startswith("."):
                    continue
                if stat.S_ISDIR(info.st_mode):
                    files.append({"path": entry, "is_dir": True})
                elif stat.S_ISREG(info.st_mode):
                    files.append({"path": entry, "is_dir": False, "file_size": info.st_size})
    except NoSuchPath:
        return {"files": []}
    except PhalanxError as exc:
        raise as_tracking_error(exc) from None
    return {"files": files}
