"""Registered models: a name and immutable versions, each a copy of its files.

::

    $PHALANX_HOME/models/<name>/<version>/…   the files, read-only
    $PHALANX_HOME/models/.staging/            copies being made

A registration copies (and hashes) the files into a staging folder first; then,
in one workspace write transaction, it picks the version, renames the folder
into place and records the row. Two registrations of one name at once are
serialised by that transaction, so each gets its own version and neither loses
its files. A folder left by a registration killed between rename and commit has
no row; the next registration of that version removes it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from phalanx.errors import PhalanxError, UnknownName, quote
from phalanx.limits import check_labels
from phalanx.registry.files import ModelFile, copy_in, copy_out, inside, make_writable
from phalanx.registry.files import source_files as list_source
from phalanx.registry.sources import resolve_source
from phalanx.workspace import Workspace
from phalanx.workspace.metrics import latest_metrics
from phalanx.workspace.names import ASSET_NAME_RE, VERSION_RE
from phalanx.workspace.owners import check_name_owner, check_publisher

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

STAGING = ".staging"


@dataclass(frozen=True)
class ModelVersion:
    """One registered version of a model."""

    name: str
    version: str
    source: str
    """The ``--path`` it was registered from."""
    job_name: str | None
    """The job that produced it, when registered from a job's output."""
    files: list[ModelFile]
    metrics: dict[str, float | None]
    """The source job's last value of each metric it logged."""
    description: str | None
    created_at: float
    folder: Path
    tags: dict[str, str] = field(default_factory=dict)
    owner: str | None = None
    """The server's user who registered it (``None``: on this machine, or before owners)."""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def uri(self) -> str:
        return f"azureml:{self.name}:{self.version}"


def models_root(ws: Workspace) -> Path:
    return ws.home / "models"


def check_name(name: str, version: str | None = None) -> None:
    """Refuse a model name or version that is not one plain folder name.

    Raises:
        PhalanxError: naming the value and what is allowed.
    """
    if not ASSET_NAME_RE.fullmatch(name) or ".." in name:
        raise PhalanxError(
            f"model name {quote(name)} is invalid: use letters, digits, '_', '-' and '.', starting "
            "with a letter or digit"
        )
    if version is not None and (
        not VERSION_RE.fullmatch(version) or ".." in version or version == "latest"
    ):
        raise PhalanxError(
            f"model version {quote(version)} is invalid: use letters, digits, '_', '-' and '.' "
            "(and not 'latest'), or leave it out to get the next number"
        )


def register_model(
    ws: Workspace,
    *,
    name: str,
    path: str,
    version: str | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    recorded_as: str | None = None,
    owner: str | None = None,
    admin: bool = True,
) -> ModelVersion:
    """Copy the files at ``path`` into the registry as a new version of ``name``.

    Args:
        path: A data URI or local path, or ``azureml://jobs/<job>/outputs/<output>``.
        version: ``None`` takes the next integer after the highest integer version.
        recorded_as: The source to record instead of ``path`` (a client's own path,
            for files it uploaded to a server).
        owner: Who registers it (a server's user; ``None`` on this machine).
        admin: Whether they may publish under a name another registered first.

    Raises:
        PhalanxError: a bad name, version or path; the version exists; the files
            cannot be read.
        Forbidden: the name is another's and the caller no admin.
    """
    from sqlalchemy.exc import SQLAlchemyError  # loaded where the database is written

    check_labels(f"model {name!r}", description, tags)
    check_name(name, version)
    # Before any file is copied; again when the version is recorded.
    check_name_owner(ws.query, "models", name, owner, admin)
    if version is not None and _row(ws, name, version) is not None:
        raise _exists(name, version)
    source = resolve_source(path, ws)
    files = list_source(source.location)
    root = _registry_dir(ws)
    staging = Path(tempfile.mkdtemp(prefix="model-", dir=root / STAGING))
    try:
        recorded = copy_in(files, staging / "files")
        metrics = latest_metrics(ws.paths(source.job_name).root) if source.job_name else {}
        with ws.transaction() as tx:
            check_publisher(tx, "models", name, owner, admin)
            rows = tx.all("SELECT version, seq FROM models WHERE name = :name", {"name": name})
            if version is None:
                numbers = [int(r["version"]) for r in rows if r["version"].isdigit()]
                version = str(max(numbers, default=0) + 1)
            elif any(r["version"] == version for r in rows):
                raise _exists(name, version)
            folder = _version_dir(ws, name, version)
            if folder.exists():  # left by a registration killed before it committed
                make_writable(folder)
                shutil.rmtree(folder)
            (staging / "files").rename(folder)
            try:
                tx.execute(
                    "INSERT INTO models (name, version, seq, source, job_name, files_json, "
                    "metrics_json, description, tags_json, created_at, owner) VALUES (:name, "
                    ":version, :seq, :source, :job_name, :files, :metrics, :description, :tags,"
                    " :now, :owner)",
                    {
                        "name": name,
                        "version": version,
                        "seq": max((r["seq"] for r in rows), default=0) + 1,
                        "source": recorded_as or source.uri,
                        "job_name": source.job_name,
                        "files": json.dumps([f.to_json() for f in recorded]),
                        "metrics": json.dumps(metrics),
                        "description": description,
                        "tags": json.dumps(tags or {}),
                        "now": time.time(),
                        "owner": owner,
                    },
                )
            except SQLAlchemyError:  # the row is not in: the folder goes back to staging
                folder.rename(staging / "files")
                raise
            folder.chmod(0o555)
    finally:
        make_writable(staging)
        shutil.rmtree(staging, ignore_errors=True)
    return get_model(ws, name, version)


