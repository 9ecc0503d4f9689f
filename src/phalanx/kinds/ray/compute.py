"""Ray compute: a job's nodes are bundles of a Ray placement group, one agent each.

Ray owns the cluster (its nodes, autoscaler and failure detection); phalanx
asks it, per attempt, for a placement group of ``instance_count`` bundles
(CPUs and GPUs per node from the target; ``STRICT_SPREAD`` so each bundle is a
different Ray node, or ``PACK`` with ``placement: pack``), places a
:class:`~phalanx.compute.agent.NodeAgent` in each and has it start that node's
launcher. Node 0's address is ``MASTER_ADDR``. The job keeps phalanx's own
semantics: every rank's log, the root cause, retries and checkpoints.

A lost node (its agent's actor dies: the raylet or the machine is gone) ends
the attempt as an infrastructure failure, or as a preemption on a low-priority
target (``tier: low_priority``), whose nodes may be taken away; the placement
group is removed, and the next attempt asks for a new one, which Ray places on
the nodes it has then, waiting for a node to come back if it must. A
low-priority target's bundles ask for a sliver of the low-priority node type's
resource (``phalanx_low_priority``), so they land, and its nodes are added,
only there.

Each agent sets the job up on its node before the launcher starts
(:mod:`phalanx.compute.nodejob`): the inputs are downloaded or mounted through
that node's cache, and the job's environment is Ray's ``runtime_env``, built by
Ray on each node. With ``files: local`` (the default) the node keeps the job's
files in a folder of its own and every poll brings their changes back into the
workspace (:mod:`phalanx.compute.ship`): logs stream, and records, heartbeats,
metrics, outputs and checkpoints arrive within a second; each attempt starts
with the workspace's checkpoints. ``files: shared`` is for clusters whose nodes
all see the workspace at the same path.

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
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.archives import pack_folder
from phalanx.compute.nodejob import NodeJob
from phalanx.compute.ship import apply
from phalanx.environments.containers.nodebuild import NodeBuildError
from phalanx.errors import PhalanxError
from phalanx.kinds.ray.settings import RayTarget, check_driver_here
from phalanx.launch import procs
from phalanx.launch.node import NodeLaunch
from phalanx.launch.stacks import dump_stacks
from phalanx.storage.redact import remember

if TYPE_CHECKING:
    from phalanx.compute.base import Node
    from phalanx.compute.plan import JobPlan
    from phalanx.launch.account import JobAccount
    from phalanx.workspace.layout import JobPaths

log = logging.getLogger(__name__)

PLACEMENT_POLL_S = 2.0
POLL_EVERY_S = 1.0
"""Seconds between asking a node's agent whether its launcher still runs."""
CLIENT_TRIES = 3
CALL_TIMEOUT_S = 30.0
POLL_TIMEOUT_S = 300.0
"""A poll's answer may carry a big checkpoint: it gets longer, and a late answer is
asked for again rather than taken for a lost node."""
SETUP_TIMEOUT_S = 900.0
"""Seconds for an agent to start (Ray building the job's environment included) and to
make the inputs ready on its node."""


