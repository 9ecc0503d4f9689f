"""The node agent: a Ray actor, one per node of an attempt, that runs that node's launcher.

:class:`~phalanx.compute.ray.RayCompute` places one agent in each bundle of the
attempt's placement group. The agent starts the same per-node launcher local
compute does (torchrun, or ``mpirun`` on node 0) from a
:class:`~phalanx.launch.node.NodeLaunch`, answers polls, forwards signals and
stops the job's processes on its node. The launcher gets ``PR_SET_PDEATHSIG``:
when the agent's worker process dies with its node's raylet, the launcher is
told to stop (SIGTERM, passed on to the ranks) rather than left running.

This module is imported inside Ray's worker processes; it imports ``ray`` only
through the decorator applied by :func:`agent_class`.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

from phalanx.launch import procs
from phalanx.launch.node import NodeLaunch
from phalanx.launch.ports import free_ports


class NodeAgent:
    """What runs on one node (as a Ray actor; plain methods, so it is testable without Ray)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def address(self) -> str:
        """This node's address as Ray knows it (others reach its ranks there)."""
        import ray

        return str(ray.util.get_node_ip_address())

    def hostname(self) -> str:
        return socket.gethostname()

    def free_ports(self, count: int) -> list[int]:
        return free_ports(count, "0.0.0.0")

    def start(self, launch: NodeLaunch, log_path: str) -> int:
        """Start the node's launcher; returns its pid on this node."""
        import ray

        env = launch.env()
        env["PHALANX_RAY_NODE_ID"] = ray.get_runtime_context().get_node_id()
        self._proc = launch.start(env, Path(log_path), end_with_parent=True)
        return self._proc.pid

    def poll(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def signal(self, signum: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def sweep(self, job_dir: str, attempt: int | None, grace_s: float) -> int:
        """Stop every process of the job (or attempt) left on this node."""
        return procs.sweep(job_dir, attempt, grace_s)

    def pid(self) -> int:
        return os.getpid()


def agent_class(num_cpus: float, num_gpus: float) -> Any:
    """:class:`NodeAgent` as a Ray actor class reserving a node's bundle."""
    import ray

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(NodeAgent)
