"""``phalanx model …``: register, list, show and download model versions.

With ``PHALANX_SERVER`` set, the registry is the server's: a local ``--path`` is
uploaded, a job output or datastore URI is read by the server, and a download
streams each file here, checked against its recorded sha256.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from phalanx.client.backends import models
from phalanx.errors import PhalanxError
from phalanx.sizes import human_size
from phalanx.storage.uri import is_uri
from phalanx.terminal.columns import print_table, short_time
from phalanx.terminal.termsafe import rank_text

console = Console()


@click.group("model")
def model_group() -> None:
    """The model registry: named, immutable versions of a model's files."""


def _tags(values: tuple[str, ...]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise PhalanxError(f"--tag {value!r}: write KEY=VALUE")
        tags[key] = val
    return tags


@model_group.command("create")
@click.option("--name", required=True, help="The model's name.")
@click.option(
    "--path",
    required=True,
    help="A job output (azureml://jobs/<job>/outputs/<output>[/paths/<p>]), a datastore "
    "URI (azureml://datastores/…, az://…, s3://…) or a local file or folder.",
)
@click.option("--version", help="The version; the next integer when left out.")
@click.option("--description")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
def create_cmd(
    name: str, path: str, version: str | None, description: str | None, tags: tuple[str, ...]
) -> int:
    """Copy a model's files into the registry as a new, immutable version."""
    if not path.strip():
        raise PhalanxError("--path is empty; give a job output, a datastore URI or a local path")
    if not is_uri(path):
        path = str(Path(path.removeprefix("file://")).expanduser().absolute())
    model = models().create(
        name=name, path=path, version=version, description=description, tags=_tags(tags)
    )
    job = f" from job {model['job']}" if model["job"] else ""
    console.print(
        f"model [bold]{model['name']}:{model['version']}[/bold] registered{job}: "
        f"{len(model['files'])} file(s), {human_size(model['size'])}"
    )
    return 0


@model_group.command("list")
@click.option("--name", help="Only this model's versions.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(name: str | None, as_json: bool) -> int:
    """Registered model versions, by name then oldest first."""
    listed = models().list_all(name)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return 0
    if not listed:
        console.print("no models registered (phalanx model create --name … --path …)")
        return 0
    rows = [
        (
            m["name"],
            m["version"],
            str(len(m["files"])),
            human_size(m["size"]),
            m["job"] or "-",
            short_time(m["created_at"]),
        )
        for m in listed
    ]
    headers = ("NAME", "VERSION", "FILES", "SIZE", "JOB", "CREATED")
    print_table(console, headers, rows, optional=("FILES", "JOB", "CREATED"))
    return 0


@model_group.command("show")
@click.argument("name")
@click.option("--version", default="latest", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, version: str, as_json: bool) -> int:
    """A model version: where it came from, its metrics and its files with sha256."""
    model = models().show(name, version)
    if as_json:
        click.echo(json.dumps(model, indent=2))
        return 0
    made = short_time(model["created_at"])
    console.print(f"[bold]{model['name']}:{model['version']}[/bold]  {made}")
    console.print(f"  source   {model['source']}")
    if model["job"]:
        console.print(f"  job      {model['job']}")
    # A user's words and a job's metric names are text: no markup, no escapes.
    if model["description"]:
        console.print(Text("  about    ").append_text(rank_text(model["description"])))
    for key, value in sorted(model["tags"].items()):
        console.print(Text("  tag      ").append_text(rank_text(f"{key}={value}")))
    for metric, number in sorted(model["metrics"].items()):
        shown = "nan/inf" if number is None else f"{number:.6g}"
        console.print(Text("  metric   ").append_text(rank_text(f"{metric} = {shown}")))
    rows = [(f["path"], human_size(f["size"]), f["sha256"]) for f in model["files"]]
    # A whole hash is 64 characters: under its file's row when the terminal is narrow.
    print_table(console, ("FILE", "SIZE", "SHA256"), rows, under="SHA256")
    return 0


@model_group.command("download")
@click.argument("name")
@click.option("--version", default="latest", show_default=True)
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder the files are written into.",
)
@click.option("--overwrite", is_flag=True, help="Replace files at --dest that differ.")
def download_cmd(name: str, version: str, dest: Path, overwrite: bool) -> int:
    """Copy a model version's files to a folder, each checked against its sha256."""
    model, written = models().download(name, version, dest, overwrite=overwrite)
    console.print(
        f"model {model['name']}:{model['version']}: {len(model['files'])} file(s) in {dest} "
        f"({human_size(written)} written)"
    )
    return 0
