"""The datastore verbs against a server: what ``phalanx datastore …`` calls with
``PHALANX_SERVER`` set. Piped credentials go out in the create request only."""

from __future__ import annotations

from typing import Any

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.urls import segment
from phalanx.service.datastores import DatastoreCreate


class RemoteDatastores:
    """Datastores in a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(self, req: DatastoreCreate) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request(
            "POST", "/datastores", json=req.wire(), idempotent=False
        )
        return answer

    def list_all(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.client.request("GET", "/datastores")["datastores"]
        return answer

    def show(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request("GET", f"/datastores/{segment(name)}")
        return answer

    def delete(self, name: str) -> None:
        self.client.request("DELETE", f"/datastores/{segment(name)}")

    def ls(self, name: str, path: str) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.client.request(
            "GET", f"/datastores/{segment(name)}/ls", params={"path": path}
        )["entries"]
        return answer
