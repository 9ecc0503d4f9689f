"""The FastAPI application: ``/api/v1``, its OpenAPI document, and the studio under ``/``."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from phalanx import __version__
from phalanx.errors import DatabaseUnavailable
from phalanx.server import (
    bench_api,
    compute_api,
    data_api,
    datastores_api,
    environments_api,
    errors,
    jobfiles_api,
    joblogs_api,
    jobs_api,
    mlflow_api,
    models_api,
    peers,
    secrets_api,
    sessions,
    tokens_api,
)
from phalanx.server.auth import caller
from phalanx.server.bounds import BoundsMiddleware
from phalanx.server.settings import ServerSettings, workspace

API_VERSION = "v1"
# An upload not used by a job within this long is removed.
UPLOAD_TTL_S = 3600.0
# Uploads of one caller that may wait to be used at once (each up to --max-upload).
MAX_PENDING_UPLOADS = 8


def create_app(settings: ServerSettings) -> FastAPI:
    app = FastAPI(
        title="phalanx",
        version=__version__,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.add_middleware(BoundsMiddleware, max_body=settings.max_body)
    errors.install(app)
    peers.install(app, settings.home, settings.auth)  # no token: no walled-off job answered
    app.include_router(joblogs_api.router)
    app.include_router(jobs_api.router)
    for verbs in (bench_api, jobfiles_api, datastores_api, data_api, environments_api,
                  models_api, compute_api, tokens_api, secrets_api, sessions,
                  mlflow_api):  # fmt: skip
        app.include_router(verbs.router)

    @app.get("/api/v1/health", tags=["server"], response_model=None)
    def health() -> dict[str, Any] | JSONResponse:
        """Whether the server answers and reaches its database; needs no token.

        503 with ``{"status": "database unavailable", "error": …}`` while the
        workspace database cannot be reached.
        """
        answer: dict[str, Any] = {"status": "ok", "version": __version__, "api": API_VERSION}
        try:
            workspace(settings).ping()
        except DatabaseUnavailable:
            answer.update(status="database unavailable", error=errors.DATABASE_UNAVAILABLE)
            return JSONResponse(
                answer, status_code=503, headers={"Retry-After": str(errors.RETRY_AFTER_S)}
            )
        return answer

    @app.get("/api/v1/whoami", tags=["server"])
    def whoami(request: Request) -> dict[str, Any]:
        """The user the token belongs to (``null`` on a server without auth) and its role."""
        who = caller(request)
        return {"user": who.user, "role": who.role.value, "auth": settings.auth}

    @app.put("/api/v1/uploads", status_code=201, tags=["jobs"])
    async def upload(request: Request) -> dict[str, Any]:
        """Receive a tar archive (the body); its id goes into ``POST /api/v1/jobs``."""
        who = caller(request)
        who.require_member("upload")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > settings.max_upload:
            raise HTTPException(413, _too_large(settings))
        folder = settings.uploads_of(who)
        folder.mkdir(parents=True, exist_ok=True)
        if _expire(folder) >= MAX_PENDING_UPLOADS:
            raise HTTPException(
                429,
                f"upload refused: {MAX_PENDING_UPLOADS} uploads of yours wait to be used; "
                "create the jobs or assets they are for (unused ones go after an hour)",
            )
        upload_id = uuid.uuid4().hex
        path = folder / upload_id
        size = 0
        try:
            with open(path, "wb") as f:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > settings.max_upload:
                        raise HTTPException(413, _too_large(settings))
                    f.write(chunk)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return {"upload": upload_id, "bytes": size}

    from phalanx.server.studio_pages import install as install_studio

    install_studio(app)  # last: its "/" routes come after the API's
    return app


def _too_large(settings: ServerSettings) -> str:
    return (
        f"upload refused: more than {settings.max_upload // 2**20} MiB (the server's "
        "--max-upload); list large files in .amlignore or put data in a datastore"
    )


def _expire(folder: Path) -> int:
    """Remove the uploads in ``folder`` older than :data:`UPLOAD_TTL_S`; how many remain."""
    now, left = time.time(), 0
    for entry in os.scandir(folder):
        try:
            if now - entry.stat().st_mtime > UPLOAD_TTL_S:
                os.unlink(entry.path)
            else:
                left += 1
        except OSError:
            pass
    return left
