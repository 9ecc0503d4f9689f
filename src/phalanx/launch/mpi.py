"""The ``mpirun`` command of an MPI job (Open MPI), as Horovod and mpi4py scripts expect.

One ``mpirun`` runs on node 0 for the whole attempt::

    mpirun -np N*P --host H0:P,H1:P,… --bind-to none
        --mca plm_rsh_agent "<python> -m phalanx.launch.mpi_agent"
        -x MASTER_ADDR -x MASTER_PORT -x PHALANX_… …
        <python> -m phalanx.launch.worker '<command>'

Open MPI places ``P`` ranks on each host in order (ranks ``K*P … K*P+P-1`` on
node K, the numbering torchrun uses) and sets ``OMPI_COMM_WORLD_RANK``,
``…_SIZE``, ``…_LOCAL_RANK`` and ``…_LOCAL_SIZE``; the worker wrapper derives
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``NODE_RANK`` from them, so a script may read either set. Open MPI starts its
daemon on the other hosts through the *rsh agent*: phalanx's
:mod:`phalanx.launch.mpi_agent` instead of ssh, which starts it on this
machine (local compute) or asks node K's Ray agent to (Ray compute: the hosts
are then named ``phalanx-node-K``, whatever their addresses). The variables
phalanx sets are forwarded to every rank with ``-x``, but for those that differ
per node (folders, inputs, the command with them), which a rank takes from its
node's daemon. When any rank fails, ``mpirun`` stops the others; SIGTERM to ``mpirun``
(a preemption notice, a stop) reaches every rank.

Local compute gives each node its own loopback address (``127.0.0.1``,
``127.0.0.2``, …), so Open MPI sees separate hosts and the multi-node paths run
for real on one machine; their traffic stays on ``lo``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping

from phalanx.errors import PhalanxError

# Variables worth forwarding when set: interpreters, libraries, thread counts, NICs.
_FORWARD_ALWAYS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "HOME")
_FORWARD_PREFIXES = ("PHALANX_", "NCCL_", "GLOO_", "TORCH_", "HOROVOD_", "CUDA_", "TF_")
# What differs between nodes (their folders, inputs, command, environment): a rank gets
# these from its node's daemon, which its node's agent started in that node's environment.
_NODE_LOCAL = frozenset({
    "PATH", "VIRTUAL_ENV", "HOME", "NODE_RANK", "TORCHELASTIC_ERROR_FILE", "PHALANX_JOB_DIR",
    "PHALANX_HOME", "PHALANX_CHECKPOINT_DIR", "PHALANX_OUTPUTS_DIR", "PHALANX_NODE_COMMAND",
    "PHALANX_RAY_NODE_ID", "PHALANX_MPI_AGENT_SOCKET", "PHALANX_NODE_HOME", "PHALANX_NODE_WORKDIR",
    "CUDA_VISIBLE_DEVICES",
})  # fmt: skip
_NODE_LOCAL_PREFIXES = ("PHALANX_INPUT_", "PHALANX_OUTPUT_", "PHALANX_CACHE_")


def mpirun_path() -> str:
    """Open MPI's ``mpirun``.

    Raises:
        PhalanxError: none on ``PATH``, or it is not Open MPI.
    """
    exe = shutil.which("mpirun")
    if exe is None:
        raise PhalanxError(
            "distribution type mpi needs Open MPI's mpirun on PATH; install it "
            "(apt-get install openmpi-bin libopenmpi-dev) or use type: pytorch"
        )
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PhalanxError(f"{exe} --version failed ({exc}); check the MPI installation") from exc
    if "Open MPI" not in version.stdout + version.stderr:
        raise PhalanxError(
            f"{exe} is not Open MPI's mpirun (phalanx builds Open MPI's command line); put "
            "Open MPI first on PATH"
        )
    if " " in sys.executable:
        raise PhalanxError(
            f"the Python path {sys.executable!r} has a space, which Open MPI's agent setting "
            "cannot hold; install phalanx in a path without spaces"
        )
    return exe


def mpirun_argv(
    *,
    hosts: list[str],
    procs_per_host: int,
    command: str,
    env: Mapping[str, str],
    forward: Iterable[str],
    loopback: bool,
    one_machine: bool = False,
    image_mpirun: str | None = None,
    python: str | None = None,
    as_root: bool | None = None,
) -> list[str]:
    """The ``mpirun`` command line of one attempt.

    Args:
        hosts: One address per node, node 0 first.
        procs_per_host: Ranks per node.
        command: The user's command (already substituted).
        env: The environment ``mpirun`` will run in (what ``-x`` forwards from).
        forward: Further variable names to forward (the job's own).
        loopback: Every host is this machine: keep Open MPI's traffic on ``lo``
            and off shared memory, whose segment names would collide between
            "hosts" that share one kernel.
        one_machine: Some hosts are one machine (Ray nodes started side by side): keep
            Open MPI off shared memory, whose segments those "hosts" would share.
        image_mpirun: In a container: the image's ``mpirun`` (checked when the image was
            probed), run instead of this machine's.
        python: In a container: the image's Python, which runs the agent and the ranks.
        as_root: Whether ``mpirun`` runs as root (this process's account when ``None``);
            Open MPI then wants to be told it is meant.
    """
    names = sorted(
        {
            *(k for k in env if k in _FORWARD_ALWAYS or k.startswith(_FORWARD_PREFIXES)),
            *(k for k in forward if k in env),
            "MASTER_ADDR",
            "MASTER_PORT",
            "PYTHONUNBUFFERED",
        }
        & set(env)
    )
    names = [n for n in names if n not in _NODE_LOCAL and not n.startswith(_NODE_LOCAL_PREFIXES)]
    python = python or sys.executable
    agent = f"{python} -m phalanx.launch.mpi_agent"
    argv = [
        image_mpirun or mpirun_path(),
        "-np",
        str(len(hosts) * procs_per_host),
        "--host",
        ",".join(f"{h}:{procs_per_host}" for h in hosts),
        "--map-by",
        "slot",
        "--bind-to",
        "none",
        "--mca",
        "plm_rsh_agent",
        agent,
    ]
    if loopback or one_machine:
        argv += ["--mca", "btl", "self,tcp"]
    if loopback:
        argv += ["--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    if (os.geteuid() == 0) if as_root is None else as_root:
        argv.append("--allow-run-as-root")
    for name in names:
        argv += ["-x", name]
    return [*argv, python, "-m", "phalanx.launch.worker", command]
