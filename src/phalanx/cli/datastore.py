"""``phalanx datastore …``: create, list, show, delete.

A credential is never an argument (command lines end up in shell history and
``ps``): name the environment variable that holds it (``--credential-env``),
read each time the datastore is used, or add ``--store`` to keep the value in
the workspace's secrets file (0600), read from that variable or from stdin.

With ``PHALANX_SERVER`` set, the datastore is the server's: a variable named by
``--*-env`` is read in the *server's* environment, and a value piped in for
``--store`` is sent to the server once, kept in its secrets file and never shown.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from pydantic import SecretStr, ValidationError
from rich.console import Console

from phalanx.client.backends import datastores, remote
from phalanx.errors import PhalanxError
from phalanx.service.datastores import AZURE_AUTH, S3_AUTH, DatastoreCreate, credentials_needed
from phalanx.terminal.columns import print_table

console = Console()


def _read_piped(what: str) -> str:
    """A credential from stdin (asked for, hidden, on a terminal)."""
    if sys.stdin.isatty():
        value = click.prompt(what, hide_input=True)
    else:
        value = sys.stdin.readline().strip()
    if not value:
        raise PhalanxError(f"no {what} on stdin; pipe it in or name a variable with --*-env")
    return str(value)


@click.group("datastore")
def datastore_group() -> None:
    """Named places where data lives: local folders, Azure Blob containers, S3 buckets."""


@datastore_group.command("create")
@click.option("--name", required=True, help="The datastore's name.")
@click.option("--type", "kind", required=True, type=click.Choice(["local", "azure_blob", "s3"]))
@click.option("--description")
@click.option("--path", help="local: the folder (on the server, when PHALANX_SERVER is set).")
@click.option("--account-name", help="azure_blob: the storage account.")
@click.option("--container-name", help="azure_blob: the container.")
@click.option(
    "--endpoint",
    help="azure_blob: storage suffix (core.windows.net) or the Blob service URL (Azurite).",
)
@click.option("--bucket", help="s3: the bucket.")
@click.option("--endpoint-url", help="s3: an S3-compatible endpoint; AWS when absent.")
@click.option("--region", help="s3: the region.")
@click.option(
    "--auth",
    type=click.Choice(sorted({*AZURE_AUTH, *S3_AUTH})),
    help="azure_blob: account_key | sas_token | connection_string | anonymous; "
    "s3: keys | anonymous | default (the AWS SDK's chain).",
)
@click.option(
    "--credential-env",
    metavar="VAR",
    help="azure_blob: variable holding the credential (in the server's environment when "
    "PHALANX_SERVER is set).",
)
@click.option("--key-env", metavar="VAR", help="s3: variable holding the access key id.")
@click.option("--secret-env", metavar="VAR", help="s3: variable holding the secret key.")
@click.option(
    "--store",
    is_flag=True,
    help="Keep the credential in the workspace's secrets file (read now from the variable, "
    "or from stdin, which is sent to the server write-only) instead of reading the variable "
    "each time.",
)
@click.option("--no-check", is_flag=True, help="Record it without listing it first.")
def create_cmd(name: str, kind: str, store: bool, no_check: bool, **opts: Any) -> int:
    """Register a datastore; it is listed once first, so a wrong credential fails here."""
    try:
        req = DatastoreCreate(name=name, type=kind, store=store, no_check=no_check, **opts)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise PhalanxError(f"--{field.replace('_', '-')}: {first['msg']}") from None
    local_path = req.type == "local" and req.path is not None
    if local_path and remote() is not None and not str(req.path).startswith(("/", "~")):
        raise PhalanxError(f"--path {req.path}: give the folder's absolute path on the server")
    if store:
        needed = credentials_needed(req)
        piped = {cred: SecretStr(_read_piped(cred)) for cred, env in needed if env is None}
        req = req.model_copy(update={"piped": piped})
    created = datastores().create(req)
    console.print(f"datastore [bold]{name}[/bold] created ({created['url']})")
    return 0


@datastore_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> int:
    """Every datastore of the workspace."""
    entries = datastores().list_all()
    if as_json:
        click.echo(json.dumps([e["show"] for e in entries], indent=2))
        return 0
    rows = []
    for entry in entries:
        shown = entry["show"]
        creds = shown.get("credentials") or "-"
        creds = ", ".join(creds) if isinstance(creds, dict) else str(creds)
        rows.append((shown["name"], shown["type"], creds, entry["where"]))
    headers = ("NAME", "TYPE", "CREDENTIALS", "WHERE")
    print_table(console, headers, rows, under="WHERE")
    return 0


@datastore_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, as_json: bool) -> int:
    """One datastore; credentials are shown as where they come from, never their value."""
    shown = datastores().show(name)
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return 0
    for key, value in shown.items():
        if isinstance(value, dict):
            for sub, where in value.items():
                console.print(f"[bold]{key}.{sub}[/bold]: {where}")
        else:
            console.print(f"[bold]{key}[/bold]: {value}")
    return 0


@datastore_group.command("delete")
@click.argument("name")
def delete_cmd(name: str) -> int:
    """Forget a datastore and its stored credential; the data itself is not touched."""
    datastores().delete(name)
    console.print(f"datastore [bold]{name}[/bold] deleted")
    return 0


@datastore_group.command("ls")
@click.argument("name")
@click.argument("path", default="")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ls_cmd(name: str, path: str, as_json: bool) -> int:
    """List PATH (default: the top) of datastore NAME: folders first, then files with sizes."""
    rows = datastores().ls(name, path)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        size = "" if row["type"] == "folder" else f"{row['size']:>12,}"
        suffix = "/" if row["type"] == "folder" else ""
        console.print(f"{size:>12}  {row['name']}{suffix}", highlight=False)
    return 0


__all__ = ["datastore_group"]
