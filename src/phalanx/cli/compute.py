"""``phalanx compute …``: named compute targets (Ray clusters)."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table

from phalanx.compute.targets import (
    RayTarget,
    check_address,
    create_target,
    delete_target,
    get_target,
    list_targets,
    secret_key,
)
from phalanx.errors import PhalanxError
from phalanx.storage.errors import check_port
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

console = Console()


@click.group("compute")
def compute_group() -> None:
    """Compute targets: Ray clusters jobs can run on (this machine is `local`)."""


def _probe(address: str) -> None:
    """Fail fast when nothing listens at the address (Ray's own connect retries for long)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    check_port(
        host.strip("[]"),
        int(port),
        "for the Ray cluster",
        "check the head node's address and port, or pass --no-check to record it anyway",
    )


@compute_group.command("create")
@click.option("--name", required=True)
@click.option("--type", "kind", type=click.Choice(["ray"]), default="ray", show_default=True)
@click.option("--address", required=True, help="ray://HOST:PORT (Ray Client) or HOST:PORT (GCS).")
@click.option("--token-env", metavar="VAR", help="Variable holding the cluster's Ray auth token.")
@click.option(
    "--store-token",
    is_flag=True,
    help="Read the token from stdin (or --token-env) into the workspace's 0600 secrets file.",
)
@click.option(
    "--placement",
    type=click.Choice(["spread", "pack"]),
    default="spread",
    show_default=True,
    help="spread: one Ray node per job node; pack: fewest nodes.",
)
@click.option("--cpus-per-node", type=float, help="CPUs per node bundle (default: processes).")
@click.option("--gpus-per-node", type=float, default=0, show_default=True)
@click.option(
    "--files",
    type=click.Choice(["local", "shared"]),
    default="local",
    show_default=True,
    help="local: each node keeps the job's files and ships them back; shared: every node "
    "sees this workspace at the same path.",
)
@click.option("--no-check", is_flag=True, help="Record it without checking the address answers.")
def create_cmd(
    name: str,
    kind: str,
    address: str,
    token_env: str | None,
    store_token: bool,
    placement: str,
    cpus_per_node: float | None,
    gpus_per_node: float,
    files: str,
    no_check: bool,
) -> int:
    """Register a Ray cluster as a compute target."""
    ws = Workspace()
    check_address(address)
    if not no_check:
        _probe(address)
    token: SecretRef | None = None
    if store_token:
        value = os.environ.get(token_env, "") if token_env else sys.stdin.readline().strip()
        if not value:
            raise PhalanxError("--store-token: no token on stdin (or in --token-env); pipe it in")
        SecretStore(ws.home).put(secret_key(name), value)
        token = SecretRef(secret=secret_key(name))
    elif token_env:
        token = SecretRef(env=token_env)
    target = RayTarget(
        name=name,
        address=address,
        token=token,
        placement=placement,  # click.Choice checked it
        cpus_per_node=cpus_per_node,
        gpus_per_node=gpus_per_node,
        files=files,  # click.Choice checked it
    )
    create_target(ws, target)
    console.print(f"compute [bold]{name}[/bold] ({kind}) → {address}")
    return 0


@compute_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> int:
    """The registered targets (and `local`, always there)."""
    targets = list_targets(Workspace())
    if as_json:
        rows = [{"name": "local", "type": "local"}, *(_json(t) for t in targets)]
        click.echo(json.dumps(rows, indent=2))
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "TYPE", "ADDRESS", "PLACEMENT", "TOKEN"):
        table.add_column(column)
    table.add_row("local", "local", "this machine", "", "")
    for t in targets:
        table.add_row(t.name, t.type, t.address, t.placement, t.token.where if t.token else "none")
    console.print(table)
    return 0


@compute_group.command("show")
@click.argument("name")
def show_cmd(name: str) -> int:
    """A target's settings (its token as a reference, never the value)."""
    click.echo(json.dumps(_json(get_target(Workspace(), name)), indent=2))
    return 0


@compute_group.command("delete")
@click.argument("name")
def delete_cmd(name: str) -> int:
    """Forget a target and its stored token (the cluster is untouched)."""
    delete_target(Workspace(), name)
    console.print(f"compute {name} deleted")
    return 0


def _json(target: RayTarget) -> dict[str, object]:
    data = target.model_dump(exclude={"token"}, exclude_none=True)
    data["token"] = target.token.where if target.token else None
    return data
