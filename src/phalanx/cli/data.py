"""``phalanx data …``: data assets (create, list, show) and the shard converter.

With ``PHALANX_SERVER`` set, assets are the server's (a local ``--path`` is
uploaded first); ``data convert`` always runs here: it is a tool for the
machine that holds the images.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from phalanx.client.backends import data_assets
from phalanx.errors import PhalanxError
from phalanx.storage.errors import storage_errors
from phalanx.storage.uri import is_uri, resolve
from phalanx.terminal.columns import print_table, short_time
from phalanx.workspace import Workspace
from phalanx.workspace.names import ASSET_NAME_RE

console = Console()


@click.group("data")
def data_group() -> None:
    """Data assets (named, versioned datastore paths) and dataset conversion."""


@data_group.command("create")
@click.option("--name", required=True, help="The asset's name.")
@click.option("--version", help="The version; the next integer when left out.")
@click.option(
    "--path",
    required=True,
    help="azureml://datastores/<name>/paths/<path>, az://…, s3://… or a local path (with "
    "PHALANX_SERVER set, a local path is uploaded into the server's default datastore).",
)
@click.option("--type", "kind", type=click.Choice(["uri_folder", "uri_file"]), default="uri_folder")
@click.option("--description")
@click.option("--no-check", is_flag=True, help="Record it without checking the path exists.")
def create_cmd(
    name: str, version: str | None, path: str, kind: str, description: str | None, no_check: bool
) -> int:
    """Register a new version of a data asset (versions are immutable)."""
    if not is_uri(path):
        path = str(Path(path.removeprefix("file://")).expanduser().resolve())
    asset = data_assets().create(
        name=name, version=version, path=path, type=kind, description=description,
        no_check=no_check,
    )  # fmt: skip
    console.print(f"data asset [bold]{asset['uri']}[/bold] created → {asset['path']}")
    return 0


@data_group.command("list")
@click.option("--name", help="Only the versions of this asset.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(name: str | None, as_json: bool) -> int:
    """Every data asset version."""
    assets = data_assets().list_all(name)
    if as_json:
        click.echo(json.dumps(assets, indent=2))
        return 0
    rows = [
        (a["name"], a["version"], a["type"], short_time(a["created_at"]), a["path"]) for a in assets
    ]
    # A path is long: under its row when the terminal is narrow, never cut.
    headers = ("NAME", "VERSION", "TYPE", "CREATED", "PATH")
    print_table(console, headers, rows, optional=("TYPE", "CREATED"), under="PATH")
    return 0


@data_group.command("show")
@click.argument("asset")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(asset: str, as_json: bool) -> int:
    """One asset version: NAME (latest), NAME:VERSION or NAME@latest."""
    name, version = _split(asset)
    shown = data_assets().show(name, version)
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


@data_group.group("convert")
def convert_group() -> None:
    """Convert a dataset into phalanx's tar shards (index.json + shard-NNNNNN.tar)."""


@convert_group.command("imagefolder")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dest")
@click.option("--shard-size", default="256M", show_default=True, help="Target bytes per shard.")
@click.option("--workers", type=int, help="Processes; all cores when left out.")
@click.option("--resize", type=int, help="Shrink images to at most this shorter side (px).")
@click.option("--overwrite", is_flag=True, help="Replace a complete dataset already at DEST.")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Order of the samples in the shards (seeded shuffle, so shards mix the classes).",
)
@click.option("--no-shuffle", is_flag=True, help="Keep the folders' order (class by class).")
@click.option(
    "--register",
    "asset",
    help="Also register DEST as a new version of this asset (on the server when "
    "PHALANX_SERVER is set: a local DEST is uploaded).",
)
def convert_imagefolder_cmd(
    src: Path,
    dest: str,
    shard_size: str,
    workers: int | None,
    resize: int | None,
    overwrite: bool,
    seed: int,
    no_shuffle: bool,
    asset: str | None,
) -> int:
    """SRC (one folder per class, ImageNet layout) → shards at DEST (any datastore URI or folder).

    Samples are those of torchvision's ImageFolder(SRC): the classes are SRC's
    sub-folders, sorted (label = position); each class folder is searched
    recursively, following links to folders (a link that loops back is
    reported, not followed); a file is an image when its name ends with .jpg,
    .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff or .webp, in any case.

    An interrupted conversion resumes where it stopped when run again.
    Files left out (other extensions, unreadable or corrupt images) are listed
    with the reason and counted, never silently.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from phalanx.data.convert import convert_imagefolder
    from phalanx.storage.cache import parse_size

    try:
        shard_bytes = parse_size(shard_size)
    except ValueError as exc:
        raise PhalanxError(f"--shard-size {shard_size!r}: {exc}") from exc
    ws = Workspace()
    if asset and not ASSET_NAME_RE.fullmatch(asset):
        raise PhalanxError(
            f"--register {asset!r}: use letters, digits, '_', '-' and '.' (checked before "
            "converting, which can take long)"
        )
    if not is_uri(dest):
        dest = str(Path(dest.removeprefix("file://")).expanduser().resolve())
    loc = resolve(dest, ws)
    columns = (*Progress.get_default_columns()[:1], BarColumn(), MofNCompleteColumn())
    with (
        storage_errors(loc.url, action="write"),
        Progress(*columns, TimeRemainingColumn(), console=console, transient=True) as bar,
    ):
        task = bar.add_task("converting", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = convert_imagefolder(
            src.expanduser().resolve(),
            loc,
            shard_bytes=shard_bytes,
            workers=workers,
            progress=progress,
            resize=resize,
            overwrite=overwrite,
            shuffle_seed=None if no_shuffle else seed,
        )
    console.print(
        f"{report.samples} images in {report.shards} shard(s), {report.bytes / 1e6:.1f} MB, "
        f"{len(report.classes)} classes, {report.seconds:.1f} s"
        + (f" ({report.resumed} shard(s) resumed)" if report.resumed else "")
        + f" → {report.index_url}"
    )
    if report.skipped:
        console.print(f"[yellow]{len(report.skipped)} file(s) skipped:[/yellow]")
        for item in report.skipped[:20]:
            console.print(f"  {item.path}: {item.reason}")
        if len(report.skipped) > 20:
            console.print(f"  … and {len(report.skipped) - 20} more (see index.json)")
    if asset:
        # In the workspace the other commands use: the server's, when one is set (a
        # local DEST is then uploaded to it).
        created = data_assets().create(
            name=asset, version=None, path=dest, type="uri_folder",
            description=f"converted from {src}", no_check=True,
        )  # fmt: skip
        console.print(f"data asset [bold]{created['uri']}[/bold] created")
    return 0
