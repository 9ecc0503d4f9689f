"""The data asset verbs against a server: what ``phalanx data …`` calls with
``PHALANX_SERVER`` set. A local ``--path`` is uploaded into the server's default
datastore and the asset registered there; a URI passes through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.upload import contents, upload
from phalanx.client.urls import segment
from phalanx.errors import PhalanxError
from phalanx.service.data import check_kind
from phalanx.storage.location import local
from phalanx.storage.uri import is_uri


class RemoteData:
    """Data assets in a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(
        self,
        *,
        name: str,
        version: str | None,
        path: str,
        type: str,
        description: str | None,
        no_check: bool,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "version": version,
            "type": type,
            "description": description,
            "no_check": no_check,
        }
        if is_uri(path):
            body["path"] = path
        else:
            body["upload"] = upload(self.client, _files(Path(path), type))
        answer: dict[str, Any] = self.client.request("POST", "/data", json=body, idempotent=False)
        return answer

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        params = {"name": name} if name is not None else {}
        answer: list[dict[str, Any]] = self.client.request("GET", "/data", params=params)["assets"]
        return answer

    def show(self, name: str, version: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request(
            "GET", f"/data/{segment(name)}", params={"version": version}
        )
        return answer


def _files(path: Path, kind: str) -> dict[str, Path]:
    """What to upload for a local ``--path``: a file, or a folder's contents.

    Raises:
        PhalanxError: nothing there, or not of ``kind``.
    """
    loc = local(str(path))
    if not path.exists():
        raise PhalanxError(
            f"{loc.url} not found on this machine; check --path (a local path is uploaded to "
            "the server; give a datastore URI for data already in a datastore)"
        )
    check_kind(loc.url, "directory" if path.is_dir() else "file", kind)
    return contents(path) if path.is_dir() else {path.name: path}
