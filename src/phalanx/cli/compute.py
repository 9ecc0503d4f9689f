"""``phalanx compute …``: compute targets (this machine, parts of it, Ray clusters).

With ``PHALANX_SERVER`` set, the targets are the server's: "this machine" is the
server's, a Ray address is tried from the server, ``--token-env`` names a
variable of the server's environment, and a token piped in for
``--store-token`` is sent once, kept in the server's secrets file, never shown.
"""

from __future__ import annotations

import json
import sys

import click
from pydantic import SecretStr, ValidationError
from rich.console import Console

from phalanx.client.backends import targets
from phalanx.compute.registry import kind_of
from phalanx.errors import PhalanxError
from phalanx.service.targets import TargetCreate, check_request
from phalanx.terminal.columns import print_table

console = Console()


@click.group("compute")
def compute_group() -> None:
    """Compute targets: this machine (`local`), parts of it, and Ray clusters."""


@compute_group.command("create")
@click.option("--name")
@click.option(
    "-f",
    "--file",
    "file",
    type=click.Path(dir_okay=False),
    help="A compute YAML (Azure ML's keys: name, type, min_instances, max_instances, "
    "idle_time_before_scale_down; phalanx's: address, node_cpus, node_gpus, ...).",
)
@click.option(
    "--type",
    "kind",
    metavar="KIND",
    default="ray",
    show_default=True,
    # Checked against the registry when used, not when every command starts: reading
    # the entry points costs a scan of the installed packages.
    help="The compute kind: local, ray, or one an installed plug-in registers.",
)
@click.option("--address", help="Ray: ray://HOST:PORT (Ray Client) or HOST:PORT (GCS).")
@click.option(
    "--gpus",
    metavar="IDS",
    help="local: the GPUs jobs may use (0-3,6 or UUIDs; 'none'); default: every GPU found.",
)
@click.option("--cpus", type=float, help="local: CPU slots jobs may use; default: the cores.")
@click.option("--memory", help="local: memory jobs may ask for (e.g. 200G); default: all of it.")
@click.option(
    "--token-env",
    metavar="VAR",
    help="Variable holding the cluster's Ray auth token (in the server's environment when "
    "PHALANX_SERVER is set).",
)
@click.option(
    "--store-token",
    is_flag=True,
    help="Read the token from stdin (sent to the server write-only when PHALANX_SERVER is "
    "set) or --token-env into the workspace's 0600 secrets file.",
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
@click.option(
    "--max-nodes",
    type=int,
    help="Ray, elastic: the most worker nodes the cluster's autoscaler may add for the queue.",
)
@click.option("--min-nodes", type=int, help="Ray, elastic: worker nodes kept when idle (0).")
@click.option(
    "--idle-time-before-scale-down",
    metavar="DURATION",
    help="Ray, elastic: how long nodes stay asked for after the last job (120s; e.g. 2m).",
)
@click.option(
    "--node-cpus", type=float, help="Ray, elastic: CPUs of one machine of the worker node type."
)
@click.option(
    "--node-gpus", type=float, help="Ray, elastic: GPUs of one machine of the worker node type."
)
@click.option(
    "--tier",
    metavar="TIER",
    help="Ray: dedicated (default) or low_priority: nodes that may be taken away (spot VMs), "
    "of a node type with the resource phalanx_low_priority; only job_tier: spot jobs run there.",
)
@click.option("--no-check", is_flag=True, help="Record it without checking the address answers.")
def create_cmd(
    name: str | None,
    file: str | None,
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
    max_nodes: int | None,
    min_nodes: int | None,
    idle_time_before_scale_down: str | None,
    node_cpus: float | None,
    node_gpus: float | None,
    tier: str | None,
    no_check: bool,
) -> int:
    """Register a compute target: a Ray cluster, or (--type local) a part of this machine.

    `--type local --name local` sets what the built-in target may use (e.g. keep
    GPUs 6-7 for something else); delete it to go back to everything found.
    An elastic Ray target (`--max-nodes`) has its cluster's autoscaler add nodes
    for the queue and remove them when it is empty.
    """
    options = {
        "name": name, "type": kind, "address": address, "gpus": gpus, "cpus": cpus,
        "memory": memory, "token_env": token_env, "store_token": store_token,
        "placement": placement, "cpus_per_node": cpus_per_node,
        "gpus_per_node": gpus_per_node, "files": files, "max_nodes": max_nodes,
        "min_nodes": min_nodes, "idle_time_before_scale_down": idle_time_before_scale_down,
        "node_cpus": node_cpus, "node_gpus": node_gpus, "tier": tier, "no_check": no_check,
    }  # fmt: skip
    if file is not None:
        from phalanx.service.targets import options_from_yaml

        given = click.get_current_context()
        flags = [k for k in options if k not in ("store_token", "no_check", "token_env")
                 and given.get_parameter_source(k if k != "type" else "kind")
                 == click.core.ParameterSource.COMMANDLINE]  # fmt: skip
        if flags:
            raise PhalanxError(
                f"--{flags[0].replace('_', '-')}: give the target's settings in {file} or as "
                "options, not both"
            )
        options = {**options_from_yaml(file), "store_token": store_token,
                   "no_check": no_check, "token_env": token_env}  # fmt: skip
    elif name is None:
        raise PhalanxError("--name is required (or -f compute.yml with a name)")
    try:
        req = TargetCreate.model_validate(options)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PhalanxError(f"--{field.replace('_', '-')}: {first['msg']}") from None
    name = req.name
    target = check_request(req)
    if store_token and not token_env and kind_of(target).capabilities(target).takes_token:
        token = sys.stdin.readline().strip()
        if not token:
            raise PhalanxError("--store-token: no token on stdin (or in --token-env); pipe it in")
        req = req.model_copy(update={"token": SecretStr(token)})
    made = targets().create(req)
    console.print(f"compute [bold]{name}[/bold] ({made['type']}) → {made['where']}")
    return 0


@compute_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(as_json: bool) -> int:
    """The targets (`local`, this machine, is always there)."""
    listed = targets().list_all()
    if as_json:
        click.echo(json.dumps([t["settings"] for t in listed], indent=2))
        return 0
    rows = []
    for t in listed:
        settings = t["settings"]
        rows.append((settings["name"], settings["type"], t["placement"], t["nodes"], t["token"],
                     t["where"]))  # fmt: skip
    # Where a target is (a long sentence) goes under its row when the terminal is narrow.
    headers = ("NAME", "TYPE", "PLACEMENT", "NODES", "TOKEN", "WHERE")
    print_table(console, headers, rows, optional=("PLACEMENT",), under="WHERE")
    return 0


@compute_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(name: str, as_json: bool) -> int:
    """A target: its settings (a token as a reference, never the value), what it has,
    what runs on it where, and its queue."""
    from phalanx.cli.queue import render_queue

    view = targets().show(name)
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
    targets().delete(name)
    console.print(f"compute {name} deleted")
    return 0
