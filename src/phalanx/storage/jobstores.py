"""The datastores one job may use: a file of its own, written by its supervisor.

A rank that resolves a datastore URI (a ``direct`` input through
``phalanx.data.sources.open_source``, a remote ``Checkpointer``) reads this file,
named by ``PHALANX_DATASTORES_FILE``, rather than the workspace's database and
secrets file. It holds the datastores the job's spec names (in its inputs' and
outputs' paths, its literal input values, its command and its environment
variables) with their credentials resolved, and the data assets its inputs name,
pinned to the version they were at. It is 0600, owned by the job's account, kept
outside the job's folder (which the server serves files of) under
``$PHALANX_HOME/job-credentials/``, and removed when the job ends.

On this machine's own workspace a name the file lacks is still looked up in the
workspace (``PHALANX_HOME``), as before; a walled-off job has no workspace to fall
back on, so it gets a one-line error naming the datastore and the fix.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.errors import PhalanxError
from phalanx.storage.location import Location
from phalanx.storage.secrets import SecretRef, SecretStore

if TYPE_CHECKING:
    from phalanx.spec import JobSpec
    from phalanx.workspace import Workspace

log = logging.getLogger(__name__)

FILE_ENV = "PHALANX_DATASTORES_FILE"
FOLDER = "job-credentials"
# A datastore named anywhere in a text: the command, a variable, a literal input.
_MENTION = re.compile(r"azureml://datastores/([A-Za-z0-9][A-Za-z0-9_-]*)/paths")


def file_for(home: Path, job_name: str) -> Path:
    """Where job ``job_name``'s file is."""
    return home / FOLDER / f"{job_name}.json"


def named(spec: JobSpec) -> tuple[set[str], set[tuple[str, str]]]:
    """The datastores and the data assets (name, version or ``latest``) ``spec`` names."""
    from phalanx.storage.uri import ASSET_URI, DATASTORE_URI

    texts = [spec.command, *spec.environment_variables.values()]
    paths = [v.path for v in spec.data_inputs().values()]
    paths += [o.path for o in spec.outputs.values() if o.path is not None]
    paths += [str(v) for v in spec.literal_inputs().values()]
    datastores: set[str] = set()
    assets: set[tuple[str, str]] = set()
    for path in paths:
        if match := DATASTORE_URI.match(path):
            datastores.add(match["name"])
        elif match := ASSET_URI.match(path):
            assets.add((match["name"], match["version"] or "latest"))
    for text in texts:
        datastores.update(_MENTION.findall(text))
    return datastores, assets


def build(spec: JobSpec, ws: Workspace) -> dict[str, Any]:
    """The file's content for ``spec``: its datastores with credentials resolved here.

    A name that cannot be resolved now (an unknown datastore mentioned in the command,
    an unset variable) is left out and logged: the rank that uses it gets the error.
    """
    from phalanx.storage.assets import get_asset
    from phalanx.storage.datastore_records import get_datastore, secret_key, secrets_of
    from phalanx.storage.secrets import resolve
    from phalanx.storage.uri import DATASTORE_URI

    datastores, assets = named(spec)
    pinned: dict[str, str] = {}
    for name, version in sorted(assets):
        try:
            path = get_asset(ws, name, version).path
        except PhalanxError as exc:
            log.warning("data asset %s:%s is not given to the job: %s", name, version, exc)
            continue
        pinned[f"{name}:{version}"] = path
        if match := DATASTORE_URI.match(path):
            datastores.add(match["name"])
    content: dict[str, Any] = {"datastores": {}, "secrets": {}, "assets": pinned}
    store = secrets_of(ws)
    for name in sorted(datastores):
        try:
            datastore = get_datastore(ws, name)
            refs: dict[str, SecretRef] = getattr(datastore, "credentials", {})
            values = {
                cred: resolve(ref, store, f"datastore {name!r}: {cred}")
                for cred, ref in refs.items()
            }
        except PhalanxError as exc:
            log.warning("datastore %s is not given to the job: %s", name, exc)
            continue
        config = json.loads(datastore.model_dump_json(exclude_none=True))
        if values:
            config["credentials"] = {c: {"secret": secret_key(name, c)} for c in values}
            content["secrets"].update({secret_key(name, c): v for c, v in values.items()})
        content["datastores"][name] = config
    return content


