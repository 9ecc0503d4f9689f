"""Registered environments: a name and an immutable version of an ``environment:``.

``phalanx environment create -f env.yml`` takes Azure ML's environment YAML
(``name``, ``version``, ``image``, ``conda_file``, ``build: {path,
dockerfile_path}``, ``description``, ``tags``; phalanx adds ``pip_file``). The
files it names are copied into the workspace
(``$PHALANX_HOME/environments/<name>/<version>/``), so a version stays what it was
when registered. A job's ``environment: azureml:NAME:VERSION`` or
``azureml:NAME@latest`` resolves here; ``latest`` is the most recently created
version. A name nothing is registered under (an Azure ML curated environment) is
recorded and the job runs in phalanx's Python, with a note, as before.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.environments.pythonenv import copy_requirements
from phalanx.errors import PhalanxError, UnknownName, quote, suggest
from phalanx.limits import check_labels
from phalanx.spec.environment import EnvironmentSpec
from phalanx.workspace import Workspace
from phalanx.workspace.names import ASSET_NAME_RE, VERSION_RE
from phalanx.workspace.owners import check_publisher

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

PREFIX = "azureml:"
_LISTING = "`phalanx environment list` shows them"


@dataclass(frozen=True)
class RegisteredEnvironment:
    name: str
    version: str
    spec: dict[str, Any]
    """The environment's fields, its files' paths in the workspace's copy."""
    description: str | None
    created_at: float
    tags: dict[str, str] = field(default_factory=dict)
    owner: str | None = None
    """The server's user who registered it (``None``: on this machine, or before owners)."""

    @property
    def uri(self) -> str:
        return f"{PREFIX}{self.name}:{self.version}"

    def environment(self) -> EnvironmentSpec:
        return EnvironmentSpec.model_validate(self.spec)


def split_reference(reference: str) -> tuple[str, str]:
    """``azureml:NAME:VERSION`` / ``azureml:NAME@latest`` / ``NAME`` → (name, version).

    Raises:
        PhalanxError: a label other than ``@latest``.
    """
    ref = reference.removeprefix(PREFIX)
    if "@" in ref:
        name, _, label = ref.partition("@")
        if label != "latest":
            raise PhalanxError(f"{quote(reference)}: only @latest is a label; write NAME:VERSION")
        return name, "latest"
    name, _, version = ref.partition(":")
    return name, version or "latest"


def create_environment(
    ws: Workspace,
    *,
    name: str,
    environment: EnvironmentSpec,
    version: str | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    owner: str | None = None,
    admin: bool = True,
) -> RegisteredEnvironment:
    """Record a new version of ``name`` (its files copied in); versions are never overwritten.

    ``version=None`` takes the next integer after the highest integer version.
    ``owner`` registers it (a server's user); unless ``admin``, a name another
    registered first is refused.

    Raises:
        PhalanxError: a bad name or version, the version exists, or the environment
            names no image, build or packages file.
        Forbidden: the name is another's and the caller no admin.
    """
    if not ASSET_NAME_RE.fullmatch(name):
        raise PhalanxError(
            f"environment name {name!r} is invalid: use letters, digits, '_', '-' and '.'"
        )
    if version is not None and (not VERSION_RE.fullmatch(version) or version == "latest"):
        raise PhalanxError(
            f"environment version {version!r} is invalid: use letters, digits, '_', '-' and "
            "'.' (and not 'latest')"
        )
    check_labels(f"environment {name!r}", description, tags)
    if environment.image is None and environment.build is None and not environment.builds:
        raise PhalanxError(
            f"environment {name}: give image, build or a conda_file/pip_file to register"
        )
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    folder: Path | None = None
    try:
        with ws.transaction() as tx:
            check_publisher(tx, "environments", name, owner, admin)
            rows = tx.all(
                "SELECT version, seq FROM environments WHERE name = :name", {"name": name}
            )
            seq = max((r["seq"] for r in rows), default=0) + 1
            if version is None:
                numbers = [int(r["version"]) for r in rows if r["version"].isdigit()]
                version = str(max(numbers, default=0) + 1)
            if any(r["version"] == version for r in rows):
                raise PhalanxError(_exists(name, version))
            folder = ws.home / "environments" / name / version
            spec = _copy_files(environment, folder)
            tx.execute(
                "INSERT INTO environments (name, version, seq, spec_json, description, "
                "tags_json, created_at, owner) VALUES (:name, :version, :seq, :spec, "
                ":description, :tags, :now, :owner)",
                {"name": name, "version": version, "seq": seq, "spec": json.dumps(spec),
                 "description": description, "tags": json.dumps(tags or {}), "now": time.time(),
                 "owner": owner},
            )  # fmt: skip
    except BaseException as exc:
        existing = isinstance(exc, PhalanxError) and str(exc) == _exists(name, version)
        if folder is not None and not existing:
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, IntegrityError):  # registered by another process meanwhile
            raise PhalanxError(_exists(name, version)) from exc
        raise
    return get_environment(ws, name, version)


