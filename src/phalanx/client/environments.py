"""The environment verbs against a server: what ``phalanx environment …`` calls with
``PHALANX_SERVER`` set. The environment's YAML is checked here, then sent with the
files it names (conda/pip file, build context) as one upload."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.upload import upload
from phalanx.client.urls import segment
from phalanx.service.environments import DOCUMENT, load_environment_file


class RemoteEnvironments:
    """Registered environments in a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)

    def create(self, file: Path, *, name: str | None, version: str | None) -> dict[str, Any]:
        record, environment = load_environment_file(file)  # refused here, not after upload
        doc: dict[str, Any] = {**record, **environment.model_dump(exclude_none=True)}
        files: dict[str, Path] = {}
        if isinstance(environment.conda_file, str):
            files["conda.yml"], doc["conda_file"] = Path(environment.conda_file), "conda.yml"
        if environment.pip_file is not None:
            pip = Path(environment.pip_file)
            files["pip"], doc["pip_file"] = pip.parent, f"pip/{pip.name}"
        if environment.build is not None:
            files["context"] = Path(environment.build["path"])
            doc["build"] = {**environment.build, "path": "context"}
        with tempfile.TemporaryDirectory(prefix="phalanx-environment-") as tmp:
            document = Path(tmp) / DOCUMENT
            document.write_text(yaml.safe_dump(doc, sort_keys=False))
            sent = upload(self.client, {DOCUMENT: document, **files})
        body = {"upload": sent, "name": name, "version": version}
        answer: dict[str, Any] = self.client.request(
            "POST", "/environments", json=body, idempotent=False
        )
        return answer

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        params = {"name": name} if name is not None else {}
        answer: list[dict[str, Any]] = self.client.request("GET", "/environments", params=params)[
            "environments"
        ]
        return answer

    def show(self, name: str, version: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.request(
            "GET", f"/environments/{segment(name)}", params={"version": version}
        )
        return answer

    def prune(self, unused_for_s: float | None, *, dry_run: bool) -> dict[str, Any]:
        body = {"unused_for_s": unused_for_s, "dry_run": dry_run}
        answer: dict[str, Any] = self.client.request("POST", "/environments/prune", json=body)
        return answer
