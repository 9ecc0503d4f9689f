"""What the scheduler reasons about: machines, requests, grants, jobs in the queue.

Plain values with no I/O, so a decision can be made (and tested) without a
database or a process. Resources are counted per *host* (a machine of the
target); a job's request is per *node* (``resources.instance_count`` nodes, each
on one host).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Azure ML's names, lowest first; a job without them is medium / standard.
PRIORITIES = {"low": 1, "medium": 2, "high": 3}
TIERS = {"spot": 1, "basic": 2, "standard": 3, "premium": 4}
DEFAULT_PRIORITY = PRIORITIES["medium"]
DEFAULT_TIER = TIERS["standard"]
DEFAULT_GRACE_S = 30.0
"""``retry.preemption_grace`` when a job's spec does not say."""
LEAVE_MARGIN_S = 10.0
"""After a preempted job's grace, for its supervisor to see it end and give its devices back."""


def leaves_by(now: float, grace: float) -> float:
    """When a job preempted at ``now`` gives its devices back at the latest."""
    return now + grace + LEAVE_MARGIN_S


@dataclass(frozen=True)
class Host:
    """One machine of a compute target and what it has for jobs."""

    name: str
    gpus: tuple[str, ...] = ()
    """Device ids (``CUDA_VISIBLE_DEVICES`` values) jobs may be given."""
    cpus: float = 0.0
    """CPU slots (cores, or what the target was told)."""
    memory: int = 0
    """Bytes of memory jobs may ask for."""
    launchers: int | None = None
    """Nodes (launchers) it runs at once, every job's together; ``None``: no count of
    its own (a Ray node, whose bundles Ray counts). See :func:`launchers_for`."""


def launchers_for(cpus: float) -> int:
    """The launchers a machine of ``cpus`` CPU slots runs at once: one per slot, at least one.

    A node's launcher (torchrun, or the daemon MPI starts) is a process of its own that
    starts, watches and stops the node's ranks; more of them than the machine has cores
    only queue for the same cores. The slots are what the target declares (``--cpus``),
    else the machine's cores, so the count never exceeds what the target declares.
    """
    return max(1, int(cpus + 1e-9))


@dataclass(frozen=True)
class Growth:
    """How far a cluster may grow: an elastic Ray target, whose autoscaler adds worker
    nodes of one shape for the queue (:mod:`phalanx.scheduler.scaling`)."""

    max_nodes: int
    min_nodes: int
    node: Host
    """One machine of the node type the autoscaler adds (its name is unused)."""
    live: int
    """Worker nodes up now."""
    requested: int | None = None
    """Worker nodes last asked of the autoscaler; ``None`` before the first request."""
    requested_at: float | None = None
    """When that request was first made (``time.time()``)."""
    trouble: str | None = None
    """Why the autoscaler's last scale-up did not come, in its words; ``None`` if none."""


@dataclass(frozen=True)
class Machine:
    """A machine that several targets carve from (every local target: this machine).

    Its CPU slots, memory and launchers belong to the machine, not to one target: a
    target's :class:`Host` is only the most its own jobs may hold, and every target's
    jobs together never hold more than the machine has. (Its GPUs need no pool: each
    belongs to one target.)
    """

    host: str
    """The host name the target's allocations on it carry."""
    cpus: float
    memory: int
    launchers: int
    elsewhere: tuple[RunningJob, ...] = ()
    """Jobs of the machine's other targets and what they hold of it now."""
    waiting: tuple[QueuedJob, ...] = ()
    """The first job in line of each of the machine's other targets that its own
    target's share has room for now: only the machine keeps it out, or may. The first
    of them in the common queue order is held for as a target's own first blocked job
    is, so that no target's stream of small jobs keeps it waiting for good."""


@dataclass(frozen=True)
class Capacity:
    """Everything a compute target has, host by host."""

    target: str
    hosts: tuple[Host, ...]
    spread: bool = False
    """Nodes of one job go to different hosts (Ray's STRICT_SPREAD). Local
    compute has one host, which every node of a job shares."""
    growth: Growth | None = None
    """An elastic cluster: what its autoscaler may add; ``None``: the hosts are all."""
    machine: Machine | None = None
    """The machine its host shares with other targets (a local target); ``None``: its
    hosts are its own."""

    @property
    def gpus(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)

    @property
    def cpus(self) -> float:
        return sum(h.cpus for h in self.hosts)

    @property
    def memory(self) -> int:
        return sum(h.memory for h in self.hosts)

    @property
    def launchers(self) -> int | None:
        """Nodes it runs at once, ``None`` when some host does not count them."""
        counts = [h.launchers for h in self.hosts]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


