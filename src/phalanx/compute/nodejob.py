"""One node of a job on a Ray cluster: what the supervisor sends, what the node makes of it.

The supervisor plans the job once (:class:`~phalanx.compute.plan.JobPlan`, sent
in a :class:`NodeJob`); each node's agent then makes it ready *on its node*
(:class:`NodeFolder`) through :func:`phalanx.compute.ready.make_ready`, the
function the supervisor uses for local compute: the inputs through that node's
cache (downloads, read-only mounts), its own paths substituted into the command.
Datastore credentials travel inside the resolved locations and the plan, in
memory through Ray; they are never written to a spec, log or record. The one
file that holds them is the ranks' datastores file, written 0600 under the node
home's ``job-credentials/`` (never in the shipped job folder) and removed when
the job leaves the node, as the supervisor does for local compute.

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
import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phalanx.archives import unpack_folder
from phalanx.compute.inputs import InputsReady, is_local_fs
from phalanx.compute.plan import JobPlan
from phalanx.compute.ready import Ready, make_ready
from phalanx.compute.ship import Scanner
from phalanx.environments.containers.nodebuild import NodeBuild
from phalanx.errors import PhalanxError
from phalanx.launch.node import NodeLaunch
from phalanx.storage import jobstores
from phalanx.storage.cache import NodeCache

log = logging.getLogger(__name__)

NODE_HOME_ENV = "PHALANX_NODE_HOME"
__all__ = ["NODE_HOME_ENV", "NodeFolder", "NodeJob", "node_home"]
SKIPPED = frozenset({"named_outputs"})
"""Folders of a node's job folder not shipped as such (named outputs go to their own)."""


@dataclass(frozen=True)
class NodeJob:
    """What every node of a job needs to run it: the job's plan and how it travels."""

    job_name: str
    plan: JobPlan
    """The job's plan (:mod:`phalanx.compute.plan`), made once by the supervisor."""
    files: str
    """``local`` or ``shared``."""
    code: Any = None
    """``local``: the code snapshot as a tar archive (bytes, or a Ray object reference)."""
    image: str | None = None
    """The image the nodes run in (``environment.image``), made ready by each node."""
    image_build: NodeBuild | None = None
    """What each node builds the job's image from (a build context, a pip layer)."""
    sample_interval: float = 0.0
    """Seconds between samples of each node's machine (:mod:`phalanx.launch.sysmetrics`);
    ``0``: none. The supervisor's setting, as the nodes' environment is Ray's."""
    low_priority: bool = False
    """The node may be taken away: its agent listens for the cloud's eviction notice
    (:mod:`phalanx.compute.eviction`) and passes it on as a preemption notice."""

    @property
    def job_dir(self) -> Path:
        """The job's folder in the workspace."""
        return self.plan.job_dir


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
            outputs = {n: self.root / "named_outputs" / n for n in job.plan.outputs}
        else:
            self.root = job.job_dir
            mounts = self.root / "mounts" / f"node_{node_rank}"
            outputs = job.plan.output_dirs
        for folder in outputs.values():
            folder.mkdir(parents=True, exist_ok=True)
        files = job.plan.output_files
        self.outputs = {
            n: str(folder / files[n]) if n in files else str(folder)
            for n, folder in outputs.items()
        }
        if job.files == "local":
            roots = {"job": self.root, **{f"out:{n}": p for n, p in outputs.items()}}
            self.scanner = Scanner(roots, skip=SKIPPED)
            self.scanner.know("job")  # the code and checkpoints copied in: the workspace's
        # The job's datastores for its ranks, as the supervisor writes them for local
        # compute: this node may be another machine, which sees none of the workspace's
        # files. Outside the job's folder (shipped back, served by the server); 0600.
        self.datastores_file = jobstores.write(
            jobstores.file_for(self.home, name), {**job.plan.datastores, "no_workspace": True}
        )
        self.ready = InputsReady()
        try:
            ready = self._ready(mounts)
        except BaseException:
            self.close()  # nothing left mounted or half set up
            raise
        self.ready, self.inputs, self.command = ready.inputs_ready, ready.inputs, ready.command

    def _fresh(self, code: bytes, checkpoints: bytes | None) -> None:
        """A new job folder: the code and the workspace's checkpoints (a folder an agent
        that died left behind is replaced)."""
        shutil.rmtree(self.root, ignore_errors=True)
        unpack_folder(code, self.root / "code")
        for sub in ("user_logs", "system_logs", "outputs", "checkpoints"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if checkpoints:
            unpack_folder(checkpoints, self.root / "checkpoints")

    def _ready(self, mounts: Path) -> Ready:
        """The inputs made ready on this node (through its cache), the command its own."""
        located = self.job.plan.locations
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
        return make_ready(
            self.job.plan, outputs=self.outputs, checkpoints=self.root / "checkpoints",
            mounts=mounts, cache=cache,
        )  # fmt: skip

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
            datastores_file=self.datastores_file,
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
        self.datastores_file.unlink(missing_ok=True)
        if self.scanner is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._mounts is not None:
            shutil.rmtree(self._mounts, ignore_errors=True)
