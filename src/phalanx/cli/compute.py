"""``phalanx compute …``: compute targets (this machine, parts of it, Ray clusters),
and ``phalanx queue``: what each target has, what runs where, what waits."""

from __future__ import annotations

import json
import math
import os
import sys

import click
from rich.console import Console
from rich.table import Table

from phalanx.compute.targets import (
    LOCAL,
    LocalTarget,
    RayTarget,
    Target,
    check_address,
    create_target,
    delete_target,
    get_target,
    list_targets,
    parse_devices,
    resolve_target,
    secret_key,
)
from phalanx.errors import PhalanxError
from phalanx.storage.errors import check_port
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

console = Console()


@click.group("compute")
def compute_group() -> None:
    """Compute targets: this machine (`local`), parts of it, and Ray clusters."""


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
@click.option(
    "--type", "kind", type=click.Choice(["ray", "local"]), default="ray", show_default=True
)
@click.option("--address", help="Ray: ray://HOST:PORT (Ray Client) or HOST:PORT (GCS).")
@click.option(
    "--gpus",
    metavar="IDS",
    help="local: the GPUs jobs may use (0-3,6 or UUIDs; 'none'); default: every GPU found.",
)
@click.option("--cpus", type=float, help="local: CPU slots jobs may use; default: the cores.")
@click.option("--memory", help="local: memory jobs may ask for (e.g. 200G); default: all of it.")
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
    address: str | None,
    gpus: str | None,
    cpus: float | None,
    memory: str | None,
    token_env: str | None,
    store_token: bool,
    placement: str,
    cpus_per_node: float | None,
    gpus_per_node: float,
    files: str,
    no_check: bool,
) -> int:
    """Register a compute target: a Ray cluster, or (--type local) a part of this machine.

    `--type local --name local` sets what the built-in target may use (e.g. keep
    GPUs 6-7 for something else); delete it to go back to everything found.
    """
    ws = Workspace()
    if kind == "local":
        create_target(ws, _local(name, gpus, cpus, memory, address))
        console.print(f"compute [bold]{name}[/bold] (local) → {_describe_local(ws, name)}")
        return 0
    if gpus is not None or cpus is not None or memory is not None:
        raise PhalanxError(
            "--gpus/--cpus/--memory are for --type local; a Ray target has --gpus-per-node"
        )
    if address is None:
        raise PhalanxError("--address is required for --type ray: ray://HEAD:10001 or HEAD:6379")
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


def _local(
    name: str, gpus: str | None, cpus: float | None, memory: str | None, address: str | None
) -> LocalTarget:
    from phalanx.sizes import parse_size

    if address is not None:
        raise PhalanxError("--address is for --type ray; a local target is this machine")
    if cpus is not None and not (math.isfinite(cpus) and cpus > 0):
        raise PhalanxError(f"--cpus {cpus:g}: give a number of CPU slots above 0, e.g. 16")
    try:
        devices = parse_devices(gpus) if gpus is not None else None
    except ValueError as exc:
        raise PhalanxError(str(exc)) from None
    try:
        size = parse_size(memory) if memory is not None else None
    except ValueError as exc:
        raise PhalanxError(f"--memory: {exc}") from None
    if size is not None and size <= 0:
        raise PhalanxError(f"--memory {memory}: give a size above 0, e.g. 200G")
    return LocalTarget(name=name, gpus=devices, cpus=cpus, memory=size)


def _describe_local(ws: Workspace, name: str) -> str:
    from phalanx.scheduler.capacity import local_capacity
    from phalanx.scheduler.model import gib

    target = resolve_target(name, ws)
    assert isinstance(target, LocalTarget)
    host = local_capacity(target, ws).hosts[0]
    gpus = ",".join(host.gpus) if host.gpus else "none"
    return f"this machine: GPUs {gpus}, {host.cpus:g} CPU slots, {gib(host.memory)} memory"


@compute_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> int:
    """The targets (`local`, this machine, is always there)."""
    ws = Workspace()
    targets = list_targets(ws)
    if not any(t.name == LOCAL for t in targets):
        targets.insert(0, LocalTarget())
    if as_json:
        click.echo(json.dumps([_json(t) for t in targets], indent=2))
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "TYPE", "WHERE", "PLACEMENT", "TOKEN"):
        table.add_column(column)
    for t in targets:
        if isinstance(t, LocalTarget):
            table.add_row(t.name, t.type, _describe_local(ws, t.name), "", "")
        else:
            where = t.token.where if t.token else "none"
            table.add_row(t.name, t.type, t.address, t.placement, where)
    console.print(table)
    return 0


@compute_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(name: str, as_json: bool) -> int:
    """A target: its settings (a token as a reference, never the value), what it has,
    what runs on it where, and its queue."""
    from phalanx.cli.queue import queue_view, render_queue

    ws = Workspace()
    target = resolve_target(name, ws) if name == LOCAL else get_target(ws, name)
    view = {"settings": _json(target), **queue_view(ws, target)}
    if as_json:
        click.echo(json.dumps(view, indent=2))
        return 0
    for key, value in view["settings"].items():
        if value is not None and key != "name":
            shown = ",".join(value) if isinstance(value, list | tuple) else value
            console.print(f"{key}: {shown}", highlight=False)
    render_queue(console, view)
    return 0


@compute_group.command("delete")
@click.argument("name")
def delete_cmd(name: str) -> int:
    """Forget a target and its stored token (the cluster is untouched); deleting `local`
    gives the built-in target everything this machine has again."""
    delete_target(Workspace(), name)
    console.print(f"compute {name} deleted")
    return 0


def _json(target: Target) -> dict[str, object]:
    if isinstance(target, LocalTarget):
        return target.model_dump()
    data = target.model_dump(exclude={"token"}, exclude_none=True)
    data["token"] = target.token.where if target.token else None
    return data
