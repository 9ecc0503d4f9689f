"""Where a request fits: free devices and CPU slots per host, and placing nodes on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from phalanx.scheduler.model import Capacity, NodeGrant, Request, gib

_EPS = 1e-9


@dataclass
class Free:
    """What is free on each host of a target, in host order."""

    gpus: dict[str, list[str]]
    cpus: dict[str, float]
    memory: dict[str, int]

    @classmethod
    def of(cls, capacity: Capacity, held: Iterable[Iterable[NodeGrant]] = ()) -> Free:
        """The target's capacity less what ``held`` grants hold (unknown hosts ignored)."""
        free = cls(
            gpus={h.name: list(h.gpus) for h in capacity.hosts},
            cpus={h.name: float(h.cpus) for h in capacity.hosts},
            memory={h.name: h.memory for h in capacity.hosts},
        )
        for nodes in held:
            free.take(nodes)
        return free

    def copy(self) -> Free:
        return Free({h: list(g) for h, g in self.gpus.items()}, dict(self.cpus), dict(self.memory))

    def take(self, nodes: Iterable[NodeGrant]) -> None:
        for node in nodes:
            if node.host not in self.cpus:
                continue  # a host the target no longer has (a lost Ray node)
            held = set(node.gpus)
            self.gpus[node.host] = [g for g in self.gpus[node.host] if g not in held]
            self.cpus[node.host] -= node.cpus
            self.memory[node.host] -= node.memory

    def give(self, nodes: Iterable[NodeGrant], capacity: Capacity) -> None:
        """Return ``nodes``' devices and slots (in the host's own device order)."""
        order = {h.name: h.gpus for h in capacity.hosts}
        for node in nodes:
            if node.host not in self.cpus:
                continue
            back = set(self.gpus[node.host]) | set(node.gpus)
            self.gpus[node.host] = [g for g in order[node.host] if g in back]
            self.cpus[node.host] += node.cpus
            self.memory[node.host] += node.memory

    def gpu_count(self) -> int:
        return sum(len(g) for g in self.gpus.values())

    def cpu_count(self) -> float:
        return sum(max(0.0, c) for c in self.cpus.values())

    def place(self, request: Request, spread: bool) -> tuple[NodeGrant, ...] | None:
        """Nodes for ``request`` on what is free, or ``None`` when it does not fit.

        Every node of a request asks for the same, so choosing for each node the
        host that fits with the least left over (best fit) finds a placement
        whenever one exists, with ``spread`` (one node per host) or without.
        Devices are taken lowest first. Nothing is taken from ``self``.
        """
        gpus = {h: list(g) for h, g in self.gpus.items()}
        cpus = dict(self.cpus)
        memory = dict(self.memory)
        used: set[str] = set()
        nodes: list[NodeGrant] = []
        for _ in range(request.nodes):
            fits = [
                h
                for h in cpus
                if len(gpus[h]) >= request.gpus
                and cpus[h] + _EPS >= request.cpus
                and memory[h] >= request.memory
                and not (spread and h in used)
            ]
            if not fits:
                return None
            host = min(fits, key=lambda h: (len(gpus[h]), cpus[h]))
            taken = tuple(gpus[host][: request.gpus])
            gpus[host] = gpus[host][request.gpus :]
            cpus[host] -= request.cpus
            memory[host] -= request.memory
            used.add(host)
            nodes.append(NodeGrant(host=host, gpus=taken, cpus=request.cpus, memory=request.memory))
        return tuple(nodes)


def never_fits(request: Request, capacity: Capacity) -> str | None:
    """Why ``request`` cannot fit ``capacity`` even with nothing else running, or ``None``."""
    if Free.of(capacity).place(request, capacity.spread) is not None:
        return None
    name = capacity.target
    hosts = capacity.hosts
    most_gpus = max((len(h.gpus) for h in hosts), default=0)
    most_cpus = max((h.cpus for h in hosts), default=0.0)
    most_memory = max((h.memory for h in hosts), default=0)
    if request.gpus > most_gpus:
        where = "the largest machine of " if len(hosts) > 1 else ""
        return f"asks for {request.gpus} GPUs per node but {where}compute {name!r} has {most_gpus}"
    if request.cpus > most_cpus + _EPS:
        where = "the largest machine of " if len(hosts) > 1 else ""
        return (
            f"asks for {request.cpus:g} CPUs per node but {where}compute {name!r} has {most_cpus:g}"
        )
    if request.memory > most_memory:
        where = "the largest machine of " if len(hosts) > 1 else ""
        return (
            f"asks for {gib(request.memory)} of memory per node but {where}compute {name!r} "
            f"has {gib(most_memory)}"
        )
    total = (
        f"{request.gpus * request.nodes} GPUs"
        if request.gpus
        else (f"{request.cpus * request.nodes:g} CPUs")
    )
    have = f"{capacity.gpus} GPUs" if request.gpus else f"{capacity.cpus:g} CPUs"
    if request.memory and request.memory * request.nodes > capacity.memory:
        total = f"{gib(request.memory * request.nodes)} of memory"
        have = gib(capacity.memory)
    if capacity.spread and request.nodes > len(hosts):
        return (
            f"asks for {request.nodes} nodes on different machines but compute {name!r} "
            f"has {len(hosts)}"
        )
    return f"asks for {total} in all ({request.describe()}) but compute {name!r} has {have}"