def write(path: Path, content: dict[str, Any], owner: tuple[int, int] | None = None) -> Path:
    """Write the file afresh (0600; ``owner``: uid and gid it then belongs to)."""
    from phalanx.nofollow import write_new

    path.parent.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        os.chmod(path.parent, 0o711)  # the job reaches its own file, lists nobody's
    write_new(path, json.dumps(content, sort_keys=True).encode())
    if owner is not None:
        os.chown(path, *owner)
    return path


class JobDatastores:
    """The names of one job's file, as :func:`phalanx.storage.uri.resolve` looks them up.

    Args:
        path: The file.
        fallback: Look a name the file lacks up in the workspace (this machine's own).
    """

    def __init__(self, path: Path, *, fallback: bool) -> None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            problem = f"{FILE_ENV}={path}: cannot read the job's datastores ({exc})"
            raise PhalanxError(problem) from None
        # A file a Ray node wrote has no workspace behind it: PHALANX_HOME there is the
        # node's own folder, whose empty workspace knows none of the server's names.
        self.path, self.fallback = path, fallback and not data.get("no_workspace")
        self.datastores: dict[str, Any] = dict(data.get("datastores") or {})
        self.assets: dict[str, str] = dict(data.get("assets") or {})
        self._secrets = _Values(path, dict(data.get("secrets") or {}))

    def location(self, datastore: str, path: str) -> Location:
        from phalanx.storage.datastores import DATASTORE_ADAPTER

        config = self.datastores.get(datastore)
        if config is None:
            if self.fallback:
                return self._workspace(f"azureml://datastores/{datastore}/paths/{path}")
            raise PhalanxError(
                f"datastore {datastore!r} is not one this job may use: a job on a server or "
                "a Ray node resolves only the datastores its spec names; name it in an input, "
                "an output or the command"
            )
        return DATASTORE_ADAPTER.validate_python(config).location(path, self._secrets)

    def asset_path(self, name: str, version: str) -> str:
        found = self.assets.get(f"{name}:{version}")
        if found is not None:
            return found
        if self.fallback:
            from phalanx.storage.assets import get_asset

            with _workspace() as ws:
                return get_asset(ws, name, version).path
        raise PhalanxError(
            f"data asset {name}:{version} is not one this job may use: a job on a server or "
            "a Ray node resolves only the assets its inputs name"
        )

    def _workspace(self, uri: str) -> Location:
        from phalanx.storage.uri import resolve

        with _workspace() as ws:
            return resolve(uri, ws)


class _Values(SecretStore):
    """The job's resolved credentials, in place of the workspace's secrets file."""

    def __init__(self, path: Path, values: dict[str, str]) -> None:
        self.path = path
        self._values = values

    def get(self, key: str) -> str | None:
        return self._values.get(key)


@contextmanager
def _workspace() -> Iterator[Workspace]:
    """This machine's workspace (``PHALANX_HOME``), closed after use."""
    from phalanx.workspace import Workspace

    ws = Workspace()
    try:
        yield ws
    finally:
        ws.close()


def resolve_here(uri: str) -> Location:
    """``uri`` resolved as a rank (or any script) resolves it: through the job's file when
    it runs in a job, else through this machine's workspace.

    Raises:
        PhalanxError: an unknown or unusable name, or a scheme phalanx cannot read.
    """
    from phalanx.storage.uri import resolve

    path = os.environ.get(FILE_ENV)
    if not path:
        with _workspace() as ws:
            return resolve(uri, ws)
    return resolve(uri, JobDatastores(Path(path), fallback=bool(os.environ.get("PHALANX_HOME"))))


def remove(path: Path) -> None:
    """Forget the job's credentials (its end)."""
    path.unlink(missing_ok=True)
