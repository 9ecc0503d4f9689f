"""The workspace's datastores: create, look up, list, delete."""

from __future__ import annotations

import json
import time

from pydantic import ValidationError

from phalanx.errors import PhalanxError, UnknownName
from phalanx.storage.datastores import (
    DATASTORE_ADAPTER,
    DEFAULT_DATASTORE,
    Datastore,
    default_datastore,
)
from phalanx.storage.secrets import SecretStore
from phalanx.workspace import Workspace


def secrets_of(ws: Workspace) -> SecretStore:
    return SecretStore(ws.home)


def create_datastore(
    ws: Workspace, datastore: Datastore, *, replace: bool = False, owner: str | None = None
) -> None:
    """Record ``datastore``; its credentials must already be references. ``owner``:
    the server's user who made it (``None`` on this machine).

    Raises:
        PhalanxError: the name is ``default`` or taken (unless ``replace``).
    """
    if datastore.name == DEFAULT_DATASTORE:
        raise PhalanxError(
            f"datastore name {DEFAULT_DATASTORE!r} is the workspace's own; choose another name"
        )
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    config = datastore.model_dump_json(exclude_none=True)
    sql = (
        "INSERT INTO datastores (name, type, config_json, created_at, owner)"
        " VALUES (:name, :type, :config, :now, :owner)"
    )
    if replace:
        sql += (
            " ON CONFLICT (name) DO UPDATE SET type = excluded.type,"
            " config_json = excluded.config_json, created_at = excluded.created_at,"
            " owner = excluded.owner"
        )
    try:
        with ws.transaction() as tx:
            tx.execute(
                sql,
                {"name": datastore.name, "type": datastore.type, "config": config,
                 "now": time.time(), "owner": owner},
            )  # fmt: skip
    except IntegrityError as exc:
        raise PhalanxError(
            f"datastore {datastore.name!r} already exists; use another name, or "
            "`phalanx datastore delete` it first"
        ) from exc


def get_datastore(ws: Workspace, name: str) -> Datastore:
    """The datastore called ``name`` (``default`` is always there).

    Raises:
        UnknownName: no such datastore.
    """
    if name == DEFAULT_DATASTORE:
        return default_datastore(ws.home)
    rows = ws.query("SELECT config_json FROM datastores WHERE name = :name", {"name": name})
    if not rows:
        known = [d.name for d in list_datastores(ws)]
        raise UnknownName("datastore", name, known, "`phalanx datastore list` shows them")
    return _load(rows[0]["config_json"])


def datastore_owner(ws: Workspace, name: str) -> str | None:
    """Who made the datastore ``name`` (``None``: made on this machine, or before owners
    were kept; the built-in ``default`` is nobody's)."""
    rows = ws.query("SELECT owner FROM datastores WHERE name = :name", {"name": name})
    return rows[0]["owner"] if rows else None


def list_datastores(ws: Workspace) -> list[Datastore]:
    """Every datastore, ``default`` first."""
    rows = ws.query("SELECT config_json FROM datastores ORDER BY name")
    return [default_datastore(ws.home), *(_load(r["config_json"]) for r in rows)]


def delete_datastore(ws: Workspace, name: str) -> None:
    """Forget a datastore and its stored credentials (the data stays where it is).

    Only the credentials its record names are removed: a datastore of the same name made
    meanwhile keeps its own (their keys differ, see :func:`secret_key`).
    """
    datastore = get_datastore(ws, name)
    if name == DEFAULT_DATASTORE:
        raise PhalanxError(f"datastore {DEFAULT_DATASTORE!r} is built in; it cannot be deleted")
    with ws.transaction() as tx:
        tx.execute("DELETE FROM datastores WHERE name = :name", {"name": name})
    store = secrets_of(ws)
    for ref in (getattr(datastore, "credentials", None) or {}).values():
        if ref.secret is not None:
            store.delete_prefix(ref.secret)


def secret_key(datastore: str, credential: str, made: str | None = None) -> str:
    """Where a stored credential of ``datastore`` lives in the secrets file; ``made``
    tells one making of the datastore from another of the same name (two creates at
    once: the one that loses removes only its own values)."""
    if made is None:
        return f"datastore/{datastore}/{credential}"
    return f"datastore/{datastore}/{made}/{credential}"


def _load(config_json: str) -> Datastore:
    try:
        return DATASTORE_ADAPTER.validate_python(json.loads(config_json))
    except ValidationError as exc:  # written by a newer or broken phalanx
        raise PhalanxError(f"a datastore record cannot be read: {exc}") from exc