@dataclass
class RayNode:
    """A node's launcher, run by its agent on a Ray node."""

    node_rank: int
    agent: Any
    log_path: Path
    roots: dict[str, Path] | None = None
    """``files: local``: where the node's shipped files go in the workspace."""
    signalled: bool = False
    lost: str | None = None
    """Why the node was lost (its agent died), once it was."""
    _polled_at: float = -1e9
    _last: int | None = None
    _more: bool = False
    _acked: int = 0
    _resend: list[tuple[str, str]] = field(default_factory=list)

    def _call(self, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        import ray

        if self.lost is not None:
            return None
        try:
            return ray.get(getattr(self.agent, method).remote(*args), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            log.warning("node %d: no answer to %s in %.0f s", self.node_rank, method, timeout)
            return None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            self.lost = f"its Ray actor died ({type(exc).__name__}): the node or its raylet is gone"
            log.warning("node %d lost: %s", self.node_rank, self.lost)
            return None

    def poll(self) -> int | None:
        # The runner polls every 0.1 s; a remote call that often costs the ranks CPU.
        # A rank's failure still shows within a second, through its record.
        now = time.monotonic()
        waiting = self._last is None and not self._more
        if self.lost is None and waiting and now - self._polled_at < POLL_EVERY_S:
            return None
        self._polled_at = now
        code = self._sync()
        if self.lost is not None:
            return -int(signal.SIGKILL)
        self._last = code
        return code

    def _sync(self) -> int | None:
        """Ask the agent; write the files it shipped into the workspace."""
        answer = self._call("poll", self._acked, self._resend, timeout=POLL_TIMEOUT_S)
        if answer is None:
            return None
        code, changes, self._more, seq = answer
        if seq != self._acked:  # not an answer already written
            self._resend = apply(changes, self.roots) if self.roots is not None else []
            self._acked = seq
        return None if code is None else int(code)

    def flush(self) -> None:
        """Bring every change the node still has into the workspace."""
        for _ in range(1000):
            self._sync()
            if not self._more or self.lost is not None:
                return

    def signal(self, sig: signal.Signals) -> None:
        self._call("signal", int(sig))
        self.signalled = self.signalled or sig == signal.SIGTERM

    def wait(self, timeout: float) -> int | None:
        code = self._call("wait", timeout, timeout=timeout + CALL_TIMEOUT_S)
        self.flush()
        return None if code is None else int(code)


class RayCompute:
    """Runs a job's nodes on a Ray cluster.

    Args:
        target: The cluster.
        token: Its auth token, if it uses one.
        cancelled: Polled while waiting for Ray to place the nodes.
    """

    name = "ray"
    prepares_on_nodes = True
    """Inputs are made ready, the environment built and the machine's system metrics
    sampled by each node."""
    starts_every_node = True
    """Every node gets an agent call to start, MPI's too: it ships its files, and runs
    the daemon ``mpirun`` asks for."""

    def __init__(
        self,
        target: RayTarget,
        token: str | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.target = target
        self.low_priority = target.low_priority
        """A low-priority target's nodes may be taken away (its tier)."""
        self._token = token
        self._cancelled = cancelled
        self._pg: Any = None
        self._agents: list[Any] = []
        self._hosts: list[str] = []
        self._connected = False
        self._connect_lock = threading.Lock()
        self._warming: threading.Thread | None = None
        self._job: NodeJob | None = None
        self._paths: JobPaths | None = None
        self._runtime_env: dict[str, Any] | None = None
        self._code: Any = None
        self.on_wait: Callable[[str], None] | None = None
        """Told once, in words, when Ray cannot place an attempt's nodes at once."""
        self.node_ids: list[str] = []
        """The Ray node of each of the attempt's nodes, once placed."""
        self._leaving: set[str] = set()
        """Ray nodes that heard they are being taken away (an eviction notice)."""

    def attach(
        self,
        plan: JobPlan,
        paths: JobPaths,
        *,
        account: JobAccount | None = None,
        datastores_file: Path | None = None,
    ) -> None:
        """The job the next attempts run: what each node needs to set it up. Its
        environment is built on each node: an image (pulled or built there), else Ray's
        ``runtime_env`` from its pip or conda file.

        Raises:
            PhalanxError: the environment's files cannot be read or sent to the nodes.
        """
        from phalanx.environments.containers.nodebuild import for_nodes
        from phalanx.environments.pythonenv import ray_runtime_env
        from phalanx.launch.sysmetrics import sample_interval

        env = plan.environment
        has_image = env is not None and (env.image is not None or env.build is not None)
        self._runtime_env = None
        if env is not None and env.builds and not has_image:
            self._runtime_env = ray_runtime_env(env.pip_file, env.conda_file)
        files = self.target.files
        self._code = pack_folder(paths.code) if files == "local" else None
        self._paths = paths
        self._job = NodeJob(
            job_name=paths.root.name,
            plan=plan,
            files=files,
            image=env.image if env is not None else None,
            image_build=for_nodes(env) if env is not None else None,
            sample_interval=sample_interval(),
            low_priority=self.target.low_priority,
        )

    def warm(self) -> None:
        """Connect now, on a thread, so that nodes soon to come are used at once (the job
        waits for its cluster to grow); a failure is :meth:`allocate`'s to report."""
        if self._connected or self._warming is not None:
            return

        def connect_quietly() -> None:
            with contextlib.suppress(Exception):
                self.connect()

        self._warming = threading.Thread(target=connect_quietly, name="ray-warm", daemon=True)
        self._warming.start()

    def connect(self) -> None:
        with self._connect_lock:
            self._connect()

    def _connect(self) -> None:
        if self._connected:
            return
        check_driver_here(self.target.address)
        if self._token:
            # Before Ray is imported: it reads its authentication settings then.
            remember(self._token)
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN"] = self._token
        import ray

        # Ray Client's proxy sometimes fails to start the server of a new client
        # ("Initialization failure from server", a gRPC fork race): try again.
        tries = CLIENT_TRIES if self.target.address.startswith("ray://") else 1
        # Ray's driver installs a handler that logs a SIGTERM and ends the process at once;
        # the supervisor's own (a cancel or a preemption: stop the nodes, end the job) is
        # put back after it.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
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
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if callable(handler):
                    signal.signal(sig, handler)
        self._connected = True

    def _unreachable(self, exc: Exception) -> PhalanxError:
        return PhalanxError(
            f"cannot connect to the Ray cluster at {self.target.address}: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; check the "
            "address, that the cluster runs, and its token"
        )

    # -- per attempt -------------------------------------------------------

    def allocate(
        self,
        nodes: int,
        procs_per_node: int,
        deadline: float | None,
        on_wait: Callable[[str], None] | None = None,
    ) -> tuple[str, ...]:
        """Reserve ``nodes`` bundles and start an agent in each; waits for Ray to place them.

        Returns:
            The Ray node of each of the attempt's nodes.

        Raises:
            PhalanxError: canceled, or the deadline passed before Ray could place them.
        """
        self.connect()  # first: Ray reads its authentication settings when imported
        self.on_wait = on_wait or self.on_wait
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from phalanx.compute.agent import agent_class

        cpus = self.target.cpus_per_node or float(procs_per_node)
        bundle: dict[str, float] = {"CPU": cpus, **self.target.marker()}
        if self.target.gpus_per_node:
            bundle["GPU"] = self.target.gpus_per_node
        strategy = "STRICT_SPREAD" if self.target.placement == "spread" else "PACK"
        self._pg = placement_group([dict(bundle) for _ in range(nodes)], strategy=strategy)
        waited = 0.0
        while True:
            ready, _ = ray.wait([self._pg.ready()], timeout=PLACEMENT_POLL_S)
            if ready and not self._on_leaving_node(nodes):
                break
            if ready:  # on a machine about to go: place again once it is gone
                remove_placement_group(self._pg)
                time.sleep(PLACEMENT_POLL_S)
                self._pg = placement_group([dict(bundle) for _ in range(nodes)], strategy=strategy)
            waited += PLACEMENT_POLL_S
            if waited == PLACEMENT_POLL_S and self.on_wait is not None:
                self.on_wait(
                    f"waiting for Ray to place {nodes} node(s) of {bundle} ({strategy}): the "
                    "cluster has no room for them now (other work, or nodes still starting)"
                )
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
        from ray.util.placement_group import placement_group_table

        placed = placement_group_table(self._pg).get("bundles_to_node_id") or {}
        self.node_ids = [str(placed.get(i, "")) for i in range(nodes)]
        actor = agent_class(cpus, self.target.gpus_per_node)
        options: dict[str, Any] = {}
        if self._runtime_env:
            options["runtime_env"] = self._runtime_env
        self._agents = [
            actor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=i
                ),
                **options,
            ).remote()
            for i in range(nodes)
        ]
        if self._runtime_env:
            log.info("Ray builds the job's environment on each node (runtime_env)")
        self._hosts = self._gather([a.address.remote() for a in self._agents], deadline)
        log.info("Ray placed %d node(s): %s", nodes, ", ".join(self._hosts))
        if self._job is not None:
            self._setup_nodes(deadline)
        return tuple(self.node_ids)

    def _on_leaving_node(self, nodes: int) -> bool:
        """Whether the placement group just placed has a bundle on a machine that heard
        it is being taken away and is still up."""
        if not self._leaving:
            return False
        from ray.util.placement_group import placement_group_table

        placed = placement_group_table(self._pg).get("bundles_to_node_id") or {}
        try:
            self._leaving &= _alive_nodes()  # gone ones no longer matter
        except Exception:  # the cluster does not answer: the placement stands
            return False
        return any(str(placed.get(i, "")) in self._leaving for i in range(nodes))

    def leaving(self, node_ranks: list[int]) -> None:
        self._leaving.update(self.node_ids[r] for r in node_ranks if r < len(self.node_ids))

    def gone(self, node_rank: int | None = None, wait_s: float = 30.0) -> bool:
        """Whether the machine of the attempt's node ``node_rank`` (any, when ``None``) is
        no longer one of the cluster's live nodes; Ray says so once its health checks have
        failed (15 s by default), so a lost node is looked for that long."""
        ids = self.node_ids if node_rank is None else self.node_ids[node_rank : node_rank + 1]
        deadline = time.monotonic() + wait_s
        while True:
            try:
                alive = _alive_nodes()
            except Exception:  # the cluster does not answer: nothing to tell by
                return False
            if any(node and node not in alive for node in ids):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)

    def _setup_nodes(self, deadline: float | None) -> None:
        """Have every agent set the job up on its node, all at once."""
        import ray

        assert self._job is not None and self._paths is not None
        build = self._job.image_build
        if build is not None and not isinstance(build.files, ray.ObjectRef):
            # Into the object store once: every node (and attempt) reads the same copy.
            build = replace(build, files=ray.put(build.files))
            self._job = replace(self._job, image_build=build)
        job, checkpoints = self._job, None
        if job.files == "local":
            if not isinstance(self._code, ray.ObjectRef):
                self._code = ray.put(self._code)
            job = replace(job, code=self._code)
            if any(self._paths.checkpoints.rglob("*")):
                checkpoints = ray.put(pack_folder(self._paths.checkpoints))
        started = time.monotonic()
        # A node that pulls or builds an image may take long: only the job's own deadline
        # (and a cancel) bounds it then.
        limit = None if job.image is not None or build is not None else SETUP_TIMEOUT_S
        self._gather([a.setup.remote(job, i, checkpoints) for i, a in enumerate(self._agents)],
                     deadline, limit)  # fmt: skip
        log.info("the job is set up on %d node(s) in %.1f s", len(self._agents),
                 time.monotonic() - started)  # fmt: skip

    def _gather(
        self, refs: list[Any], deadline: float | None, limit_s: float | None = SETUP_TIMEOUT_S
    ) -> list[Any]:
        """The agents' answers; cancel, the job's deadline and ``limit_s`` (none when
        ``None``) are honoured while waiting.

        Raises:
            PhalanxError: an agent failed (its node could not build the environment, or
                make an input ready), or the wait was canceled or ran out.
        """
        import ray

        limit = time.monotonic() + (limit_s if limit_s is not None else float("inf"))
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=PLACEMENT_POLL_S)
            now = time.monotonic()
            if pending and (self._cancelled() or now > limit or (deadline and now > deadline)):
                self.release()
                raise PhalanxError("canceled or timed out while the nodes were set up")
        try:
            return list(ray.get(refs))
        except ray.exceptions.RuntimeEnvSetupError as exc:
            self.release()
            raise PhalanxError(
                "environment: Ray could not build the job's environment on a node: "
                f"{_last_line(str(exc))}; fix environment.pip_file/conda_file"
            ) from exc
        except ray.exceptions.RayTaskError as exc:
            self.release()
            cause = getattr(exc, "cause", None)
            message = str(cause) if isinstance(cause, PhalanxError) else _last_line(str(exc))
            if isinstance(cause, NodeBuildError) and self._paths is not None:
                raise PhalanxError(cause.kept_in(self._paths.system_logs)) from exc
            raise PhalanxError(f"setting the job up on a Ray node failed: {message}") from exc
        except ray.exceptions.RayError as exc:
            self.release()
            text = str(exc)
            if "runtime env" in text.lower() or "runtime_env" in text:
                # The actor died of its environment (how Ray reports it varies with timing).
                raise PhalanxError(
                    "environment: Ray could not build the job's environment on a node: "
                    f"{_last_line(text)}; fix environment.pip_file/conda_file"
                ) from exc
            raise PhalanxError(
                f"a Ray node was lost while the job was set up: {_last_line(text)}"
            ) from exc

    @property
    def master_addr(self) -> str:
        return self._hosts[0]

    def node_hosts(self, count: int) -> list[str]:
        return list(self._hosts[:count])

    def shares_machine(self, count: int) -> bool:
        """Whether two of the first ``count`` nodes are one machine (one address)."""
        return len(set(self._hosts[:count])) < count

    def mpi_hosts(self, count: int) -> list[str]:
        """``mpirun``'s hosts: node 0's address (where it runs), then ``phalanx-node-K``,
        which node 0's agent passes to node K's (two Ray nodes may share an address)."""
        from phalanx.compute.agent import MPI_HOST

        return [self._hosts[0], *(f"{MPI_HOST}{k}" for k in range(1, count))]

    def free_ports(self, node: int, count: int) -> list[int]:
        import ray

        return list(ray.get(self._agents[node].free_ports.remote(count), timeout=CALL_TIMEOUT_S))

    def node_devices(self, granted: tuple[str, ...]) -> tuple[str, ...] | None:
        """``None``: Ray assigns each node's GPUs."""
        return None

    def start_node(self, launch: NodeLaunch, log_path: Path) -> RayNode:
        import ray

        agent = self._agents[launch.node_rank]
        mpi_root = launch.distribution == "mpi" and launch.node_rank == 0
        peers = self._agents if mpi_root and len(self._agents) > 1 else None
        try:
            ray.get(agent.start.remote(launch, str(log_path), peers), timeout=120)
        except ray.exceptions.RayError as exc:
            raise PhalanxError(
                f"node {launch.node_rank}'s launcher could not be started on its Ray node: "
                f"{_last_line(str(exc))}"
            ) from exc
        roots = None
        if self._job is not None and self._job.files == "local":
            roots = {"job": self._job.job_dir}
            roots.update({f"out:{n}": p for n, p in self._job.plan.output_dirs.items()})
        return RayNode(launch.node_rank, agent, log_path, roots=roots)

    def dump_stacks(self, job_dir: Path, attempt: int) -> int:
        """Ask the attempt's Python processes on every node for their stacks."""
        import ray

        asked = dump_stacks(str(job_dir), attempt)
        for agent in self._agents:
            with contextlib.suppress(ray.exceptions.RayError):
                asked += int(
                    ray.get(agent.dump_stacks.remote(str(job_dir), attempt), timeout=CALL_TIMEOUT_S)
                )
        return asked

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

    def reap(self, nodes: Sequence[Node]) -> None:
        procs.reap_orphans(frozenset())

    def release(self) -> None:
        """Stop the agents and give the placement group back."""
        import ray
        from ray.util.placement_group import remove_placement_group

        closing = [agent.close.remote() for agent in self._agents]
        with contextlib.suppress(ray.exceptions.RayError):
            ray.wait(closing, num_returns=len(closing), timeout=CALL_TIMEOUT_S)  # unmounts
        for agent in self._agents:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(agent)
        self._agents = []
        if self._pg is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                remove_placement_group(self._pg)
            self._pg = None
        self._hosts = []


def _alive_nodes() -> set[str]:
    import ray

    return {str(n.get("NodeID")) for n in ray.nodes() if n.get("Alive")}


def _last_line(text: str) -> str:
    """The last meaningful line of a Ray error (its traceback is long)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines or ["no detail"])[-1][:300]
