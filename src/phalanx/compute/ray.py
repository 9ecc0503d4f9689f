"""Ray compute: a job's nodes are bundles of a Ray placement group, one agent each.

Ray owns the cluster (its nodes, autoscaler and failure detection); phalanx
asks it, per attempt, for a placement group of ``instance_count`` bundles
(CPUs and GPUs per node from the target; ``STRICT_SPREAD`` so each bundle is a
different Ray node, or ``PACK`` with ``placement: pack``), places a
:class:`~phalanx.compute.agent.NodeAgent` in each and has it start that node's
launcher. Node 0's address is ``MASTER_ADDR``. The job keeps phalanx's own
semantics: every rank's log, the root cause, retries and checkpoints.

A lost node (its agent's actor dies: the raylet or the machine is gone) ends
the attempt as an infrastructure failure; the placement group is removed, and
the next attempt asks for a new one, which Ray places on the nodes it has
then, waiting for a node to come back if it must.

For now the job's folder (``PHALANX_HOME``) must be visible on every node at
the same path (one machine, or a shared file system): ranks write their logs,
records and checkpoints there.

Authentication: with Ray's token authentication (``RAY_AUTH_MODE=token``,
Ray ≥ 2.52) the target's token is given to Ray through ``RAY_AUTH_TOKEN`` in
the supervisor only. Never expose a cluster's dashboard, job or client ports
unauthenticated: anyone who reaches them runs code on every node
(CVE-2023-48022).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.compute.targets import RayTarget
from phalanx.errors import PhalanxError
from phalanx.launch import procs
from phalanx.launch.node import NodeLaunch
from phalanx.storage.redact import remember

log = logging.getLogger(__name__)

PLACEMENT_POLL_S = 2.0
POLL_EVERY_S = 1.0
CLIENT_TRIES = 3
"""Seconds between asking a node's agent whether its launcher still runs."""
CALL_TIMEOUT_S = 30.0


