"""Data assets of a workspace: create (after checking the path), list, show.

A local ``--path`` names a file or folder where the workspace is; a client of a
server uploads its own local path first (see :mod:`phalanx.server.data_api`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any, Protocol

from phalanx.errors import PhalanxError
from phalanx.service.access import LOCAL, Caller
from phalanx.service.reach import check_uri
from phalanx.storage.assets import DataAsset, create_asset, get_asset, list_assets
from phalanx.storage.errors import storage_errors
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace


class DataAssets(Protocol):
    """The data asset verbs, on this machine's workspace or a server's."""

    def create(
        self,
        *,
        name: str,
        version: str | None,
        path: str,
        type: str,
        description: str | None,
        no_check: bool,
    ) -> dict[str, Any]: ...
    def list_all(self, name: str | None) -> list[dict[str, Any]]: ...
    def show(self, name: str, version: str) -> dict[str, Any]: ...


def asset_json(asset: DataAsset) -> dict[str, Any]:
    """The asset as ``data show --json`` prints it."""
    data = asdict(asset)
    data["uri"] = asset.uri
    data["created_at"] = dt.datetime.fromtimestamp(asset.created_at, dt.timezone.utc).isoformat(
        timespec="seconds"
    )
    return data


def check_kind(url: str, found: str, kind: str) -> None:
    """Refuse a file given as ``uri_folder`` or a folder given as ``uri_file``.

    Raises:
        PhalanxError: naming both and the fix.
    """
    wanted = "directory" if kind == "uri_folder" else "file"
    if found != wanted:
        raise PhalanxError(
            f"--path: {url} is a {found}, but --type {kind} wants a {wanted}; fix --path or --type"
        )


class WorkspaceData:
    """The data assets of a workspace on this machine, as ``caller`` may use them: all
    read; members register (new versions of names they registered first), naming only
    what the server shares (:mod:`phalanx.service.reach`)."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

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
        """Record a new version of ``name`` at ``path`` (a URI or an absolute local path).

        Raises:
            PhalanxError: the path is missing or of the other type, a bad name or
                version, or the version exists.
            Forbidden: a viewer, another's name, or a path the caller may not name.
        """
        self.caller.require_member("data create")
        check_uri(self.caller, path, "--path")
        if not no_check:
            loc = resolve(path, self.ws)
            with storage_errors(loc.url):
                info = loc.fs.info(loc.path)
            check_kind(loc.url, "directory" if info.get("type") == "directory" else "file", type)
        asset = create_asset(
            self.ws, name=name, version=version, path=path, type=type, description=description,
            owner=self.caller.user, admin=self.caller.is_admin,
        )  # fmt: skip
        return asset_json(asset)

    def list_all(self, name: str | None) -> list[dict[str, Any]]:
        return [asset_json(a) for a in list_assets(self.ws, name)]

    def show(self, name: str, version: str) -> dict[str, Any]:
        return asset_json(get_asset(self.ws, name, version))
