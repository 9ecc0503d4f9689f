"""phalanx's errors as HTTP answers: ``{"error": <the CLI's one line>}`` and a 4xx.

A client prints the same line the CLI would have printed on the server's
machine, but for the server's folders, which a message names to an admin only
(:meth:`phalanx.service.masks.ServerPlaces.hide`: a datastore's folder as its URI,
the workspace as ``(the server's workspace)``). A database that cannot be reached
now is a 503 with one line, :data:`DATABASE_UNAVAILABLE` (and ``Retry-After``):
the request may be repeated. Anything else is a bug: a 500 with no detail (the
server logs it).
"""

from __future__ import annotations

import logging
import time
import traceback

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from phalanx.archives import UploadError
from phalanx.errors import (
    DatabaseUnavailable,
    Forbidden,
    JobNotFoundError,
    PhalanxError,
    QueueFull,
    SpecError,
    UnsetVariableError,
)
from phalanx.limits import bounded
from phalanx.storage.redact import redact

log = logging.getLogger("phalanx.server")

DATABASE_UNAVAILABLE = "database unavailable, retrying"
"""The 503's line: the workspace database cannot be reached now."""
RETRY_AFTER_S = 2
_LOG_OUTAGE_EVERY_S = 30.0
_outage_logged = [-_LOG_OUTAGE_EVERY_S]


def error_body(message: str, **extra: object) -> dict[str, object]:
    """The JSON of a 4xx or 5xx: its line, with any long name it quotes cut short."""
    return {"error": bounded(message), **extra}


async def _shown(request: Request, message: str) -> str:
    """``message`` as the request's caller may read it: a caller who may not read the
    server's paths (or one not known yet, on a server with tokens) reads none."""
    from phalanx.server.settings import settings_of, workspace
    from phalanx.service.masks import ServerPlaces, sees_server_paths

    caller = getattr(request.state, "caller", None)
    settings = settings_of(request)
    if "/" not in message or not settings.auth:
        return message
    if caller is not None and sees_server_paths(caller):
        return message

    def hide() -> str:
        ws = workspace(settings)
        return ServerPlaces.of(ws, settings.limits.datastore_roots).hide(message)

    return await run_in_threadpool(hide)


MLFLOW_PREFIX = "/api/2.0/"
_MLFLOW_CODES = {
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "ENDPOINT_NOT_FOUND",
    413: "INVALID_PARAMETER_VALUE",
    429: "REQUEST_LIMIT_EXCEEDED",
    503: "TEMPORARILY_UNAVAILABLE",
}


def install(app: FastAPI) -> None:
    @app.exception_handler(SpecError)
    async def _spec(request: Request, exc: SpecError) -> JSONResponse:
        problems = [bounded(await _shown(request, p.one_line())) for p in exc.problems]
        message = await _shown(request, exc.one_line())
        return JSONResponse(error_body(message, problems=problems), status_code=422)

    @app.exception_handler(JobNotFoundError)
    async def _missing(_: Request, exc: JobNotFoundError) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=404)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse(error_body(await _shown(request, str(exc))), status_code=403)

    @app.exception_handler(QueueFull)
    async def _queue_full(_: Request, exc: QueueFull) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=429)

    @app.exception_handler(UploadError)
    async def _upload(request: Request, exc: UploadError) -> JSONResponse:
        message = await _shown(request, str(exc))
        return JSONResponse(error_body(message), status_code=413 if exc.too_large else 400)

    @app.exception_handler(UnsetVariableError)
    async def _unset(request: Request, exc: UnsetVariableError) -> JSONResponse:
        return JSONResponse(error_body(await _shown(request, exc.on_server())), status_code=400)

    @app.exception_handler(DatabaseUnavailable)
    async def _database(_: Request, exc: DatabaseUnavailable) -> JSONResponse:
        return database_unavailable(exc)

    @app.exception_handler(PhalanxError)
    async def _user(request: Request, exc: PhalanxError) -> JSONResponse:
        return JSONResponse(error_body(await _shown(request, str(exc))), status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
        message = await _shown(request, f"{where}: {first.get('msg', 'invalid')}")
        return JSONResponse(error_body(f"bad request: {message}"), status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = await _shown(request, str(exc.detail))
        if request.url.path.startswith(MLFLOW_PREFIX):
            # MLflow's clients read their own shape: an error code and a message.
            code = _MLFLOW_CODES.get(exc.status_code, "BAD_REQUEST")
            return JSONResponse({"error_code": code, "message": bounded(detail)},
                                status_code=exc.status_code, headers=exc.headers)  # fmt: skip
        return JSONResponse(error_body(detail), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        from phalanx.workspace.database import unavailable

        if unavailable(exc):  # a driver's error that reached past the workspace's calls
            return database_unavailable(exc)
        # A cloud SDK's message may quote a credential: masked before it is logged.
        trace = redact("".join(traceback.format_exception(exc)))
        log.error("%s %s failed\n%s", request.method, request.url.path, trace)
        return JSONResponse(
            error_body("internal server error; the server's log has the details"),
            status_code=500,
        )


def database_unavailable(exc: Exception) -> JSONResponse:
    """The 503 for a database that cannot be reached now (logged at most every 30 s)."""
    now = time.monotonic()
    if now - _outage_logged[0] >= _LOG_OUTAGE_EVERY_S:
        _outage_logged[0] = now
        log.warning("answering 503: %s", redact(str(exc)))
    return JSONResponse(
        error_body(DATABASE_UNAVAILABLE),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
