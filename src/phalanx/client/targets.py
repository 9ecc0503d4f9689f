"""The compute verbs and ``phalanx queue`` against a server: its targets and its
scheduler's queues. A token piped in for ``--store-token`` goes out in the
create request only."""

from __future__ import annotations

from typing import Any

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.urls import segment
from phalanx.service.targets import TargetCreate


class RemoteTargets:
    """Compute targets and queues of a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(self, req: TargetCreate) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request(
            "POST", "/compute", json=req.wire(), idempotent=False
        )
        return answer

    def list_all(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.client.request("GET", "/compute")["targets"]
        return answer

    def show(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request("GET", f"/compute/{segment(name)}")
        return answer

    def delete(self, name: str) -> None:
        self.client.request("DELETE", f"/compute/{segment(name)}")

    def queue(self, name: str | None) -> list[dict[str, Any]]:
        params = {"compute": name} if name is not None else {}
        answer: list[dict[str, Any]] = self.client.request("GET", "/queue", params=params)[
            "targets"
        ]
        return answer
