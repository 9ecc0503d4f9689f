"""Registered environments of a workspace: create (from Azure ML's environment YAML),
list, show; and prune, the images its jobs built. The CLI calls
:class:`WorkspaceEnvironments` on this machine; a server's routes call the same, and
:mod:`phalanx.client.environments` offers the same calls over HTTP."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Protocol

from phalanx.environments.registered import (
    RegisteredEnvironment,
    create_environment,
    get_environment,
    list_environments,
)
from phalanx.errors import PhalanxError
from phalanx.service.access import LOCAL, Caller
from phalanx.workspace import Workspace

_RECORD_KEYS = ("$schema", "name", "version", "description", "tags")
_FILES = ("conda_file", "pip_file")
DOCUMENT = "environment.yml"
"""The environment's YAML inside an upload to a server."""


class Environments(Protocol):
    """The environment verbs."""

    def create(self, file: Path, *, name: str | None, version: str | None) -> dict[str, Any]: ...
    def list_all(self, name: str | None) -> list[dict[str, Any]]: ...
    def show(self, name: str, version: str) -> dict[str, Any]: ...
    def prune(self, unused_for_s: float | None, *, dry_run: bool) -> dict[str, Any]: ...


def environment_json(env: RegisteredEnvironment) -> dict[str, Any]:
    """The environment as ``environment show --json`` prints it."""
    created = dt.datetime.fromtimestamp(env.created_at, dt.timezone.utc)
    return {
        "name": env.name,
        "version": env.version,
        "uri": env.uri,
        **env.spec,
        "description": env.description,
        "tags": env.tags,
        "created_at": created.isoformat(timespec="seconds"),
        "owner": env.owner,
    }


def load_environment_file(file: Path) -> tuple[dict[str, Any], Any]:
    """An environment YAML's record fields and its environment, validated.

    Raises:
        PhalanxError: the file cannot be read, or a field is invalid (named, with its line).
    """
    from pydantic import ValidationError

    from phalanx.spec.environment import EnvironmentSpec
    from phalanx.spec.messages import to_spec_error
    from phalanx.spec.yamldoc import read_text, read_yaml

    try:
        text = read_text(file, str(file))
    except OSError as exc:
        raise PhalanxError(f"environment file '{file}': {exc.strerror}") from exc
    data, lines = read_yaml(text, str(file))
    if not isinstance(data, dict):
        raise PhalanxError(f"environment file '{file}': not a mapping of fields")
    record = {k: data.pop(k) for k in _RECORD_KEYS if k in data}
    try:
        environment = EnvironmentSpec.model_validate(
            data, context={"base_dir": file.absolute().parent}
        )
    except ValidationError as exc:
        raise to_spec_error(exc, data, source=str(file), lines=lines, overrides={}) from None
    return record, environment


class WorkspaceEnvironments:
    """The registered environments of a workspace on this machine, as ``caller`` may use
    them: all read; members register (new versions of names they registered first);
    admins prune built images."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

    def create(self, file: Path, *, name: str | None, version: str | None) -> dict[str, Any]:
        """Register the environment ``file`` describes (``name``/``version`` override it).

        Raises:
            PhalanxError: an invalid file, name or version, or the version exists.
            Forbidden: a viewer, another's name, or (through a server, not an admin) a
                file named outside the upload.
        """
        self.caller.require_member("environment create")
        record, environment = load_environment_file(file)
        if self.caller.through_server and not self.caller.is_admin:
            _check_inside(environment, file.absolute().parent, self.caller)
        name = name or record.get("name")
        if not name:
            raise PhalanxError(f"environment file '{file}' has no name: add name: or --name")
        version = version or (str(record["version"]) if record.get("version") else None)
        raw_tags = record.get("tags") or {}
        if not isinstance(raw_tags, dict):
            raise PhalanxError(
                f"environment file '{file}': tags: give a mapping of key: value lines, "
                f"not {type(raw_tags).__name__}"
            )
        tags = {str(k): str(v) for k, v in raw_tags.items()}
        created = create_environment(
            self.ws, name=str(name), environment=environment, version=version,
            description=record.get("description"), tags=tags, owner=self.caller.user,
            admin=self.caller.is_admin,
        )  # fmt: skip
        return environment_json(created)

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        return [self._shown(environment_json(e)) for e in list_environments(self.ws, name)]

    def show(self, name: str, version: str) -> dict[str, Any]:
        return self._shown(environment_json(get_environment(self.ws, name, version)))

    def _shown(self, data: dict[str, Any]) -> dict[str, Any]:
        """The environment as the caller may read it: its files (kept on the server) by
        path to an admin only."""
        from phalanx.service.masks import SERVER_PATH, sees_server_paths

        if sees_server_paths(self.caller):
            return data
        shown = {k: SERVER_PATH if k in _FILES and isinstance(v, str) else v
                 for k, v in data.items()}  # fmt: skip
        build = shown.get("build")
        if isinstance(build, dict) and "path" in build:
            shown["build"] = {**build, "path": SERVER_PATH}
        return shown

    def prune(self, unused_for_s: float | None, *, dry_run: bool) -> dict[str, Any]:
        """Remove the images this workspace's jobs built or used, unused for
        ``unused_for_s`` seconds (all when ``None``); those a container uses are kept.

        Returns:
            ``removed`` (the images' tags), ``kept`` (tag → why), ``dry_run``.

        Raises:
            PhalanxError: there are images to remove and no engine to remove them with.
        """
        from phalanx.environments.containers.build import prune

        self.caller.require_admin("environment prune", "it removes every user's built images")
        pruned = prune(self.ws.home / "containers" / "builds", unused_for_s, dry_run=dry_run)
        return {"removed": pruned.removed, "kept": pruned.kept, "dry_run": dry_run}


def _check_inside(environment: Any, folder: Path, caller: Caller) -> None:
    """Refuse files an environment names outside ``folder`` (what the client uploaded).

    Raises:
        Forbidden: naming the field.
    """
    named = {"conda_file": environment.conda_file, "pip_file": environment.pip_file}
    if environment.build is not None:
        named["build.path"] = environment.build.get("path")
    root = folder.resolve()
    for key, value in named.items():
        if isinstance(value, str) and not Path(value).resolve().is_relative_to(root):
            caller.require_admin(
                f"environment {key}: {value}",
                "a file of the server's machine; name files beside the environment's YAML",
            )