@dataclass
class RayNode:
    """A node's launcher, run by its agent on a Ray node."""

    node_rank: int
    agent: Any
    log_path: Path
    signalled: bool = False
    lost: str | None = None
    """Why the node was lost (its agent died), once it was."""
    _polled_at: float = -1e9
    _last: int | None = None

    def _call(self, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        import ray

        if self.lost is not None:
            return None
        try:
            return ray.get(getattr(self.agent, method).remote(*args), timeout=timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            self.lost = f"its Ray actor died ({type(exc).__name__}): the node or its raylet is gone"
            log.warning("node %d lost: %s", self.node_rank, self.lost)
            return None

    def poll(self) -> int | None:
        # The runner polls every 0.1 s; a remote call that often costs the ranks CPU.
        # A rank's failure still shows at once, through its record in the job folder.
        now = time.monotonic()
        if self.lost is None and self._last is None and now - self._polled_at < POLL_EVERY_S:
            return None
        self._polled_at = now
        code = self._call("poll")
        if self.lost is not None:
            return -int(signal.SIGKILL)
        self._last = None if code is None else int(code)
        return self._last

    def signal(self, sig: signal.Signals) -> None:
        self._call("signal", int(sig))
        self.signalled = self.signalled or sig == signal.SIGTERM

    def wait(self, timeout: float) -> int | None:
        code = self._call("wait", timeout, timeout=timeout + CALL_TIMEOUT_S)
        return None if code is None else int(code)


class RayCompute:
    """Runs a job's nodes on a Ray cluster.

    Args:
        target: The cluster.
        token: Its auth token, if it uses one.
        cancelled: Polled while waiting for Ray to place the nodes.
    """

    name = "ray"

    def __init__(
        self,
        target: RayTarget,
        token: str | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.target = target
        self._token = token
        self._cancelled = cancelled
        self._pg: Any = None
        self._agents: list[Any] = []
        self._hosts: list[str] = []
        self._connected = False

    def connect(self) -> None:
        if self._connected:
            return
        if self._token:
            # Before Ray is imported: it reads its authentication settings then.
            remember(self._token)
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN"] = self._token
        import ray

        # Ray Client's proxy sometimes fails to start the server of a new client
        # ("Initialization failure from server", a gRPC fork race): try again.
        tries = CLIENT_TRIES if self.target.address.startswith("ray://") else 1
        for attempt in range(1, tries + 1):
            try:
                ray.init(
                    address=self.target.address,
                    namespace="phalanx",
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                )
                break
            except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError…
                if attempt < tries and "Initialization failure" in str(exc):
                    log.warning("Ray Client could not start a session (%s); retrying", exc)
                    with contextlib.suppress(Exception):
                        ray.shutdown()
                    time.sleep(2.0 * attempt)
                    continue
                raise self._unreachable(exc) from exc
        self._connected = True

    def _unreachable(self, exc: Exception) -> PhalanxError:
        return PhalanxError(
            f"cannot connect to the Ray cluster at {self.target.address}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; check the "
            "address, that the cluster runs, and its token"
        )

    # -- per attempt -------------------------------------------------------

    def allocate(self, nodes: int, procs_per_node: int, deadline: float | None) -> None:
        """Reserve ``nodes`` bundles and start an agent in each; waits for Ray to place them.

        Raises:
            PhalanxError: canceled, or the deadline passed before Ray could place them.
        """
        self.connect()  # first: Ray reads its authentication settings when imported
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from phalanx.compute.agent import agent_class

        cpus = self.target.cpus_per_node or float(procs_per_node)
        bundle: dict[str, float] = {"CPU": cpus}
        if self.target.gpus_per_node:
            bundle["GPU"] = self.target.gpus_per_node
        strategy = "STRICT_SPREAD" if self.target.placement == "spread" else "PACK"
        self._pg = placement_group([dict(bundle) for _ in range(nodes)], strategy=strategy)
        waited = 0.0
        while True:
            ready, _ = ray.wait([self._pg.ready()], timeout=PLACEMENT_POLL_S)
            if ready:
                break
            waited += PLACEMENT_POLL_S
            if waited % 30 < PLACEMENT_POLL_S:
                log.info(
                    "waiting for Ray to place %d node(s) of %s (%s) for %.0f s",
                    nodes, bundle, strategy, waited,
                )  # fmt: skip
            if self._cancelled() or (deadline is not None and time.monotonic() > deadline):
                self.release()
                raise PhalanxError(
                    f"Ray could not place {nodes} node(s) of {bundle} ({strategy}) on "
                    f"{self.target.address} in {waited:.0f} s; the cluster lacks free nodes"
                )
        actor = agent_class(cpus, self.target.gpus_per_node)
        self._agents = [
            actor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=i
                )
            ).remote()
            for i in range(nodes)
        ]
        self._hosts = ray.get([a.address.remote() for a in self._agents], timeout=120)
        log.info("Ray placed %d node(s): %s", nodes, ", ".join(self._hosts))

    @property
    def master_addr(self) -> str:
        return self._hosts[0]

    def node_hosts(self, count: int) -> list[str]:
        return list(self._hosts[:count])

    def free_ports(self, node: int, count: int) -> list[int]:
        import ray

        return list(ray.get(self._agents[node].free_ports.remote(count), timeout=CALL_TIMEOUT_S))

    def start_node(self, launch: NodeLaunch, log_path: Path) -> RayNode:
        import ray

        agent = self._agents[launch.node_rank]
        ray.get(agent.start.remote(launch, str(log_path)), timeout=120)
        return RayNode(launch.node_rank, agent, log_path)

    def sweep(
        self, job_dir: Path, attempt: int | None, grace_s: float, *, descendants: bool = False
    ) -> int:
        """Stop the job's processes on every node still reachable, and on this machine."""
        import ray

        stopped = procs.sweep(str(job_dir), attempt, grace_s, descendants=descendants)
        for agent in self._agents:
            try:
                stopped += int(
                    ray.get(
                        agent.sweep.remote(str(job_dir), attempt, grace_s),
                        timeout=grace_s + CALL_TIMEOUT_S,
                    )
                )
            except ray.exceptions.RayError:
                continue  # a lost node: nothing to reach there
        return stopped

    def reap(self, nodes: Sequence[object]) -> None:
        procs.reap_orphans(frozenset())

    def release(self) -> None:
        """Stop the agents and give the placement group back."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for agent in self._agents:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(agent)
        self._agents = []
        if self._pg is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                remove_placement_group(self._pg)
            self._pg = None
        self._hosts = []
