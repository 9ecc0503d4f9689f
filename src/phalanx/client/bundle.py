"""The files a job spec names on the submitting machine, packed for a server.

A server cannot read the client's disk, so ``job create`` sends them along:
the ``code`` folder (the same snapshot a local job keeps: ``.amlignore`` /
``.gitignore`` honoured, the same size limit), a ``pip_file`` or
``conda_file``, and every input whose ``path`` is local. Each goes into the
archive under a folder of its own, and the server points the spec's field at
where it unpacked it (``places``: spec field → archive member). An output
with a local path is refused: the server would write to its own disk.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.spec import JobSpec, SweepSpec
from phalanx.spec.environment import EnvironmentSpec
from phalanx.spec.parts import InputSpec
from phalanx.workspace.snapshot import snapshot_code


@dataclass
class Bundle:
    """An archive of the spec's local files and where each belongs in the spec."""

    archive: Path | None = None
    places: dict[str, str] = field(default_factory=dict)
    """Dotted spec field (``code``, ``inputs.data.path``…) → member name in the archive."""


def _local_items(spec: JobSpec) -> list[tuple[str, Path]]:
    """(dotted field, local path) of everything the spec reads from this machine."""
    items: list[tuple[str, Path]] = []
    if spec.code is not None:
        items.append(("code", Path(spec.code)))
    env = spec.environment
    if isinstance(env, EnvironmentSpec):
        for key in ("pip_file", "conda_file"):
            value = getattr(env, key)
            if isinstance(value, str):
                items.append((f"environment.{key}", Path(value)))
        if env.build is not None:  # a Docker build context: built on the server
            items.append(("environment.build.path", Path(env.build["path"])))
    for name, value in spec.inputs.items():
        if isinstance(value, InputSpec) and value.is_local:
            if not _exists(value.local_path):
                raise PhalanxError(
                    f"inputs.{name}: {value.local_path} does not exist on this machine; "
                    "fix `path`, or give a datastore URI the server can read"
                )
            items.append((f"inputs.{name}.path", value.local_path))
    for name, out in spec.outputs.items():
        if out.path is not None and out.is_local:
            raise PhalanxError(
                f"outputs.{name}: a local path ({out.path}) would be written on the server's "
                "disk; leave `path` out (outputs are kept with the job) or give a datastore URI"
            )
    return items


def _exists(path: Path) -> bool:
    """Whether ``path`` is there; not when it cannot be (a name longer than the file
    system allows raises, where ``Path.exists`` answers only for a missing file)."""
    try:
        return path.exists()
    except OSError:
        return False


def bundle_spec(spec: JobSpec | SweepSpec, workdir: Path) -> Bundle:
    """Pack the spec's local files into ``workdir/bundle.tar.gz`` (a sweep's: its trial's,
    placed at the sweep's fields, ``trial.code``).

    Raises:
        PhalanxError: a local output path, a missing input, or code over the
            snapshot limit.
    """
    if isinstance(spec, SweepSpec):
        items = [(spec.template_field(key), path) for key, path in _local_items(spec.template())]
    else:
        items = _local_items(spec)
    if not items:
        return Bundle()
    archive = workdir / "bundle.tar.gz"
    places: dict[str, str] = {}
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for k, (key, path) in enumerate(items):
            member = f"{k}/{path.name or 'root'}"
            places[key] = member
            if key in ("code", "trial.code"):
                with tempfile.TemporaryDirectory(dir=workdir) as tmp:
                    copy = Path(tmp) / "code"
                    snapshot_code(path, copy)
                    tar.add(copy, arcname=member)
                    shutil.rmtree(copy, ignore_errors=True)
            else:
                # Data is sent as the files it holds: a link inside it is followed.
                tar.dereference = True
                tar.add(path, arcname=member)
                tar.dereference = False
    return Bundle(archive, places)
