"""``/api/v1/bench``: the benchmark runs the workspace keeps, for the studio's ``/bench``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException

from phalanx.server.auth import User
from phalanx.server.settings import request_workspace
from phalanx.service.bench import NoSuchRun, list_runs, show_run

router = APIRouter(prefix="/api/v1", tags=["bench"])


@router.get("/bench")
def bench_runs(request: Request, _: User) -> dict[str, Any]:
    """Every ``phalanx bench`` run kept in the workspace, newest first."""
    return {"runs": list_runs(request_workspace(request))}


@router.get("/bench/{run}")
def bench_run(run: str, request: Request, _: User) -> dict[str, Any]:
    """One run: machine, command, set-up, each grid point's figures, the anchors."""
    try:
        return show_run(request_workspace(request), run)
    except NoSuchRun as exc:
        raise HTTPException(404, str(exc)) from None
