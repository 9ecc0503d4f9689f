"""``/api/v1/secrets``: a caller sets, lists and deletes its own secrets (values in,
never out), for ``${{secrets.NAME}}`` in its jobs' environment variables."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from phalanx.server.auth import User
from phalanx.server.settings import request_workspace
from phalanx.service.secrets import WorkspaceSecrets
from phalanx.storage.usersecrets import MAX_VALUE

router = APIRouter(prefix="/api/v1/secrets", tags=["secrets"])


class SecretValue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: SecretStr = Field(max_length=MAX_VALUE)


@router.put("/{name}")
def set_secret(name: str, body: SecretValue, request: Request, who: User) -> dict[str, Any]:
    """Keep the caller's secret ``name`` (replacing one of that name); the value is not
    sent back."""
    WorkspaceSecrets(request_workspace(request), who).set(name, body.value.get_secret_value())
    return {"name": name}


@router.get("")
def list_secrets(request: Request, who: User) -> dict[str, Any]:
    """The names of the caller's secrets."""
    return {"secrets": WorkspaceSecrets(request_workspace(request), who).list_names()}


@router.delete("/{name}")
def delete_secret(name: str, request: Request, who: User) -> dict[str, Any]:
    """Forget the caller's secret ``name``."""
    WorkspaceSecrets(request_workspace(request), who).delete(name)
    return {"deleted": name}
