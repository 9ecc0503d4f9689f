"""One node of a job on a Ray cluster: what the supervisor sends, what the node makes of it.

The supervisor resolves the job's inputs and outputs once (:class:`NodeJob`);
each node's agent then makes the inputs ready *on its node*, through that
node's cache (downloads, read-only mounts), and substitutes its own paths into
the command (:class:`NodeFolder`). Datastore credentials travel inside the
resolved locations, in memory through Ray; they are never written to a spec,
log or record.

Where the job's files live depends on the target's ``files``:

- ``local`` (the default): the node keeps the job in a folder of its own,
  ``$PHALANX_NODE_HOME/jobs/<job>-node<k>`` (``PHALANX_NODE_HOME`` defaults to
  ``~/.phalanx/node``). The code arrives as an archive, the checkpoints of
  earlier attempts are copied in before each attempt, and logs, records,
  heartbeats, metrics, outputs and checkpoints are shipped back while the job
  runs (:mod:`phalanx.compute.ship`). ``PHALANX_HOME`` for the ranks is the node
  home, whose ``cache`` is the node cache.
- ``shared``: every node sees the workspace at the same path (one machine, or a
  shared file system); ranks write the job's folder directly.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phalanx.compute.ship import Scanner
from phalanx.environments.containers.nodebuild import NodeBuild
from phalanx.errors import PhalanxError
from phalanx.jobs.inputs import InputsReady, is_local_fs, make_ready
from phalanx.launch.node import NodeLaunch
from phalanx.spec import InputSpec, interpolate
from phalanx.storage.cache import NodeCache
from phalanx.storage.location import Location

log = logging.getLogger(__name__)

NODE_HOME_ENV = "PHALANX_NODE_HOME"
SKIPPED = frozenset({"named_outputs"})
"""Folders of a node's job folder not shipped as such (named outputs go to their own)."""


@dataclass(frozen=True)
class NodeJob:
    """What every node of a job needs to run it, resolved once by the supervisor."""

    job_name: str
    job_dir: Path
    """The job's folder in the workspace."""
    files: str
    """``local`` or ``shared``."""
    command: str
    """The spec's command, ``${{...}}`` not yet substituted."""
    literals: dict[str, str]
    """Inputs that are values, rendered."""
    data_inputs: dict[str, InputSpec]
    locations: dict[str, Location]
    output_dirs: dict[str, Path]
    """Each output's folder in the workspace (where shipped files land)."""
    output_files: dict[str, str] = field(default_factory=dict)
    """``uri_file`` outputs: the file's name inside its folder."""
    code: Any = None
    """``local``: the code snapshot as a tar archive (bytes, or a Ray object reference)."""
    image: str | None = None
    """The image the nodes run in (``environment.image``), made ready by each node."""
    image_build: NodeBuild | None = None
    """What each node builds the job's image from (a build context, a pip layer)."""


def pack(folder: Path, only: Iterable[Path] | None = None) -> bytes:
    """``folder`` as an uncompressed tar archive (regular files and folders only).

    Args:
        only: Just these files of it (with the folders they are in).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if folder.is_dir():
            paths = folder.rglob("*") if only is None else _with_parents(folder, only)
            for path in sorted(paths):
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buf.getvalue()


def _with_parents(folder: Path, files: Iterable[Path]) -> set[Path]:
    found: set[Path] = set()
    for file in files:
        found.add(file)
        found.update(p for p in file.parents if p != folder and p.is_relative_to(folder))
    return found


def unpack(data: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")


def node_home() -> Path:
    """This node's phalanx folder: ``$PHALANX_NODE_HOME``, else ``~/.phalanx/node``."""
    return Path(os.environ.get(NODE_HOME_ENV) or Path.home() / ".phalanx" / "node").absolute()


