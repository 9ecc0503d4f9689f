"""What an elastic cluster's queue wants of its autoscaler, and what its jobs are told.

An elastic target (``max_nodes``: a Ray cluster's) grows by its cluster's own
autoscaler, which phalanx asks for whole worker nodes of the target's node shape
(the Ray kind's :mod:`phalanx.kinds.ray.probe` sends the request). The scheduler still gives a
job only nodes that exist, so a job never holds what it cannot use, and the
queue's order, backfill and preemption stay its own. Within one pass
(:func:`phalanx.scheduler.policy.decide`):

- A job larger than the cluster can ever be (``max_nodes`` machines of the
  node shape) cannot start, and is refused at ``job create``.
- A job that does not fit today's nodes but fits what the cluster may still
  add, in queue order, *claims* new nodes: it waits for them ("waiting for 2
  nodes: cluster 0 → 2 of max 4, requested 40 s ago"), takes no reservation
  and preempts nobody. The first job that would take the cluster past
  ``max_nodes`` waits as on a fixed cluster (reservation, backfill, preemption).
- The nodes wanted are those the running jobs hold plus those the waiting
  jobs claimed, never fewer than ``min_nodes``; ``max_nodes`` while a job
  waits that only the whole cluster can take.
- A job that waited its whole ``limits.timeout`` for nodes fails, with the
  autoscaler's reason when it gave one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from phalanx.scheduler.model import (
    Capacity,
    Growth,
    Host,
    NodeGrant,
    QueuedJob,
    Request,
    RunningJob,
)

_WAITS_FOR_NODES = re.compile(r"waiting for \d+ nodes?: cluster ")


def waits_for_nodes(reason: str) -> bool:
    """Whether a queued job's reason says it waits for its cluster to grow."""
    return _WAITS_FOR_NODES.match(reason) is not None


def ceiling(capacity: Capacity) -> Capacity:
    """What the target has at its largest: ``max_nodes`` machines of the node shape (its
    hosts as they are, for a cluster that does not grow)."""
    growth = capacity.growth
    if growth is None:
        return capacity
    node = growth.node
    hosts = tuple(
        Host(f"{capacity.target}+{i}", node.gpus, node.cpus, node.memory)
        for i in range(growth.max_nodes)
    )
    return Capacity(capacity.target, hosts, capacity.spread)


def nodes_for(request: Request, node: Host, spread: bool) -> int:
    """Machines of shape ``node`` that ``request`` needs: one a node when spread, else
    as few as hold its nodes whole (a node's bundle is never split across machines)."""
    if spread:
        return request.nodes
    fits = []
    if request.cpus > 0:
        fits.append(int(node.cpus / request.cpus + 1e-9))
    if request.gpus > 0:
        fits.append(len(node.gpus) // request.gpus)
    per_machine = max(1, min(fits)) if fits else request.nodes
    return math.ceil(request.nodes / per_machine)


def is_node(host: Host, node: Host) -> bool:
    """Whether ``host`` is a machine of the target's node shape (one its autoscaler adds;
    a head with CPUs of its own, or another node type, is not)."""
    return abs(host.cpus - node.cpus) < 1e-9 and len(host.gpus) == len(node.gpus)


class Grower:
    """One pass's account of an elastic cluster's nodes: those held, those claimed."""

    def __init__(self, capacity: Capacity) -> None:
        assert capacity.growth is not None
        self.growth: Growth = capacity.growth
        self.spread = capacity.spread
        self.claimed = 0
        """New nodes the waiting jobs claimed so far, in queue order."""

    def claim(self, job: QueuedJob, holding: Sequence[RunningJob]) -> int | None:
        """Claim the new nodes ``job`` needs if the cluster may still add them; how many
        it waits for (``None``: it would take the cluster past ``max_nodes``)."""
        need = nodes_for(job.request, self.growth.node, self.spread)
        total = _held(holding) + self.claimed + need
        if total > self.growth.max_nodes:
            return None
        self.claimed += need
        return max(1, min(need, total - self.growth.live))

    def leaves_room(self, holding: Sequence[RunningJob], grant: Sequence[NodeGrant]) -> bool:
        """Whether a job may take ``grant`` of today's nodes: the cluster can still grow
        enough for the jobs ahead that claimed new nodes."""
        if not self.claimed:
            return True
        hosts = {g.host for job in holding for g in job.nodes} | {g.host for g in grant}
        return len(hosts) + self.claimed <= self.growth.max_nodes

    def behind(self, job: QueuedJob, ahead: int) -> str:
        """Why a job that fits today's nodes waits: jobs ahead wait for the cluster to grow."""
        return (
            f"needs {job.request.describe()}; {ahead} job{'s' if ahead != 1 else ''} ahead "
            f"wait{'s' if ahead == 1 else ''} for the cluster to grow, to at most "
            f"{self.growth.max_nodes} nodes"
        )

    def wanted(self, holding: Sequence[RunningJob], *, reserved: bool = False) -> int:
        """The worker nodes to ask the autoscaler for after the pass; all of them when a
        job waits that only the whole cluster can take (``reserved``: it held the future
        for itself, as on a fixed cluster), so none of its nodes goes while it waits."""
        total = self.growth.max_nodes if reserved else _held(holding) + self.claimed
        return max(self.growth.min_nodes, min(total, self.growth.max_nodes))

    def reason(self, waits_for: int, wanted: int, now: float) -> str:
        """``waiting for 2 nodes: cluster 0 → 2 of max 4, requested 40 s ago``."""
        g = self.growth
        asked = g.requested if g.requested is not None else wanted
        text = (
            f"waiting for {waits_for} node{'s' if waits_for != 1 else ''}: cluster {g.live} → "
            f"{max(asked, wanted)} of max {g.max_nodes}"
        )
        if g.requested is not None and g.requested_at is not None and g.requested >= wanted:
            text += f", requested {max(0, round(now - g.requested_at))} s ago"
        else:
            text += ", asking the cluster's autoscaler"
        if g.trouble:
            text += f"; Ray's autoscaler: {g.trouble}"
        return text

    def expired(self, job: QueuedJob, now: float) -> str | None:
        """Why ``job`` fails: it waited its whole ``limits.timeout`` for nodes (counted
        from when it began to wait for them: ``waiting_since``, which the scheduler keeps)."""
        since = job.waiting_since
        if job.timeout is None or since is None or now - since < job.timeout:
            return None
        why = f"; Ray's autoscaler: {self.growth.trouble}" if self.growth.trouble else ""
        return (
            f"waited its whole limits.timeout ({job.timeout:g} s) for nodes the cluster's "
            f"autoscaler did not add (cluster {self.growth.live} of max "
            f"{self.growth.max_nodes}){why}"
        )


def _held(holding: Sequence[RunningJob]) -> int:
    """Machines the holding jobs are on."""
    return len({grant.host for job in holding for grant in job.nodes})
