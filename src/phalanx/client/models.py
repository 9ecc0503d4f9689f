"""The model verbs against a server: what ``phalanx model …`` calls with
``PHALANX_SERVER`` set.

``create`` uploads a local ``--path`` (checked here first, with the same rules
as a local registration: no symbolic links, plain files only); a job output or
a datastore URI is resolved by the server. ``download`` asks for the version's
record, then streams each file into a staging folder inside ``--dest``,
checking its sha256 against the record before anything is moved into place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.upload import upload
from phalanx.client.urls import segment
from phalanx.registry import ModelFile, check_name
from phalanx.registry.files import Readable, copy_out, source_files
from phalanx.storage.location import local
from phalanx.storage.uri import is_uri


class RemoteModels:
    """The model registry of a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(
        self,
        *,
        name: str,
        path: str,
        version: str | None,
        description: str | None,
        tags: dict[str, str],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "version": version,
            "description": description,
            "tags": tags,
        }
        if is_uri(path):
            body["path"] = path
        else:
            check_name(name, version)  # before sending what may be gigabytes
            files = source_files(local(path))
            single = len(files) == 1 and Path(path).is_file()
            body["upload"] = upload(self.client, {rel: Path(f.path) for rel, f in files.items()})
            body["kind"] = "file" if single else "folder"
            body["source"] = path
        answer: dict[str, Any] = self.client.request("POST", "/models", json=body, idempotent=False)
        return answer

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        params = {"name": name} if name is not None else {}
        answer: list[dict[str, Any]] = self.client.request("GET", "/models", params=params)[
            "models"
        ]
        return answer

    def show(self, name: str, version: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request(
            "GET", f"/models/{segment(name)}", params={"version": version}
        )
        return answer

    def download(
        self, name: str, version: str, dest: Path, *, overwrite: bool
    ) -> tuple[dict[str, Any], int]:
        model = self.show(name, version)
        files = [ModelFile(**f) for f in model["files"]]

        @contextmanager
        def open_file(f: ModelFile) -> Iterator[Readable]:
            params = {"version": model["version"], "path": f.path}
            with self.client.stream(f"/models/{segment(model['name'])}/file", params=params) as r:
                yield r

        altered = "the server's registry folder was altered or the transfer was corrupted"
        return model, copy_out(open_file, files, dest, overwrite=overwrite, altered=altered)
