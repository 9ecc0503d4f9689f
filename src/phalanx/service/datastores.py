"""Datastores of a workspace: create, list, show, delete, and list a folder of one.

A credential never travels as a reference's value: what is read back (``show``,
``list``) names where the credential comes from. A credential the user pipes in
for ``--store`` arrives in :attr:`DatastoreCreate.piped`, is written to the
workspace's 0600 secrets file and is never returned. ``--credential-env``,
``--key-env`` and ``--secret-env`` name variables of the environment where the
workspace is: the server's, when the CLI talks to one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from secrets import token_hex
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from phalanx.errors import PhalanxError, UnsetVariableError
from phalanx.service.access import LOCAL, Caller
from phalanx.service.masks import SERVER_PATH, sees_server_paths
from phalanx.storage.datastore_records import (
    create_datastore,
    datastore_owner,
    delete_datastore,
    get_datastore,
    list_datastores,
    secret_key,
    secrets_of,
)
from phalanx.storage.datastores import AzureBlobDatastore, Datastore, LocalDatastore, S3Datastore
from phalanx.storage.errors import check_reachable, storage_errors
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

AZURE_AUTH = ("account_key", "sas_token", "connection_string", "anonymous")
S3_AUTH = ("keys", "anonymous", "default")
_TEXT = Field(default=None, max_length=4096)


class DatastoreCreate(BaseModel):
    """What ``phalanx datastore create`` asks for (its options, by name)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    type: Literal["local", "azure_blob", "s3"]
    description: str | None = _TEXT
    path: str | None = _TEXT
    account_name: str | None = _TEXT
    container_name: str | None = _TEXT
    endpoint: str | None = _TEXT
    bucket: str | None = _TEXT
    endpoint_url: str | None = _TEXT
    region: str | None = _TEXT
    auth: str | None = _TEXT
    credential_env: str | None = _TEXT
    key_env: str | None = _TEXT
    secret_env: str | None = _TEXT
    store: bool = False
    """Keep the credentials in the secrets file (from ``piped``, or read once from the
    named variables)."""
    no_check: bool = False
    piped: dict[str, SecretStr] = Field(default_factory=dict, max_length=8)
    """Credential → value read from the user's stdin; write-only."""

    def wire(self) -> dict[str, Any]:
        """The JSON body, the piped values in clear (for the request only)."""
        body = self.model_dump(mode="json", exclude={"piped"})
        body["piped"] = {k: v.get_secret_value() for k, v in self.piped.items()}
        return body


def credentials_needed(req: DatastoreCreate) -> list[tuple[str, str | None]]:
    """(credential, variable naming it or ``None``) for each credential ``req`` needs.

    Raises:
        PhalanxError: an ``--auth`` that is not for the type.
    """
    if req.type == "azure_blob":
        auth = _azure_auth(req)
        return [] if auth == "anonymous" else [(auth, req.credential_env)]
    if req.type == "s3" and _s3_auth(req) == "keys":
        return [("key", req.key_env), ("secret", req.secret_env)]
    return []


def _azure_auth(req: DatastoreCreate) -> str:
    auth = req.auth or ("account_key" if req.credential_env or req.store else "anonymous")
    if auth not in AZURE_AUTH:
        raise PhalanxError(f"--auth {auth} is not for azure_blob; use {', '.join(AZURE_AUTH)}")
    return auth


def _s3_auth(req: DatastoreCreate) -> str:
    auth = req.auth or ("keys" if req.key_env or req.store else "default")
    if auth not in S3_AUTH:
        raise PhalanxError(f"--auth {auth} is not for s3; use {', '.join(S3_AUTH)}")
    return auth


class _Pending(SecretStore):
    """The secrets file plus values not written yet: a datastore is checked before it is kept."""

    def __init__(self, store: SecretStore, pending: dict[str, str]) -> None:
        self.path = store.path
        self._store = store
        self.pending = pending

    def get(self, key: str) -> str | None:
        return self.pending.get(key) or self._store.get(key)


def describe(datastore: Datastore) -> dict[str, Any]:
    """The datastore as shown: every field, credentials as where they come from."""
    data: dict[str, Any] = json.loads(datastore.model_dump_json(exclude_none=True))
    creds = getattr(datastore, "credentials", None)
    if creds is not None:
        data["credentials"] = {k: ref.where for k, ref in creds.items()} or "none (anonymous)"
    return data


