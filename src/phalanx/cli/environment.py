"""``phalanx environment …``: registered environments (create, list, show), and
``prune``, the images phalanx built for jobs (build contexts, pip layers on images).

An environment file is Azure ML's environment YAML::

    name: pytorch-cuda
    version: "1"
    image: nvcr.io/nvidia/pytorch:24.05-py3     # or build: {path: ./docker-context}
    conda_file: conda.yml                       # optional: a pip layer on the image
    description: PyTorch with CUDA 12

A job then says ``environment: azureml:pytorch-cuda:1`` or
``azureml:pytorch-cuda@latest``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from phalanx.terminal.columns import print_table, short_time

if TYPE_CHECKING:
    from phalanx.service.environments import Environments

console = Console()


def _environments() -> Environments:
    """This machine's workspace, or the server's (``PHALANX_SERVER``)."""
    from phalanx.client.backends import environments

    return environments()


@click.group("environment")
def environment_group() -> None:
    """Registered environments: named, versioned images, builds and package files."""


@environment_group.command("create")
@click.option(
    "-f", "--file", "file", required=True, type=click.Path(path_type=Path),
    help="The environment's YAML (Azure ML's: name, version, image, conda_file, build, …).",
)  # fmt: skip
@click.option("--name", help="The name (instead of the file's).")
@click.option("--version", help="The version (instead of the file's); the next integer when none.")
def create_cmd(file: Path, name: str | None, version: str | None) -> int:
    """Register a new version of an environment (versions are immutable)."""
    created = _environments().create(file, name=name, version=version)
    what = created.get("image") or ("a build context" if created.get("build") else "packages")
    console.print(f"environment [bold]{created['uri']}[/bold] created ({what})", highlight=False)
    return 0


@environment_group.command("list")
@click.option("--name", help="Only the versions of this environment.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(name: str | None, as_json: bool) -> int:
    """Every registered environment version."""
    found = _environments().list_all(name)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return 0
    rows = []
    for e in found:
        packages = e.get("pip_file") or e.get("conda_file") or "-"
        build = (e.get("build") or {}).get("path") or "-"
        rows.append((e["name"], e["version"], short_time(e["created_at"]), e.get("image") or "-",
                     build, str(packages)))  # fmt: skip
    headers = ("NAME", "VERSION", "CREATED", "IMAGE", "BUILD", "PACKAGES")
    print_table(console, headers, rows, optional=("PACKAGES", "BUILD", "CREATED"), under="IMAGE")
    return 0


@environment_group.command("show")
@click.argument("environment")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(environment: str, as_json: bool) -> int:
    """One environment version: NAME (latest), NAME:VERSION or NAME@latest."""
    from phalanx.environments.registered import split_reference

    name, version = split_reference(environment)
    shown = _environments().show(name, version)
    if as_json:
        click.echo(json.dumps(shown, indent=2))
    else:
        for key, value in shown.items():
            console.print(f"[bold]{key}[/bold]: {value}", highlight=False)
    return 0


@environment_group.command("prune")
@click.option(
    "--unused-for", default="7d", show_default=True,
    help="Remove the images no job used for this long (90m, 12h, 7d).",
)  # fmt: skip
@click.option("--all", "everything", is_flag=True, help="Remove every one no container uses.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def prune_cmd(unused_for: str, everything: bool, dry_run: bool, as_json: bool) -> int:
    """Remove the images phalanx built for this workspace's jobs (build contexts, pip
    layers) that no job used lately. A later job that needs one builds it again; an
    image a running job's container uses is kept."""
    from pydantic_core import PydanticCustomError

    from phalanx.errors import PhalanxError
    from phalanx.spec.values import parse_duration

    unused_for_s: float | None = None
    if not everything:
        try:
            unused_for_s = parse_duration(unused_for)
        except PydanticCustomError as exc:  # its message says what to write
            raise PhalanxError(f"--unused-for {exc.message()}") from None
    pruned = _environments().prune(unused_for_s, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(pruned, indent=2))
        return 0
    verb = "would remove" if dry_run else "removed"
    for tag in pruned["removed"]:
        console.print(f"{verb} {tag}", highlight=False)
    for tag, why in pruned["kept"].items():
        console.print(f"kept {tag}: {why}", highlight=False)
    if not pruned["removed"] and not pruned["kept"]:
        console.print("no built image to remove", highlight=False)
    return 0