def _exists(name: str, version: str | None) -> str:
    return (
        f"environment {name}:{version} already exists and versions are immutable; "
        "give another version or leave it out to get the next one"
    )


def _copy_files(environment: EnvironmentSpec, folder: Path) -> dict[str, Any]:
    """The environment's fields, with its files copied into ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)  # left by a registration that failed
    folder.mkdir(parents=True)
    spec = environment.model_dump(exclude_none=True)
    if isinstance(environment.conda_file, str):
        spec["conda_file"] = str(shutil.copy2(environment.conda_file, folder / "conda.yml"))
    if environment.pip_file is not None:
        spec["pip_file"] = str(copy_requirements(Path(environment.pip_file), folder / "pip"))
    if environment.build is not None:
        shutil.copytree(environment.build["path"], folder / "context", symlinks=True)
        spec["build"] = {**environment.build, "path": str(folder / "context")}
    return spec


def get_environment(ws: Workspace, name: str, version: str = "latest") -> RegisteredEnvironment:
    """One version of an environment (``latest``: the newest).

    Raises:
        UnknownName: no such environment.
        PhalanxError: no such version.
    """
    found = find_environment(ws, name, version)
    if found is None:
        raise UnknownName("environment", name, _names(ws), _LISTING)
    return found


def find_environment(
    ws: Workspace, name: str, version: str = "latest"
) -> RegisteredEnvironment | None:
    """One version of an environment; ``None`` when nothing is registered under ``name``
    (an Azure ML curated environment's name, say) nor under a name it is a near miss of.

    Raises:
        UnknownName: ``name`` is a near miss of a registered name: a typo, which would
            otherwise run the job in phalanx's Python instead.
        PhalanxError: ``name`` is registered, but not in that version.
    """
    if version == "latest":
        rows = ws.query(
            "SELECT * FROM environments WHERE name = :name ORDER BY seq DESC LIMIT 1",
            {"name": name},
        )
    else:
        rows = ws.query(
            "SELECT * FROM environments WHERE name = :name AND version = :version",
            {"name": name, "version": version},
        )
    if rows:
        return _environment(rows[0])
    versions = [e.version for e in list_environments(ws, name)]
    if versions:
        raise PhalanxError(
            f"environment {name} has no version {quote(version)} (versions: {', '.join(versions)})"
        )
    known = _names(ws)
    if suggest(name, known) is not None:
        raise UnknownName("environment", name, known, _LISTING)
    return None


def _names(ws: Workspace) -> list[str]:
    """The names environments are registered under."""
    return [r["name"] for r in ws.query("SELECT DISTINCT name FROM environments")]


def list_environments(ws: Workspace, name: str | None = None) -> list[RegisteredEnvironment]:
    """Every environment version (or those of ``name``), oldest first."""
    if name is None:
        rows = ws.query("SELECT * FROM environments ORDER BY name, seq")
    else:
        rows = ws.query(
            "SELECT * FROM environments WHERE name = :name ORDER BY seq", {"name": name}
        )
    return [_environment(r) for r in rows]


def _environment(row: RowMapping) -> RegisteredEnvironment:
    return RegisteredEnvironment(
        name=row["name"],
        version=row["version"],
        spec=json.loads(row["spec_json"]),
        description=row["description"],
        created_at=row["created_at"],
        tags=json.loads(row["tags_json"]),
        owner=row["owner"],
    )
