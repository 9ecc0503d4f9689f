"""``/api/v1/compute`` (create, list, show, delete targets) and ``/api/v1/queue``.

A Ray token is shown as where it comes from, never its value; a token piped in
for ``--store-token`` arrives in the create request only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from phalanx.server.auth import User
from phalanx.server.settings import request_workspace
from phalanx.service.access import Caller
from phalanx.service.targets import TargetCreate, WorkspaceTargets

router = APIRouter(prefix="/api/v1", tags=["compute"])


def _targets(request: Request, who: Caller) -> WorkspaceTargets:
    return WorkspaceTargets(request_workspace(request), who)


@router.post("/compute", status_code=201)
def create_target(body: TargetCreate, request: Request, who: User) -> dict[str, Any]:
    """Register a compute target (a Ray cluster's address is tried first unless ``no_check``)."""
    return _targets(request, who).create(body)


@router.get("/compute")
def list_targets(request: Request, who: User) -> dict[str, Any]:
    """Every target, ``local`` always among them."""
    return {"targets": _targets(request, who).list_all()}


@router.get("/compute/{name:path}")
def show_target(name: str, request: Request, who: User) -> dict[str, Any]:
    """A target's settings, capacity, what runs on it where, and its queue."""
    return _targets(request, who).show(name)


@router.delete("/compute/{name:path}")
def delete_target(name: str, request: Request, who: User) -> dict[str, Any]:
    """Forget a target and its stored token (the cluster is untouched)."""
    _targets(request, who).delete(name)
    return {"deleted": name}


@router.get("/queue")
def queue(request: Request, who: User, compute: str | None = None) -> dict[str, Any]:
    """Every target's (or one's) capacity, what runs where, and what waits and why."""
    return {"targets": _targets(request, who).queue(compute)}
