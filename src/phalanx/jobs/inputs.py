"""Data inputs checked against the workspace: located, their type and mode checked.

Where they are made ready (downloads, mounts) is :mod:`phalanx.compute.inputs`,
run where the job's nodes are.
"""

from __future__ import annotations

from phalanx.compute.inputs import is_local_fs
from phalanx.errors import PhalanxError
from phalanx.spec import InputSpec, JobSpec
from phalanx.storage.errors import storage_errors
from phalanx.storage.location import Location
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace


def locate(name: str, value: InputSpec, ws: Workspace) -> Location:
    """Resolve one input and check that it exists and has the declared type.

    Raises:
        PhalanxError: naming ``inputs.<name>`` and the path.
    """
    where = f"inputs.{name}"
    try:
        loc = resolve(value.path, ws)
        with storage_errors(loc.url):
            info = loc.fs.info(loc.path)
    except PhalanxError as exc:
        raise PhalanxError(f"{where}: {exc}") from exc
    is_dir = info.get("type") == "directory"
    if value.type == "uri_folder" and not is_dir:
        raise PhalanxError(
            f"{where}: {loc.url} is a file, not a folder; fix `path` or use type: uri_file"
        )
    if value.type == "uri_file" and is_dir:
        raise PhalanxError(
            f"{where}: {loc.url} is a folder, not a file; fix `path` or use type: uri_folder"
        )
    return loc


def check_inputs(spec: JobSpec, ws: Workspace) -> dict[str, Location]:
    """Fail before launch on an input that cannot be provided; return where each one is."""
    inputs = spec.data_inputs()
    found = {name: locate(name, value, ws) for name, value in inputs.items()}
    for name, loc in found.items():
        if inputs[name].mode == "ro_mount" and not is_local_fs(loc):
            from phalanx.storage.mount import fuse_available

            if (reason := fuse_available()) is not None:
                raise PhalanxError(
                    f"inputs.{name}: ro_mount needs FUSE ({reason}); use mode: download"
                )
    return found