def where(d: Datastore) -> str:
    """The folder, container or bucket, as a one-line place."""
    if isinstance(d, LocalDatastore):
        return d.path
    if isinstance(d, AzureBlobDatastore):
        return f"{d.service_url}/{d.container_name}"
    assert isinstance(d, S3Datastore)
    return f"{d.endpoint_url or 's3:/'}/{d.bucket}"


class Datastores(Protocol):
    """The datastore verbs, on this machine's workspace or a server's."""

    def create(self, req: DatastoreCreate) -> dict[str, Any]: ...
    def list_all(self) -> list[dict[str, Any]]: ...
    def show(self, name: str) -> dict[str, Any]: ...
    def delete(self, name: str) -> None: ...
    def ls(self, name: str, path: str) -> list[dict[str, Any]]: ...


class WorkspaceDatastores:
    """The datastores of a workspace on this machine, as ``caller`` may use them: every
    caller reads them (never a credential); members make those whose credentials come
    with the request; only an admin makes those that reach into the server (see
    :func:`check_reach`); only the owner or an admin deletes one."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

    def create(self, req: DatastoreCreate) -> dict[str, Any]:
        """Record a datastore after listing it once (unless ``no_check``); its URL.

        Raises:
            PhalanxError: the name is taken, an option is missing or wrong, a
                variable is unset, or the store refuses the credential.
            Forbidden: the caller's role does not allow it.
        """
        ws = self.ws
        check_reach(self.caller, req, ws)
        secrets = secrets_of(ws)
        if any(d.name == req.name for d in list_datastores(ws)):
            raise PhalanxError(
                f"datastore {req.name!r} already exists; use another name, or "
                "`phalanx datastore delete` it first"
            )
        values: dict[str, str] = {}
        datastore = build(req, values)
        pending = _Pending(secrets, values)
        root = datastore.location("", pending)
        if not req.no_check:
            check_reachable(root.url)
            with storage_errors(root.url, action="list"):
                root.fs.ls(root.path, detail=False)
        for key, value in values.items():
            secrets.put(key, value)
        try:
            create_datastore(ws, datastore, owner=self.caller.user)
        except BaseException:
            # Only what this call wrote (the name was free, so no other datastore's).
            for key in values:
                secrets.delete_prefix(key)
            raise
        return {"name": req.name, "type": req.type, "url": root.url}

    def list_all(self) -> list[dict[str, Any]]:
        """Every datastore, ``default`` first: ``{"show": describe(d), "where": …}``
        (a folder of the server named to an admin only)."""
        return [
            {"show": self._described(d), "where": self._where(d)} for d in list_datastores(self.ws)
        ]

    def show(self, name: str) -> dict[str, Any]:
        return self._described(get_datastore(self.ws, name))

    def _described(self, d: Datastore) -> dict[str, Any]:
        shown = {**describe(d), "owner": datastore_owner(self.ws, d.name)}
        if isinstance(d, LocalDatastore) and not sees_server_paths(self.caller):
            shown["path"] = SERVER_PATH
        return shown

    def _where(self, d: Datastore) -> str:
        if isinstance(d, LocalDatastore) and not sees_server_paths(self.caller):
            return SERVER_PATH
        return where(d)

    def delete(self, name: str) -> None:
        get_datastore(self.ws, name)  # an unknown name is that error, not a refusal
        if name != "default":
            owner = datastore_owner(self.ws, name)
            self.caller.require_owner("datastore delete", f"datastore {name!r}", owner)
        delete_datastore(self.ws, name)

    def ls(self, name: str, path: str) -> list[dict[str, Any]]:
        """PATH of datastore NAME: folders first, then files with sizes."""
        loc = get_datastore(self.ws, name).location(path, secrets_of(self.ws))
        with storage_errors(loc.url, action="list"):
            entries = loc.fs.ls(loc.path, detail=True)
        return sorted(
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


def check_reach(caller: Caller, req: DatastoreCreate, ws: Workspace) -> None:
    """Refuse a datastore that reaches into the server unless an admin asks: a ``local``
    folder (and, through a server, one outside its ``--datastore-root`` folders or
    overlapping the workspace), a variable of the server's environment, or an s3 store
    on the server's own ambient credentials. Viewers make none.

    Raises:
        Forbidden: naming the option.
        PhalanxError: a ``local`` folder outside the server's roots.
    """
    caller.require_member("datastore create")
    if caller.server is None:
        return
    if req.type == "local":
        caller.require_admin(
            "datastore create --type local", "it names a folder of the server's machine"
        )
        _check_root(req.path, caller.server.datastore_roots, ws)
    for option in ("credential_env", "key_env", "secret_env"):
        if getattr(req, option):
            caller.require_admin(
                f"datastore create --{option.replace('_', '-')}",
                "it names a variable of the server's environment; pipe the credential "
                "in with --store instead",
            )
    if req.type == "s3" and _s3_auth(req) == "default":
        caller.require_admin(
            "datastore create --type s3 --auth default",
            "it would use the server's own AWS credentials; give --auth keys with --store, "
            "or --auth anonymous",
        )


def _check_root(path: str | None, roots: tuple[Path, ...], ws: Workspace) -> None:
    if not path:
        return  # build() names the missing --path
    folder = Path(path).expanduser().resolve()
    if not any(folder == root or folder.is_relative_to(root) for root in roots):
        listed = ", ".join(str(r) for r in roots) or "none (start it with --datastore-root DIR)"
        raise PhalanxError(
            f"--path {path}: a local datastore through this server must be inside one of "
            f"its --datastore-root folders ({listed})"
        )
    if folder.is_relative_to(ws.home) or ws.home.is_relative_to(folder):
        raise PhalanxError(
            f"--path {path}: it overlaps the server's workspace {ws.home} (its database, "
            "secrets and jobs); name a data folder apart from it"
        )


def build(req: DatastoreCreate, values: dict[str, str]) -> Datastore:
    """The datastore ``req`` describes; stored credentials go into ``values`` (key → value).

    Raises:
        PhalanxError: naming the option to fix.
    """
    name, kind = req.name, req.type

    def need(option: str) -> str:
        value = getattr(req, option.replace("-", "_"))
        if not value:
            raise PhalanxError(f"--type {kind} needs --{option}")
        return str(value)

    made = token_hex(4)

    def ref(credential: str, env: str | None) -> SecretRef:
        if req.store:
            key = secret_key(name, credential, made)
            values[key] = _stored_value(req, credential, env)
            return SecretRef(secret=key)
        if env is None:
            raise PhalanxError(
                f"{credential}: name the variable that holds it (--credential-env / --key-env / "
                "--secret-env), or add --store to read it from stdin into the secrets file"
            )
        return SecretRef(env=env)

    try:
        if kind == "local":
            folder = Path(need("path")).expanduser().resolve()
            if not folder.is_dir():
                raise PhalanxError(f"--path: folder {folder} not found; create it first")
            return LocalDatastore(name=name, path=str(folder), description=req.description)
        needed = credentials_needed(req)
        if kind == "azure_blob":
            creds = {cred: ref(cred, env) for cred, env in needed}
            extra = {"endpoint": req.endpoint} if req.endpoint else {}
            return AzureBlobDatastore(
                name=name,
                account_name=need("account-name"),
                container_name=need("container-name"),
                credentials=creds,
                description=req.description,
                **extra,
            )
        creds = {cred: ref(cred, env) for cred, env in needed}
        return S3Datastore(
            name=name,
            bucket=need("bucket"),
            endpoint_url=req.endpoint_url,
            region=req.region,
            anonymous=_s3_auth(req) == "anonymous",
            credentials=creds,
            description=req.description,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "datastore"
        raise PhalanxError(f"--{field.replace('_', '-')}: {first['msg']}") from exc


def _stored_value(req: DatastoreCreate, credential: str, env: str | None) -> str:
    """The value ``--store`` keeps: read once from the variable, or as piped in."""
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise UnsetVariableError("--credential-env", env, "export it, or pipe the value in")
        return value
    piped = req.piped.get(credential)
    if piped is None or not piped.get_secret_value():
        raise PhalanxError(f"no {credential} on stdin; pipe it in or name a variable with --*-env")
    return piped.get_secret_value()
