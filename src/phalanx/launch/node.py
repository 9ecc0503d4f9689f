"""The launcher command and environment of one node.

A ``pytorch`` or ``tensorflow`` job runs torchrun on every node (for
TensorFlow it is only the process manager: each process gets ``TF_CONFIG``
from the worker wrapper, rank ``r`` being worker ``r``, then parameter server
``r - worker_count``). An ``mpi`` job runs one ``mpirun`` on node 0, which
starts the ranks of every node (:mod:`phalanx.launch.mpi`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from phalanx import prctl
from phalanx.launch.account import JobAccount, runs_as_root
from phalanx.tracking.jobrun import JobRun


class LauncherImage(Protocol):
    """The image a node's launcher runs in, as far as its command line needs to know
    (:class:`phalanx.environments.containers.image.ImageRef` is one)."""

    @property
    def mpirun(self) -> str:
        """The image's ``mpirun`` (an absolute path inside it); empty when it has none."""
        ...


_RANK_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "TF_CONFIG",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class NodeLaunch:
    """Everything needed to start node ``node_rank`` of an attempt."""

    job_name: str
    job_dir: Path
    attempt: int
    command: str
    """The user's command with ``${{...}}`` already substituted."""
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    workdir: Path
    checkpoint_dir: Path
    outputs_dir: Path
    shutdown_timeout: int = 30
    """Seconds torchrun gives its workers between SIGTERM and SIGKILL: the
    preemption grace. phalanx's own stop after a failure kills sooner."""
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    user_env: Mapping[str, str] = field(default_factory=dict)
    distribution: str = "pytorch"
    """``pytorch``, ``mpi`` or ``tensorflow``."""
    hosts: tuple[str, ...] = ()
    """Every node's address, node 0 first (``mpirun``'s hosts; TensorFlow's task addresses)."""
    tf_cluster: Mapping[str, list[str]] | None = None
    """TensorFlow's cluster: ``worker`` (and ``ps``) task addresses."""
    env_prefix: Path | None = None
    """The job's built environment; its ``bin`` comes first on ``PATH``."""
    shared_machine: bool = False
    """Some of the job's nodes are one machine (MPI then stays off shared memory)."""
    devices: tuple[str, ...] | None = None
    """The GPUs this node was given (``CUDA_VISIBLE_DEVICES``); ``None`` leaves it be."""
    node_devices: tuple[tuple[str, ...], ...] = ()
    """MPI on this machine: every node's GPUs, node 0 first (the rsh agent gives each
    node's daemon its own)."""
    image: LauncherImage | None = None
    """The job's image: the launcher and its ranks run in a container of it, started by
    :func:`phalanx.environments.containers.run.start_launcher` (not :meth:`start`)."""
    shm_size: str | None = None
    """A private ``/dev/shm`` of this size for the node's container (``resources.shm_size``,
    given when the node has its machine to itself); otherwise the host's is shared."""
    account: JobAccount | None = None
    """The job's own account on a server that walls jobs off: the launcher and its ranks
    run as it, from a base environment (:mod:`phalanx.launch.account`)."""
    datastores_file: Path | None = None
    """The datastores the job's spec names, credentials resolved
    (:mod:`phalanx.storage.jobstores`)."""
    tracking: JobRun | None = None
    """The job's MLflow run, which the node's endpoint serves to its ranks
    (:mod:`phalanx.tracking.sidecar`); ``None``: no endpoint."""

    def argv(self, env: Mapping[str, str] | None = None, python: str | None = None) -> list[str]:
        """The launcher's command line for this node.

        Args:
            env: The environment it will run in (what ``mpirun`` forwards); :meth:`env`
                when ``None``.
            python: The interpreter torchrun runs on; phalanx's own when ``None`` (an
                image's inside its container).
        """
        if self.distribution == "mpi":
            from phalanx.launch.mpi import mpirun_argv

            return mpirun_argv(
                hosts=list(self.hosts),
                procs_per_host=self.nproc_per_node,
                command=self.command,
                env=self.env() if env is None else env,
                forward=self.user_env.keys(),
                loopback=all(h.startswith("127.") for h in self.hosts),
                one_machine=self.shared_machine,
                image_mpirun=self.image.mpirun if python and self.image else None,
                python=python,
                as_root=runs_as_root(self.account),
            )
        return [
            python or sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={self.nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--node-rank={self.node_rank}",
            f"--master-addr={self.master_addr}",
            f"--master-port={self.master_port}",
            "--max-restarts=0",
            "--monitor-interval=0.1",
            f"--shutdown-timeout={self.shutdown_timeout}",
            "--module",
            "phalanx.launch.worker",
            self.command,
        ]

    def start(
        self, env: Mapping[str, str], log_path: Path, *, end_with_parent: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start this node's launcher here in ``env``, its output appended to ``log_path``.

        (One with an :attr:`image` starts through
        :func:`phalanx.environments.containers.run.start_launcher`.)

        Args:
            end_with_parent: Have the kernel SIGTERM the launcher (which passes it on to
                its ranks) when the starting process dies.
        """
        assert self.image is None, "a launcher in an image starts through its engine"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                self.argv(env),
                env=dict(env),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C at the user's terminal never reaches it.
                start_new_session=True,
                # (Run after the switch to the job's account, so it survives it.)
                preexec_fn=prctl.end_with_parent if end_with_parent else None,
                **(self.account.popen_kwargs() if self.account is not None else {}),
            )

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The launcher's environment; torchrun adds the per-rank variables.

        Args:
            base: The environment to extend; this process's when ``None`` (for a walled-off
                job, only its base part: no credential of the server's reaches a rank).
        """
        if base is None:
            base = os.environ if self.account is None else self.account.base_env(os.environ)
        env = dict(base)
        # Rank variables of whatever submitted the job (a job submitting a job) are not
        # this job's: torchrun sets its own, mpirun sets only Open MPI's.
        for stale in _RANK_VARIABLES:
            env.pop(stale, None)
        env.pop("RAY_AUTH_TOKEN", None)  # the cluster's credential: no rank needs it
        # An MLflow server the submitter's shell pointed at is not the job's: its run is
        # served by the node's endpoint (or named in the spec's own variables).
        for inherited in [k for k in env if k.startswith(("MLFLOW_", "PHALANX_TRACKING_"))]:
            env.pop(inherited)
        # `python` in the command is the interpreter phalanx runs under: the
        # job's environment is phalanx's own.
        bindir = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH")) if p)
        if self.env_prefix is not None:
            # A job with an environment of its own (layered on phalanx's): its python first.
            env["PATH"] = os.pathsep.join((str(self.env_prefix / "bin"), env["PATH"]))
            env["VIRTUAL_ENV"] = str(self.env_prefix)
        env.update(self.user_env)
        env.update(
            {
                "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port),
                "NODE_RANK": str(self.node_rank),
                "PHALANX_JOB_NAME": self.job_name,
                "PHALANX_JOB_DIR": str(self.job_dir),
                "PHALANX_ATTEMPT": str(self.attempt),
                "PHALANX_CHECKPOINT_DIR": str(self.checkpoint_dir),
                "PHALANX_OUTPUTS_DIR": str(self.outputs_dir),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.account is None:
            # The workspace, so a script resolves what its datastores file lacks.
            env["PHALANX_HOME"] = str(self.job_dir.parent.parent)
        else:
            env.pop("PHALANX_HOME", None)  # a walled-off job has no workspace to open
        if self.datastores_file is not None:
            env["PHALANX_DATASTORES_FILE"] = str(self.datastores_file)
        # A failed NCCL collective raises instead of hanging (torch's default
        # since 2.2; kept explicit so an older torch behaves the same).
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        for name, value in self.inputs.items():
            env[f"PHALANX_INPUT_{name.upper()}"] = value
        for name, value in self.outputs.items():
            env[f"PHALANX_OUTPUT_{name.upper()}"] = value
        if self.tf_cluster is not None:
            env["PHALANX_TF_CLUSTER"] = json.dumps(self.tf_cluster)
        if self.distribution == "mpi":
            env["PHALANX_NODE_COMMAND"] = self.command
            env["PHALANX_NODE_WORKDIR"] = str(self.workdir)
        if self.devices is not None:
            # LOCAL_RANK k uses the k-th of the node's own devices.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.devices)
        if self.node_devices and self.hosts:
            env["PHALANX_MPI_DEVICES"] = json.dumps(
                {host: ",".join(d) for host, d in zip(self.hosts, self.node_devices, strict=False)}
            )
        # torchrun's own error file goes to the system logs, not a temp folder.
        env["TORCHELASTIC_ERROR_FILE"] = str(
            self.job_dir
            / "system_logs"
            / f"attempt_{self.attempt}"
            / f"node_{self.node_rank}_error.json"
        )
        return env
