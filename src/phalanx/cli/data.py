"""``phalanx data …``: data assets (create, list, show) and the shard converter."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from phalanx.errors import PhalanxError
from phalanx.storage.assets import DataAsset, create_asset, get_asset, list_assets
from phalanx.storage.errors import storage_errors
from phalanx.storage.uri import is_uri, resolve
from phalanx.workspace import Workspace

console = Console()


@click.group("data")
def data_group() -> None:
    """Data assets (named, versioned datastore paths) and dataset conversion."""


def _asset_json(asset: DataAsset) -> dict[str, Any]:
    data = asdict(asset)
    data["uri"] = asset.uri
    data["created_at"] = dt.datetime.fromtimestamp(asset.created_at, dt.timezone.utc).isoformat(
        timespec="seconds"
    )
    return data


@data_group.command("create")
@click.option("--name", required=True, help="The asset's name.")
@click.option("--version", help="The version; the next integer when left out.")
@click.option(
    "--path",
    required=True,
    help="azureml://datastores/<name>/paths/<path>, az://…, s3://… or a local path.",
)
@click.option("--type", "kind", type=click.Choice(["uri_folder", "uri_file"]), default="uri_folder")
@click.option("--description")
@click.option("--no-check", is_flag=True, help="Record it without checking the path exists.")
def create_cmd(
    name: str, version: str | None, path: str, kind: str, description: str | None, no_check: bool
) -> int:
    """Register a new version of a data asset (versions are immutable)."""
    ws = Workspace()
    if not is_uri(path):
        from pathlib import Path

        path = str(Path(path.removeprefix("file://")).expanduser().resolve())
    if not no_check:
        loc = resolve(path, ws)
        with storage_errors(loc.url):
            info = loc.fs.info(loc.path)
        found = "directory" if info.get("type") == "directory" else "file"
        wanted = "directory" if kind == "uri_folder" else "file"
        if found != wanted:
            raise PhalanxError(
                f"--path: {loc.url} is a {found}, but --type {kind} wants a {wanted}; "
                "fix --path or --type"
            )
    asset = create_asset(
        ws, name=name, version=version, path=path, type=kind, description=description
    )
    console.print(f"data asset [bold]{asset.uri}[/bold] created → {asset.path}")
    return 0


@data_group.command("list")
@click.option("--name", help="Only the versions of this asset.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(name: str | None, as_json: bool) -> int:
    """Every data asset version."""
    assets = list_assets(Workspace(), name)
    if as_json:
        click.echo(json.dumps([_asset_json(a) for a in assets], indent=2))
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "VERSION", "TYPE", "PATH", "CREATED"):
        table.add_column(column)
    for a in assets:
        created = _asset_json(a)["created_at"]
        table.add_row(a.name, a.version, a.type, a.path, created)
    console.print(table)
    return 0


@data_group.command("show")
@click.argument("asset")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(asset: str, as_json: bool) -> int:
    """One asset version: NAME (latest), NAME:VERSION or NAME@latest."""
    name, version = _split(asset)
    shown = _asset_json(get_asset(Workspace(), name, version))
    if as_json:
        click.echo(json.dumps(shown, indent=2))
    else:
        for key, value in shown.items():
            console.print(f"[bold]{key}[/bold]: {value}")
    return 0


def _split(asset: str) -> tuple[str, str]:
    asset = asset.removeprefix("azureml:")
    if "@" in asset:
        name, _, label = asset.partition("@")
        if label != "latest":
            raise PhalanxError(f"{asset!r}: only @latest is a label; write NAME:VERSION")
        return name, "latest"
    name, _, version = asset.partition(":")
    return name, version or "latest"
