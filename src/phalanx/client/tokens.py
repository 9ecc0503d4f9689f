"""The token verbs against a server (an admin's token): ``phalanx server token …``
with ``PHALANX_SERVER`` set."""

from __future__ import annotations

from typing import Any

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.urls import segment


class RemoteTokens:
    """The API tokens of a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(self, user: str, name: str | None, role: str | None) -> tuple[dict[str, Any], str]:
        body = {"user": user, "name": name, "role": role}
        answer: dict[str, Any] = self.client.request("POST", "/tokens", json=body, idempotent=False)
        token = str(answer.pop("token"))
        return answer, token

    def list_all(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.client.request("GET", "/tokens")["tokens"]
        return answer

    def revoke(self, name: str) -> None:
        self.client.request("DELETE", f"/tokens/{segment(name)}")