def get_model(ws: Workspace, name: str, version: str = "latest") -> ModelVersion:
    """One version of a model (``latest``: the newest registered).

    Raises:
        UnknownName: no such model.
        PhalanxError: a bad name or version, or no such version.
    """
    check_name(name, None if version == "latest" else version)
    row = _row(ws, name, version)
    if row is None:
        versions = [m.version for m in list_models(ws, name)]
        if versions:
            raise PhalanxError(
                f"model {name} has no version {quote(version)} (versions: {', '.join(versions)})"
            )
        known = [r["name"] for r in ws.query("SELECT DISTINCT name FROM models")]
        raise UnknownName("model", name, known, "`phalanx model list` shows them")
    return _model(ws, row)


def list_models(ws: Workspace, name: str | None = None) -> list[ModelVersion]:
    """Every model version (or those of ``name``), by name then oldest first."""
    if name is None:
        rows = ws.query("SELECT * FROM models ORDER BY name, seq")
    else:
        rows = ws.query("SELECT * FROM models WHERE name = :name ORDER BY seq", {"name": name})
    return [_model(ws, r) for r in rows]


def download_model(model: ModelVersion, dest: Path, *, overwrite: bool = False) -> int:
    """Copy ``model``'s files into ``dest``, each verified against its sha256.

    Returns:
        Bytes written.

    Raises:
        PhalanxError: see :func:`phalanx.registry.files.copy_out`.
    """

    def open_file(f: ModelFile) -> BinaryIO:
        return open(model.folder / f.path, "rb")

    altered = f"the registry folder {model.folder} was altered"
    return copy_out(open_file, model.files, dest, overwrite=overwrite, altered=altered)


def _registry_dir(ws: Workspace) -> Path:
    root = models_root(ws)
    (root / STAGING).mkdir(parents=True, exist_ok=True)
    if root.is_symlink() or not inside(ws.home, root):
        raise PhalanxError(f"{root} is a link out of the workspace; remove it")
    return root


def _version_dir(ws: Workspace, name: str, version: str) -> Path:
    parent = models_root(ws) / name
    parent.mkdir(exist_ok=True)
    if parent.is_symlink() or not inside(models_root(ws), parent):
        raise PhalanxError(f"{parent} is a link out of the registry; remove it")
    return parent / version


def _row(ws: Workspace, name: str, version: str) -> RowMapping | None:
    if version == "latest":
        rows = ws.query(
            "SELECT * FROM models WHERE name = :name ORDER BY seq DESC LIMIT 1", {"name": name}
        )
    else:
        rows = ws.query(
            "SELECT * FROM models WHERE name = :name AND version = :version",
            {"name": name, "version": version},
        )
    return rows[0] if rows else None


def _exists(name: str, version: str) -> PhalanxError:
    return PhalanxError(
        f"model {name}:{version} already exists and versions are immutable; give another "
        "--version or leave it out to get the next one"
    )


def _model(ws: Workspace, row: RowMapping) -> ModelVersion:
    return ModelVersion(
        name=row["name"],
        version=row["version"],
        source=row["source"],
        job_name=row["job_name"],
        files=[ModelFile(**f) for f in json.loads(row["files_json"])],
        metrics=json.loads(row["metrics_json"]),
        description=row["description"],
        created_at=row["created_at"],
        folder=models_root(ws) / row["name"] / row["version"],
        tags=json.loads(row["tags_json"]),
        owner=row["owner"],
    )
