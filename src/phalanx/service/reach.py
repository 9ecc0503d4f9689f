"""What a caller through a server may make the server read or write on its behalf.

The server reads and writes with its own rights: its files, and the cloud
credentials of its environment. So a request may name only what the server
means to share:

- a datastore (``azureml://datastores/<name>/paths/…``), a data asset
  (``azureml:<name>:<version>``) or a job's output (``azureml://jobs/…``):
  those were made to be shared, and their credentials came with them;
- files the client uploaded with the request (the server unpacks them into a
  folder of its own and points the spec there);
- anything else (a path on the server's disk, ``file://``, ``az://``,
  ``abfs://``, ``s3://`` or a blob URL read with the server's ambient
  credentials) only with an admin's token;
- a member's job writes nothing into ``default``'s ``uploads/`` (the files of
  data asset versions made from uploads);
- a job runs on a compute target an admin registered, not on a Ray cluster
  named by its address (which would be sent the job's code and credentials).

On this machine's own workspace (no server) nothing is confined.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from phalanx.service.access import Caller
from phalanx.storage.uri import ASSET_URI, DATASTORE_URI

if TYPE_CHECKING:
    from phalanx.spec import JobSpec

SHARED_FORMS = (
    "azureml://datastores/<name>/paths/<path>, azureml:<asset>:<version> "
    "or azureml://jobs/<job>/outputs/<output>"
)


def shared(uri: str) -> bool:
    """Whether ``uri`` names a datastore, a data asset or a job output."""
    return bool(
        DATASTORE_URI.match(uri) or ASSET_URI.match(uri) or uri.startswith("azureml://jobs/")
    )


def check_uri(caller: Caller, uri: str, what: str) -> None:
    """Refuse a non-admin's ``uri`` through a server unless it names something shared.

    Args:
        what: The field or option, for the message (``inputs.data.path``, ``--path``).

    Raises:
        Forbidden: naming the field and the forms allowed.
    """
    if caller.server is None or caller.is_admin or shared(uri):
        return
    caller.require_admin(
        f"{what}: {uri}",
        f"through the server, it is read with the server's own files or credentials; "
        f"name a datastore or asset instead: {SHARED_FORMS}",
    )


def check_spec(caller: Caller, spec: JobSpec, placed: Collection[str]) -> None:
    """Refuse a job that would read or write the server's own paths or credentials.

    Args:
        placed: The spec fields the server pointed at the request's upload.

    Raises:
        Forbidden: naming the first field that reaches out.
    """
    if caller.server is None or caller.is_admin:
        return
    compute = spec.compute.removeprefix("azureml:")
    if compute.startswith("ray://") or ":" in compute:
        caller.require_admin(
            f"compute: {spec.compute}",
            "a cluster named by its address would be sent the job's code and credentials; "
            "name a compute target an admin registered (phalanx compute list)",
        )
    local = "a path on the server's disk"
    if spec.code is not None and "code" not in placed:
        check_uri(caller, f"{spec.code} ({local})", "code")
    env = spec.inline_environment
    if env is not None:
        for key in ("pip_file", "conda_file"):
            value = getattr(env, key)
            if isinstance(value, str) and f"environment.{key}" not in placed:
                check_uri(caller, f"{value} ({local})", f"environment.{key}")
        if env.build is not None and "environment.build.path" not in placed:
            check_uri(caller, f"{env.build['path']} ({local})", "environment.build.path")
    for name, value in spec.data_inputs().items():
        if f"inputs.{name}.path" not in placed:
            check_uri(caller, value.path, f"inputs.{name}.path")
    for name, out in spec.outputs.items():
        if out.path is not None:
            check_uri(caller, out.path, f"outputs.{name}.path")
            check_writable(caller, out.path, f"outputs.{name}.path")


def check_writable(caller: Caller, uri: str, what: str) -> None:
    """Refuse a non-admin's write into the server's own part of the ``default`` datastore
    (``uploads/``: the files behind data asset versions made from uploads, which no
    job may change under their owners).

    Raises:
        Forbidden: naming the field.
    """
    if caller.server is None or caller.is_admin:
        return
    if ASSET_URI.match(uri):
        caller.require_admin(
            f"{what}: {uri}",
            "a data asset's version is immutable; write to a datastore path, or give the "
            "output a name: to register it as a new version",
        )
    match = DATASTORE_URI.match(uri)
    if match is None:
        return
    parts = [p for p in match["path"].split("/") if p not in ("", ".")]
    if match["name"] == "default" and parts[:1] == ["uploads"]:
        caller.require_admin(
            f"{what}: {uri}",
            "the server keeps uploaded data assets there; write under another path",
        )
