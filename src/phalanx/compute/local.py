"""Local compute: every node of a job is a launcher process on this machine.

``instance_count: N`` starts N torchrun launchers here, each with its own node
rank, so the multi-node code paths (static rendezvous across launchers, rank
numbering, gang stop across nodes) run for real on one machine.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.environments.containers.run import start_launcher
from phalanx.errors import PhalanxError
from phalanx.launch import procs
from phalanx.launch.account import JobAccount, account_of, own_attempt_folder
from phalanx.launch.node import NodeLaunch
from phalanx.launch.ports import free_ports
from phalanx.launch.stacks import dump_stacks
from phalanx.tracking.sidecar import Endpoint, add_to

if TYPE_CHECKING:
    from phalanx.compute.base import Node
    from phalanx.compute.plan import JobPlan
    from phalanx.workspace.layout import JobPaths


@dataclass
class LocalNode:
    """A running node launcher."""

    node_rank: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    signalled: bool = False
    """Whether phalanx has sent it SIGTERM."""
    lost: str | None = None
    """Never set: this machine is where the supervisor runs."""
    endpoint: Endpoint | None = None
    """The MLflow endpoint its ranks log to: started again if it dies, stopped once the
    launcher (and so every rank, its last points sent) has ended."""

    def poll(self) -> int | None:
        code = self.proc.poll()
        if self.endpoint is not None:
            if code is None:
                self.endpoint.ensure()
            else:
                self.endpoint.stop()
        return code

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.signalled = self.signalled or sig == signal.SIGTERM

    def flush(self) -> None:
        """Nothing to bring over: the node writes the job folder itself."""

    def wait(self, timeout: float) -> int | None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()


class LocalCompute:
    """Runs nodes as processes of this machine.

    Args:
        gpus: The GPUs of the part of this machine the job was scheduled on (they decide
            whether a node given none has them hidden); ``None``: every GPU found.
    """

    name = "local"
    master_addr = "127.0.0.1"
    prepares_on_nodes = False
    """Inputs and the environment are made ready by the supervisor, on this machine."""
    starts_every_node = False
    """MPI: one ``mpirun`` on node 0 starts every node's ranks (its daemons run here)."""
    low_priority = False
    """This machine is not taken away."""

    def __init__(self, gpus: tuple[str, ...] | None = None) -> None:
        self.gpus = gpus
        self.account: JobAccount | None = None
        self.datastores_file: Path | None = None
        self._paths: JobPaths | None = None
        self._has_gpus: bool | None = None

    def gone(self, node_rank: int | None = None, wait_s: float = 30.0) -> bool:
        """This machine does not go."""
        return False

    def leaving(self, node_ranks: list[int]) -> None:
        """This machine is never taken away."""

    def attach(
        self,
        plan: JobPlan,
        paths: JobPaths,
        *,
        account: JobAccount | None = None,
        datastores_file: Path | None = None,
    ) -> None:
        """Nothing to send anywhere (every node is this machine, made ready by the
        supervisor); note who the nodes run as and where their datastores are."""
        self.account, self.datastores_file = account, datastores_file
        self._paths = paths

    def dump_stacks(self, job_dir: Path, attempt: int) -> int:
        """Ask the attempt's Python processes for their stacks."""
        return dump_stacks(str(job_dir), attempt)

    def warm(self) -> None:
        """Nothing: this machine is always ready."""

    def allocate(
        self,
        nodes: int,
        procs_per_node: int,
        deadline: float | None,
        on_wait: Callable[[str], None],
    ) -> tuple[str, ...]:
        """Nothing to reserve: this machine is always there, as the scheduler's grant
        says."""
        self._has_gpus = None  # asked again, once per attempt
        return ()

    def node_devices(self, granted: tuple[str, ...]) -> tuple[str, ...] | None:
        """Exactly the granted GPUs; none when none were granted on a machine that has
        some (``None`` on one without: nothing to hide)."""
        if not granted and not self._target_has_gpus():
            return None
        return granted

    def _target_has_gpus(self) -> bool:
        """Whether the target has GPUs (asked once per attempt, before nodes start)."""
        if self._has_gpus is None:
            from phalanx.compute.machine import detect_gpus

            try:
                gpus = self.gpus
                self._has_gpus = bool(gpus if gpus is not None else detect_gpus())
            except PhalanxError:
                self._has_gpus = True  # nvidia-smi fails now: hide what the job was not given
        return self._has_gpus

    def release(self) -> None:
        """Nothing to give back."""

    def free_ports(self, node: int, count: int) -> list[int]:
        """``count`` ports free on this machine (every node's)."""
        return free_ports(count, self.master_addr)

    def node_hosts(self, count: int) -> list[str]:
        """An address per node: ``127.0.0.1``, ``127.0.0.2``, … (all this machine's
        loopback), so MPI and TensorFlow see as many hosts as the job has nodes."""
        if count > 254:
            raise ValueError("local compute gives at most 254 nodes loopback addresses")
        return [f"127.0.0.{k + 1}" for k in range(count)]

    def shares_machine(self, count: int) -> bool:
        """Every node is this machine."""
        return count > 1

    def mpi_hosts(self, count: int) -> list[str]:
        """``mpirun``'s hosts: every node's loopback address."""
        return self.node_hosts(count)

    def start_node(self, launch: NodeLaunch, log_path: Path) -> LocalNode:
        """Start node ``launch.node_rank``'s launcher, its output appended to ``log_path``."""
        launch = replace(launch, account=self.account, datastores_file=self.datastores_file)
        if self.account is not None and self._paths is not None:
            # Its ranks write there.
            own_attempt_folder(self._paths.attempt_dir(launch.attempt), self.account)
        env = launch.env()
        # Every node is on this machine, so gloo's traffic stays on loopback
        # (its default, the interface of the host name, may not exist).
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        endpoint = None
        if launch.tracking is not None:
            endpoint = Endpoint(
                launch.job_dir,
                launch.tracking,
                launch.attempt,
                popen_kwargs=self.account.popen_kwargs() if self.account is not None else None,
                log_path=log_path,
            ).start()
            add_to(env, endpoint, launch.user_env)
        try:
            proc = start_launcher(launch, env, log_path)
        except BaseException:
            if endpoint is not None:
                endpoint.stop()
            raise
        return LocalNode(launch.node_rank, proc, log_path, endpoint=endpoint)

    def sweep(
        self, job_dir: Path, attempt: int | None, grace_s: float, *, descendants: bool = False
    ) -> int:
        """Stop every process and container of the job (or of one attempt) still on
        this machine.

        Args:
            descendants: Also stop this process's unmarked descendants; only
                the job's own supervisor, the subreaper of the job, says so.

        Returns:
            How many processes and containers had to be stopped.
        """
        from phalanx.environments.containers.sweep import remove

        # A walled-off job's account: every process running as it is the job's.
        account = account_of(job_dir)
        uid = account.uid if account is not None else None
        # Containers first, gracefully (their engine's helpers are among the processes);
        # then the processes; then any container a killed helper left behind.
        stopped = remove(job_dir, attempt, grace_s)
        stopped += procs.sweep(str(job_dir), attempt, grace_s, descendants=descendants, uid=uid)
        return stopped + remove(job_dir, attempt, 0.0)

    def reap(self, nodes: Sequence[Node]) -> None:
        """Collect orphans that re-parented to this process, leaving the launchers' status."""
        procs.reap_orphans(frozenset(n.proc.pid for n in nodes if isinstance(n, LocalNode)))
