"""Data assets: a name and an immutable version pointing at a datastore path.

``azureml:<name>:<version>`` and ``azureml:<name>@latest`` in a job's inputs
resolve through here. ``latest`` is the most recently created version.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.errors import PhalanxError, UnknownName, quote
from phalanx.limits import check_labels
from phalanx.workspace import Workspace
from phalanx.workspace.names import ASSET_NAME_RE, VERSION_RE
from phalanx.workspace.owners import check_publisher

if TYPE_CHECKING:
    from sqlalchemy import RowMapping


@dataclass(frozen=True)
class DataAsset:
    name: str
    version: str
    type: str
    """``uri_folder`` or ``uri_file``."""
    path: str
    """A datastore URI, URL or absolute local path."""
    description: str | None
    created_at: float
    tags: dict[str, str] = field(default_factory=dict)
    owner: str | None = None
    """The server's user who registered it (``None``: on this machine, or before owners)."""

    @property
    def uri(self) -> str:
        return f"azureml:{self.name}:{self.version}"


def create_asset(
    ws: Workspace,
    *,
    name: str,
    path: str,
    version: str | None = None,
    type: str = "uri_folder",
    description: str | None = None,
    tags: dict[str, str] | None = None,
    owner: str | None = None,
    admin: bool = True,
) -> DataAsset:
    """Record a new version of ``name``; versions are never overwritten.

    ``version=None`` takes the next integer after the highest integer version.
    ``owner`` registers it (a server's user); unless ``admin``, a name another
    registered first is refused.

    Raises:
        PhalanxError: a bad name or version, or the version exists.
        Forbidden: the name is another's and the caller no admin.
    """
    if not ASSET_NAME_RE.fullmatch(name):
        raise PhalanxError(
            f"data asset name {name!r} is invalid: use letters, digits, '_', '-' and '.'"
        )
    if version is not None and (not VERSION_RE.fullmatch(version) or version == "latest"):
        raise PhalanxError(
            f"data asset version {version!r} is invalid: use letters, digits, '_', '-' and "
            "'.' (and not 'latest')"
        )
    check_labels(f"data asset {name!r}", description, tags)
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    try:
        with ws.transaction() as tx:
            check_publisher(tx, "data_assets", name, owner, admin)
            rows = tx.all("SELECT version, seq FROM data_assets WHERE name = :name", {"name": name})
            seq = max((r["seq"] for r in rows), default=0) + 1
            if version is None:
                numbers = [int(r["version"]) for r in rows if r["version"].isdigit()]
                version = str(max(numbers, default=0) + 1)
            tx.execute(
                "INSERT INTO data_assets (name, version, seq, type, path, description, "
                "tags_json, created_at, owner) VALUES (:name, :version, :seq, :type, :path, "
                ":description, :tags, :now, :owner)",
                {"name": name, "version": version, "seq": seq, "type": type, "path": path,
                 "description": description, "tags": json.dumps(tags or {}), "now": time.time(),
                 "owner": owner},
            )  # fmt: skip
    except IntegrityError as exc:
        raise PhalanxError(
            f"data asset {name}:{version} already exists and versions are immutable; "
            "give another --version or leave it out to get the next one"
        ) from exc
    return get_asset(ws, name, version)


def get_asset(ws: Workspace, name: str, version: str = "latest") -> DataAsset:
    """One version of an asset (``latest``: the newest).

    Raises:
        UnknownName: no such asset.
        PhalanxError: no such version.
    """
    if version == "latest":
        rows = ws.query(
            "SELECT * FROM data_assets WHERE name = :name ORDER BY seq DESC LIMIT 1",
            {"name": name},
        )
    else:
        rows = ws.query(
            "SELECT * FROM data_assets WHERE name = :name AND version = :version",
            {"name": name, "version": version},
        )
    if not rows:
        versions = [a.version for a in list_assets(ws, name)]
        if versions:
            raise PhalanxError(
                f"data asset {name} has no version {quote(version)} (versions: "
                f"{', '.join(versions)})"
            )
        known = [r["name"] for r in ws.query("SELECT DISTINCT name FROM data_assets")]
        raise UnknownName("data asset", name, known, "`phalanx data list` shows them")
    return _asset(rows[0])


def list_assets(ws: Workspace, name: str | None = None) -> list[DataAsset]:
    """Every asset version (or those of ``name``), oldest first."""
    if name is None:
        rows = ws.query("SELECT * FROM data_assets ORDER BY name, seq")
    else:
        rows = ws.query("SELECT * FROM data_assets WHERE name = :name ORDER BY seq", {"name": name})
    return [_asset(r) for r in rows]


def _asset(row: RowMapping) -> DataAsset:
    return DataAsset(
        name=row["name"],
        version=row["version"],
        type=row["type"],
        path=row["path"],
        description=row["description"],
        created_at=row["created_at"],
        tags=json.loads(row["tags_json"]),
        owner=row["owner"],
    )
