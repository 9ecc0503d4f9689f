"""The compute contract: what the runner asks of any place a job's nodes run.

:class:`~phalanx.compute.local.LocalCompute` (this machine) and
:class:`~phalanx.kinds.ray.compute.RayCompute` (a Ray cluster) implement it; a target
that grows and shrinks its nodes (an autoscaled cluster) implements it the same
way, its waiting for nodes told through ``allocate``'s ``on_wait``.
:func:`phalanx.compute.targets.open_compute` maps a target to its compute. The
runner (:mod:`phalanx.jobs.runner`) holds a :class:`Compute` and never asks
which kind it is: what differs between kinds is a method or attribute here.

One compute serves one job, attempt after attempt: ``attach`` once, then per
attempt ``allocate`` → ``start_node`` for each node → (``sweep``) → ``release``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from phalanx.compute.plan import JobPlan
    from phalanx.launch.account import JobAccount
    from phalanx.launch.node import NodeLaunch
    from phalanx.workspace.layout import JobPaths


class Node(Protocol):
    """One node's launcher of an attempt, as the runner drives it."""

    node_rank: int
    log_path: Path
    """The node's launcher log in the workspace."""
    signalled: bool
    """Whether phalanx has sent it SIGTERM (a second one is never sent)."""
    lost: str | None
    """Why the node itself was lost (its machine or agent gone), once it was: the
    attempt then ends as an infrastructure failure, whatever its ranks wrote."""

    def poll(self) -> int | None:
        """The launcher's exit code; ``None`` while it runs (or while its node is asked)."""
        ...

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the launcher (which passes it to its ranks)."""
        ...

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the launcher to end; its code, or ``None``."""
        ...

    def flush(self) -> None:
        """Bring every file the node still holds into the workspace (nothing where the
        node writes the workspace itself)."""
        ...


class Compute(Protocol):
    """Where one job's nodes run."""

    name: str
    prepares_on_nodes: bool
    """Whether each node makes the job ready itself (its inputs, its environment) and
    samples its own machine's system metrics, or the supervisor does, on this machine."""
    starts_every_node: bool
    """MPI: whether every node gets a ``start_node`` (``False``: one ``mpirun`` on
    node 0 starts every node's ranks)."""
    low_priority: bool
    """Whether its nodes may be taken away (a low-priority Ray target): a node whose
    machine went under an attempt is then a preemption, not an infrastructure failure."""

    def gone(self, node_rank: int | None = None, wait_s: float = 30.0) -> bool:
        """Whether the machine of the attempt's node ``node_rank`` (of any of its nodes
        when ``None``) is gone, waiting up to ``wait_s`` for the cluster to say so."""
        ...

    def leaving(self, node_ranks: list[int]) -> None:
        """The attempt's nodes ``node_ranks`` heard that their machines are being taken
        away: no later attempt is placed on those machines while they are still up."""
        ...

    def attach(
        self,
        plan: JobPlan,
        paths: JobPaths,
        *,
        account: JobAccount | None = None,
        datastores_file: Path | None = None,
    ) -> None:
        """Take the job the next attempts run.

        Args:
            account: A walled-off job's own account, which its processes run as.
            datastores_file: The job's datastores, credentials resolved, for its ranks.

        Raises:
            PhalanxError: the job's environment cannot be run there.
        """
        ...

    def warm(self) -> None:
        """Get ready to place nodes soon (the job waits for its cluster to grow): nothing
        that may fail or block."""
        ...

    def allocate(
        self,
        nodes: int,
        procs_per_node: int,
        deadline: float | None,
        on_wait: Callable[[str], None],
    ) -> tuple[str, ...]:
        """Reserve an attempt's ``nodes``, waiting for them if they are not there yet
        (``on_wait`` is told why, once); make the job ready on them where they do that.

        Returns:
            Where each node was placed (the hosts the scheduler records for the job),
            or nothing when the scheduler's own grant already says so.

        Raises:
            PhalanxError: canceled, the deadline passed, or a node could not be set up.
        """
        ...

    def release(self) -> None:
        """Give the attempt's nodes back (after its processes were stopped)."""
        ...

    @property
    def master_addr(self) -> str:
        """Node 0's address, where the ranks meet (after ``allocate``)."""
        ...

    def free_ports(self, node: int, count: int) -> list[int]:
        """``count`` ports free on node ``node``."""
        ...

    def node_hosts(self, count: int) -> list[str]:
        """An address per node, for launchers that name every host (TensorFlow)."""
        ...

    def mpi_hosts(self, count: int) -> list[str]:
        """The hosts ``mpirun`` on node 0 is given, node 0 first."""
        ...

    def shares_machine(self, count: int) -> bool:
        """Whether two of the first ``count`` nodes are one machine."""
        ...

    def node_devices(self, granted: tuple[str, ...]) -> tuple[str, ...] | None:
        """The GPUs a node's launcher is restricted to, given the devices the scheduler
        granted it; ``None`` leaves ``CUDA_VISIBLE_DEVICES`` be (the compute assigns
        devices itself, or this machine has none to hide)."""
        ...

    def start_node(self, launch: NodeLaunch, log_path: Path) -> Node:
        """Start node ``launch.node_rank``'s launcher, its output appended to ``log_path``.

        Raises:
            PhalanxError: it could not be started.
        """
        ...

    def dump_stacks(self, job_dir: Path, attempt: int) -> int:
        """Ask the attempt's Python processes on every node for their stacks; how many
        were asked."""
        ...

    def sweep(
        self, job_dir: Path, attempt: int | None, grace_s: float, *, descendants: bool = False
    ) -> int:
        """Stop every process (and container) of the job, or of one attempt, left on
        its nodes and on this machine; how many had to be stopped.

        Args:
            descendants: Also stop this process's unmarked descendants (only the job's
                own supervisor says so).
        """
        ...

    def reap(self, nodes: Sequence[Node]) -> None:
        """Collect this process's finished children, leaving the launchers' status."""
        ...
