"""The secret verbs against a server: ``phalanx secret …`` with ``PHALANX_SERVER`` set.
A value travels once, in the body of a ``PUT``, and never comes back."""

from __future__ import annotations

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.urls import segment


class RemoteSecrets:
    """The caller's secrets on a server."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def set(self, name: str, value: str) -> None:
        self.client.request("PUT", f"/secrets/{segment(name)}", json={"value": value})

    def list_names(self) -> list[str]:
        return [str(n) for n in self.client.request("GET", "/secrets")["secrets"]]

    def delete(self, name: str) -> None:
        self.client.request("DELETE", f"/secrets/{segment(name)}")
