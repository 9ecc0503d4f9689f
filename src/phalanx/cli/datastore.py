"""``phalanx datastore …``: create, list, show, delete.

A credential is never an argument (command lines end up in shell history and
``ps``): name the environment variable that holds it (``--credential-env``),
read each time the datastore is used, or add ``--store`` to keep the value in
the workspace's secrets file (0600), read from that variable or from stdin.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from phalanx.errors import PhalanxError
from phalanx.storage.datastores import (
    AzureBlobDatastore,
    Datastore,
    LocalDatastore,
    S3Datastore,
)
from phalanx.storage.errors import check_reachable, storage_errors
from phalanx.storage.registry import (
    create_datastore,
    delete_datastore,
    get_datastore,
    list_datastores,
    secret_key,
    secrets_of,
)
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

console = Console()

AZURE_AUTH = ("account_key", "sas_token", "connection_string", "anonymous")
S3_AUTH = ("keys", "anonymous", "default")


class _Pending(SecretStore):
    """The secrets file plus values not written yet: a datastore is checked before it is kept."""

    def __init__(self, store: SecretStore, pending: dict[str, str]) -> None:
        self.path = store.path
        self._store = store
        self.pending = pending

    def get(self, key: str) -> str | None:
        return self.pending.get(key) or self._store.get(key)


def _read_value(what: str, env: str | None) -> str:
    import os

    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise PhalanxError(f"--credential-env: environment variable {env} is not set")
        return value
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
@click.option("--path", help="local: the folder.")
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
    "--credential-env", metavar="VAR", help="azure_blob: variable holding the credential."
)
@click.option("--key-env", metavar="VAR", help="s3: variable holding the access key id.")
@click.option("--secret-env", metavar="VAR", help="s3: variable holding the secret key.")
@click.option(
    "--store",
    is_flag=True,
    help="Keep the credential in the workspace's secrets file (read now from the variable, "
    "or from stdin) instead of reading the variable each time.",
)
@click.option("--no-check", is_flag=True, help="Record it without listing it first.")
def create_cmd(name: str, kind: str, store: bool, no_check: bool, **opts: Any) -> int:
    """Register a datastore; it is listed once first, so a wrong credential fails here."""
    ws = Workspace()
    secrets = secrets_of(ws)
    if any(d.name == name for d in list_datastores(ws)):
        raise PhalanxError(
            f"datastore {name!r} already exists; use another name, or "
            "`phalanx datastore delete` it first"
        )
    values: dict[str, str] = {}
    datastore = _build(name, kind, opts, store, values)
    pending = _Pending(secrets, values)
    if not no_check:
        root = datastore.location("", pending)
        check_reachable(root.url)
        with storage_errors(root.url, action="list"):
            root.fs.ls(root.path, detail=False)
    for key, value in values.items():
        secrets.put(key, value)
    try:
        create_datastore(ws, datastore)
    except BaseException:
        # Only what this call wrote (the name was free, so no other datastore's).
        for key in values:
            secrets.delete_prefix(key)
        raise
    console.print(f"datastore [bold]{name}[/bold] created ({datastore.location('', pending).url})")
    return 0


def _build(
    name: str, kind: str, opts: dict[str, Any], store: bool, values: dict[str, str]
) -> Datastore:
    def need(option: str) -> str:
        value = opts[option.replace("-", "_")]
        if not value:
            raise PhalanxError(f"--type {kind} needs --{option}")
        return str(value)

    def ref(credential: str, env: str | None) -> SecretRef:
        if store:
            key = secret_key(name, credential)
            values[key] = _read_value(credential, env)
            return SecretRef(secret=key)
        if env is None:
            raise PhalanxError(
                f"{credential}: name the variable that holds it (--credential-env / --key-env / "
                "--secret-env), or add --store to read it from stdin into the secrets file"
            )
        return SecretRef(env=env)

    auth = opts["auth"]
    try:
        if kind == "local":
            from pathlib import Path

            folder = Path(need("path")).expanduser().resolve()
            if not folder.is_dir():
                raise PhalanxError(f"--path: folder {folder} not found; create it first")
            return LocalDatastore(name=name, path=str(folder), description=opts["description"])
        if kind == "azure_blob":
            auth = auth or ("account_key" if opts["credential_env"] or store else "anonymous")
            if auth not in AZURE_AUTH:
                raise PhalanxError(
                    f"--auth {auth} is not for azure_blob; use {', '.join(AZURE_AUTH)}"
                )
            creds = {} if auth == "anonymous" else {auth: ref(auth, opts["credential_env"])}
            extra = {"endpoint": opts["endpoint"]} if opts["endpoint"] else {}
            return AzureBlobDatastore(
                name=name,
                account_name=need("account-name"),
                container_name=need("container-name"),
                credentials=creds,
                description=opts["description"],
                **extra,
            )
        auth = auth or ("keys" if opts["key_env"] or store else "default")
        if auth not in S3_AUTH:
            raise PhalanxError(f"--auth {auth} is not for s3; use {', '.join(S3_AUTH)}")
        creds = {}
        if auth == "keys":
            creds = {
                "key": ref("key", opts["key_env"]),
                "secret": ref("secret", opts["secret_env"]),
            }
        return S3Datastore(
            name=name,
            bucket=need("bucket"),
            endpoint_url=opts["endpoint_url"],
            region=opts["region"],
            anonymous=auth == "anonymous",
            credentials=creds,
            description=opts["description"],
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "datastore"
        raise PhalanxError(f"--{field.replace('_', '-')}: {first['msg']}") from exc


def _describe(datastore: Datastore) -> dict[str, Any]:
    """The datastore as shown: every field, credentials as where they come from."""
    data: dict[str, Any] = json.loads(datastore.model_dump_json(exclude_none=True))
    creds = getattr(datastore, "credentials", None)
    if creds is not None:
        data["credentials"] = {k: ref.where for k, ref in creds.items()} or "none (anonymous)"
    return data


@datastore_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> int:
    """Every datastore of the workspace."""
    datastores = list_datastores(Workspace())
    if as_json:
        click.echo(json.dumps([_describe(d) for d in datastores], indent=2))
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "TYPE", "WHERE", "CREDENTIALS"):
        table.add_column(column)
    for d in datastores:
        shown = _describe(d)
        creds = shown.get("credentials", "")
        creds = ", ".join(creds) if isinstance(creds, dict) else creds
        table.add_row(d.name, d.type, _where(d), creds)
    console.print(table)
    return 0


def _where(d: Datastore) -> str:
    if isinstance(d, LocalDatastore):
        return d.path
    if isinstance(d, AzureBlobDatastore):
        return f"{d.service_url}/{d.container_name}"
    return f"{d.endpoint_url or 's3:/'}/{d.bucket}"


@datastore_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, as_json: bool) -> int:
    """One datastore; credentials are shown as where they come from, never their value."""
    shown = _describe(get_datastore(Workspace(), name))
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
    delete_datastore(Workspace(), name)
    console.print(f"datastore [bold]{name}[/bold] deleted")
    return 0


__all__ = ["datastore_group"]


@datastore_group.command("ls")
@click.argument("name")
@click.argument("path", default="")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ls_cmd(name: str, path: str, as_json: bool) -> int:
    """List PATH (default: the top) of datastore NAME: folders first, then files with sizes."""
    ws = Workspace()
    loc = get_datastore(ws, name).location(path, secrets_of(ws))
    with storage_errors(loc.url, action="list"):
        entries = loc.fs.ls(loc.path, detail=True)
    rows = sorted(
        (
            {
                "name": str(e["name"]).rstrip("/").rsplit("/", 1)[-1],
                "type": "folder" if e.get("type") == "directory" else "file",
                "size": int(e.get("size") or 0),
            }
            for e in entries
        ),
        key=lambda r: (r["type"] != "folder", r["name"]),
    )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        size = "" if row["type"] == "folder" else f"{row['size']:>12,}"
        suffix = "/" if row["type"] == "folder" else ""
        console.print(f"{size:>12}  {row['name']}{suffix}", highlight=False)
    return 0
