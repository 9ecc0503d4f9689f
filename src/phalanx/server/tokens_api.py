"""``/api/v1/tokens``: an admin makes, lists and revokes the server's API tokens.

A new token is in the create answer only; the server keeps its hash.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from phalanx.server.auth import User
from phalanx.server.settings import request_workspace
from phalanx.service.tokens import WorkspaceTokens

router = APIRouter(prefix="/api/v1/tokens", tags=["server"])


class TokenCreate(BaseModel):
    user: str = Field(max_length=256)
    name: str | None = Field(None, max_length=256)
    role: str | None = Field(None, max_length=16)


@router.post("", status_code=201)
def create_token(body: TokenCreate, request: Request, who: User) -> dict[str, Any]:
    """A new token for ``user``; ``token`` is shown in this answer only."""
    info, token = WorkspaceTokens(request_workspace(request), who).create(
        body.user, body.name, body.role
    )
    return {**info, "token": token}


@router.get("")
def list_tokens(request: Request, who: User) -> dict[str, Any]:
    """Every token's name, user, role and times; never a token."""
    return {"tokens": WorkspaceTokens(request_workspace(request), who).list_all()}


@router.delete("/{name}")
def revoke_token(name: str, request: Request, who: User) -> dict[str, Any]:
    """Forget a token: requests carrying it are refused from now on."""
    WorkspaceTokens(request_workspace(request), who).revoke(name)
    return {"revoked": name}