class NodeFolder:
    """The job on this node: its folder, its inputs made ready, its own command.

    Args:
        job: What the supervisor resolved.
        node_rank: This node's rank in the attempt.
        code: The code archive's bytes (``local``).
        checkpoints: The workspace's checkpoints as an archive (``local``), or ``None``.

    Raises:
        PhalanxError: an input cannot be made ready on this node.
    """

    def __init__(
        self,
        job: NodeJob,
        node_rank: int,
        code: bytes | None = None,
        checkpoints: bytes | None = None,
    ) -> None:
        self.job = job
        self.home = node_home()
        self.scanner: Scanner | None = None
        self._mounts: Path | None = None
        # Job names are unique within a workspace only: two workspaces share a cluster.
        where = hashlib.sha256(str(job.job_dir).encode()).hexdigest()[:8]
        name = f"{job.job_name}-{where}-node{node_rank}"
        if job.files == "local":
            self.root = self.home / "jobs" / name
            mounts = self.home / "mounts" / name
            self._mounts = mounts
            self._fresh(code or b"", checkpoints)
            outputs = {n: self.root / "named_outputs" / n for n in job.output_dirs}
        else:
            self.root = job.job_dir
            mounts = self.root / "mounts" / f"node_{node_rank}"
            outputs = dict(job.output_dirs)
        for folder in outputs.values():
            folder.mkdir(parents=True, exist_ok=True)
        self.outputs = {
            n: str(folder / job.output_files[n]) if n in job.output_files else str(folder)
            for n, folder in outputs.items()
        }
        if job.files == "local":
            roots = {"job": self.root, **{f"out:{n}": p for n, p in outputs.items()}}
            self.scanner = Scanner(roots, skip=SKIPPED)
            self.scanner.know("job")  # the code and checkpoints copied in: the workspace's
        self.ready = InputsReady()
        try:
            self.ready = self._inputs(mounts)
            self.inputs = {**job.literals, **self.ready.values}
            references = {**self.outputs, "checkpoints": str(self.root / "checkpoints")}
            self.command = interpolate(
                job.command, self.inputs, references, literals=job.literals.keys()
            )
        except BaseException:
            self.close()  # nothing left mounted or half set up
            raise

    def _fresh(self, code: bytes, checkpoints: bytes | None) -> None:
        """A new job folder: the code and the workspace's checkpoints (a folder an agent
        that died left behind is replaced)."""
        shutil.rmtree(self.root, ignore_errors=True)
        unpack(code, self.root / "code")
        for sub in ("user_logs", "system_logs", "outputs", "checkpoints"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if checkpoints:
            unpack(checkpoints, self.root / "checkpoints")

    def _inputs(self, mounts: Path) -> InputsReady:
        located = self.job.locations
        for name, loc in located.items():
            if is_local_fs(loc) and not Path(loc.path).exists():
                raise PhalanxError(
                    f"inputs.{name}: {loc.path} is on the submitting machine's disk, which this "
                    "Ray node does not see; use a datastore the nodes can reach (blob, S3) or "
                    "files: shared"
                )
        # The node's cache: $PHALANX_CACHE_DIR on the node, else the node home's cache.
        cache = NodeCache.from_env({**os.environ, "PHALANX_HOME": str(self.home)})
        mounts.mkdir(parents=True, exist_ok=True)
        return make_ready(self.job.data_inputs, located, mounts, cache=cache)

    def launch(self, launch: NodeLaunch) -> NodeLaunch:
        """``launch`` with this node's paths, inputs and command."""
        return replace(
            launch,
            job_dir=self.root,
            workdir=self.root / "code",
            checkpoint_dir=self.root / "checkpoints",
            outputs_dir=self.root / "outputs",
            inputs=self.inputs,
            outputs=self.outputs,
            command=self.command,
            env_prefix=None,  # Ray's runtime_env is the job's environment
        )

    def here(self, path: Path) -> Path:
        """A path of the workspace's job folder, on this node."""
        try:
            return self.root / path.relative_to(self.job.job_dir)
        except ValueError:
            return path

    def close(self) -> None:
        """Unmount the inputs; with ``files: local``, remove the node's copy of the job
        (everything in it has been shipped)."""
        self.ready.close()
        if self.scanner is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._mounts is not None:
            shutil.rmtree(self._mounts, ignore_errors=True)