@dataclass(frozen=True)
class Request:
    """What a job needs: ``nodes`` nodes of ``gpus`` devices, ``cpus`` slots and
    ``memory`` bytes each."""

    nodes: int
    gpus: int = 0
    cpus: float = 0.0
    memory: int = 0

    def describe(self) -> str:
        """``4 GPUs on 1 node`` / ``2 CPUs + 8 GiB on each of 2 nodes``."""
        parts = []
        if self.gpus:
            parts.append(_count(self.gpus, "GPU"))
        if self.cpus or not self.gpus:
            parts.append(_count(self.cpus, "CPU"))
        if self.memory:
            parts.append(gib(self.memory))
        what = " + ".join(parts)
        return f"{what} on 1 node" if self.nodes == 1 else f"{what} on each of {self.nodes} nodes"


def gib(n: int) -> str:
    """Bytes as ``8 GiB`` (``0.5 GiB``, ``9,313 GiB``)."""
    value = n / 2**30
    return f"{value:.3g} GiB" if value < 1000 else f"{value:,.0f} GiB"


def _count(n: float, unit: str) -> str:
    number = f"{n:g}"
    return f"{number} {unit}" if n == 1 else f"{number} {unit}s"


@dataclass(frozen=True)
class NodeGrant:
    """What one node of a job was given: a host, its devices, its CPU slots."""

    host: str
    gpus: tuple[str, ...] = ()
    cpus: float = 0.0
    memory: int = 0


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for its request to fit."""

    name: str
    request: Request
    submitted: float
    priority: int = DEFAULT_PRIORITY
    tier: int = DEFAULT_TIER
    timeout: float | None = None
    """``limits.timeout`` still left, in seconds: the backfill estimate of its run time."""
    waiting_since: float | None = None
    """On an elastic cluster: when it began to wait for nodes (``None``: not yet seen)."""
    target: str | None = None
    """The compute target whose queue it is in (``None`` where the caller did not say)."""

    @property
    def key(self) -> tuple[float, float, float, str]:
        """Queue order: priority, then tier (both highest first), then submission."""
        return (-self.priority, -self.tier, self.submitted, self.name)

    @property
    def preemptible(self) -> bool:
        return preemptible(self.priority, self.tier)


@dataclass(frozen=True)
class RunningJob:
    """A job that holds devices: running, preparing, or leaving after a preemption."""

    name: str
    nodes: tuple[NodeGrant, ...]
    priority: int = DEFAULT_PRIORITY
    tier: int = DEFAULT_TIER
    ends_by: float = math.inf
    """When it ends at the latest (its ``limits.timeout``); infinity without one."""
    releasing: bool = False
    """Asked to leave (preempted for another job); ``ends_by`` is then its grace's end."""
    started: float = 0.0
    """When it was given its devices (the latest started is preempted first: it lost least)."""
    target: str | None = None
    """The compute target it runs on (``None`` where the caller did not say)."""

    @property
    def preemptible(self) -> bool:
        return preemptible(self.priority, self.tier)


def preemptible(priority: int, tier: int) -> bool:
    """Spot-tier and low-priority jobs may be preempted for a job of higher priority."""
    return tier <= TIERS["spot"] or priority <= PRIORITIES["low"]


@dataclass
class Decision:
    """One pass of the scheduler over a target's queue."""

    admit: dict[str, tuple[NodeGrant, ...]] = field(default_factory=dict)
    """Jobs that start now, with what each node gets."""
    preempt: dict[str, str] = field(default_factory=dict)
    """Running jobs to preempt → the queued job they make room for."""
    leave_by: dict[str, float] = field(default_factory=dict)
    """Running jobs to preempt → when their devices are back at the latest, the end of
    their grace (:func:`leaves_by`); one not here is given :data:`DEFAULT_GRACE_S`."""
    waiting: dict[str, str] = field(default_factory=dict)
    """Queued jobs that stay queued → why, in words."""
    position: dict[str, int] = field(default_factory=dict)
    """Queued jobs → their place in the queue (1 = next)."""
    starts: dict[str, float | None] = field(default_factory=dict)
    """Queued jobs that stay queued → when they should start (Unix seconds), ``None``
    where time limits cannot tell (:mod:`phalanx.scheduler.estimate`)."""
    wanted: int | None = None
    """An elastic cluster: the worker nodes the running and waiting jobs need, to be
    asked of its autoscaler; ``None`` for a cluster that does not grow."""
    expired: dict[str, str] = field(default_factory=dict)
    """Queued jobs that waited their whole ``limits.timeout`` for nodes → why they fail."""
