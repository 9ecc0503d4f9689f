"""A Ray target's nodes as the scheduler counts them: the machines of its tier in a
probe's reading, the shape of the machines its autoscaler adds, and what it may grow to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from phalanx.kinds.ray.settings import RayTarget
from phalanx.scheduler import ledger
from phalanx.scheduler.model import Capacity, Growth, Host, QueuedJob
from phalanx.scheduler.scaling import ceiling, is_node
from phalanx.workspace import Workspace

_Reading = TypeVar("_Reading", bound=Mapping[str, Any])


def node_shape(target: RayTarget) -> Host:
    """One machine of an elastic target's node type."""
    assert target.node_cpus is not None
    return Host("node", tuple(str(i) for i in range(int(target.node_gpus))), target.node_cpus)


def largest(target: RayTarget) -> Capacity:
    """An elastic target at its largest: ``max_nodes`` machines of its node shape."""
    assert target.max_nodes is not None
    growth = Growth(target.max_nodes, target.min_nodes, node_shape(target), live=0)
    spread = target.placement == "spread"
    return ceiling(Capacity(target.name, (), spread, growth))


def of_tier(reading: Iterable[_Reading], target: RayTarget) -> list[_Reading]:
    """The machines of a probe's reading that are the target's: a low-priority target's
    carry the low-priority resource, and a dedicated target's do not (no dedicated job is
    ever given a node that may be taken away)."""
    return [h for h in reading if bool(h.get("low_priority")) == target.low_priority]


def count_nodes(reading: Iterable[Mapping[str, Any]], target: RayTarget) -> int:
    """The machines of a probe's reading (``cpus``, ``gpus`` counts) that are of an
    elastic target's node shape and tier."""
    node = node_shape(target)
    return sum(
        1
        for h in of_tier(reading, target)
        if is_node(Host("", tuple(map(str, range(int(h["gpus"])))), float(h["cpus"])), node)
    )


def growth(ws: Workspace, target: RayTarget, hosts: tuple[Host, ...]) -> Growth:
    """What an elastic target's cluster may still add, and what its autoscaler said."""
    assert target.max_nodes is not None
    node = node_shape(target)
    scaling = ledger.scaling_of(ws, target.name)
    report = scaling.report if scaling is not None else {}
    return Growth(
        max_nodes=target.max_nodes,
        min_nodes=target.min_nodes,
        node=node,
        live=sum(1 for h in hosts if is_node(h, node)),
        requested=scaling.requested if scaling is not None else None,
        requested_at=scaling.requested_at if scaling is not None else None,
        trouble=report.get("trouble"),
    )


def unbounded(target: str, queued: list[QueuedJob]) -> Capacity:
    """A capacity every queued job fits at once: a cluster whose nodes are not read yet
    queues by itself what it cannot place."""
    nodes = sum(j.request.nodes for j in queued)
    gpus = max((j.request.gpus for j in queued), default=0)
    cpus = max((j.request.cpus for j in queued), default=0.0)
    memory = max((j.request.memory for j in queued), default=0)
    hosts = tuple(
        Host(f"{target}#{i}", tuple(str(g) for g in range(gpus)), cpus, memory)
        for i in range(nodes)
    )
    return Capacity(target, hosts, spread=True)
