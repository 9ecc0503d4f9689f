"""Where a request fits: free devices and CPU slots per host, and placing nodes on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from phalanx.scheduler.model import Capacity, NodeGrant, Request, gib

_EPS = 1e-9


@dataclass
class Free:
    """What is free on each host of a target, in host order."""

    gpus: dict[str, list[str]]
    cpus: dict[str, float]
    memory: dict[str, int]
    launchers: dict[str, int | None] = field(default_factory=dict)
    """Launchers a host may still start; ``None`` (or absent) where it does not count them."""

    @classmethod
    def of(cls, capacity: Capacity, held: Iterable[Iterable[NodeGrant]] = ()) -> Free:
        """The target's capacity less what ``held`` grants hold (unknown hosts ignored)."""
        free = cls(
            gpus={h.name: list(h.gpus) for h in capacity.hosts},
            cpus={h.name: float(h.cpus) for h in capacity.hosts},
            memory={h.name: h.memory for h in capacity.hosts},
            launchers={h.name: h.launchers for h in capacity.hosts},
        )
        for nodes in held:
            free.take(nodes)
        return free

    def copy(self) -> Free:
        return Free(
            {h: list(g) for h, g in self.gpus.items()},
            dict(self.cpus),
            dict(self.memory),
            dict(self.launchers),
        )

    def take(self, nodes: Iterable[NodeGrant]) -> None:
        for node in nodes:
            if node.host not in self.cpus:
                continue  # a host the target no longer has (a lost Ray node)
            held = set(node.gpus)
            self.gpus[node.host] = [g for g in self.gpus[node.host] if g not in held]
            self.cpus[node.host] -= node.cpus
            self.memory[node.host] -= node.memory
            left = self.launchers.get(node.host)
            if left is not None:
                self.launchers[node.host] = left - 1

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
            left = self.launchers.get(node.host)
            if left is not None:
                self.launchers[node.host] = left + 1

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

        A request of more nodes than could fit at best is answered before any
        node is placed, so the work is bounded by what the target has, not by
        what the request asks.
        """
        if self.most_nodes(request, spread) < request.nodes:
            return None
        gpus = {h: list(g) for h, g in self.gpus.items()}
        cpus = dict(self.cpus)
        memory = dict(self.memory)
        launchers = dict(self.launchers)

        def fits(h: str) -> bool:
            left = launchers.get(h)
            return (
                len(gpus[h]) >= request.gpus
                and cpus[h] + _EPS >= request.cpus
                and memory[h] >= request.memory
                and (left is None or left >= 1)
            )

        def best(h: str) -> tuple[int, float]:
            return len(gpus[h]), cpus[h]

        if spread:
            # One node per host: taking a host changes no other, so best fit for each
            # node in turn is the fitting hosts in best-fit order (min() and a stable
            # sort agree on ties).
            chosen = sorted((h for h in cpus if fits(h)), key=best)[: request.nodes]
            if len(chosen) < request.nodes:
                return None
            return tuple(_grant(h, gpus[h], request) for h in chosen)
        nodes: list[NodeGrant] = []
        for _ in range(request.nodes):
            fitting = [h for h in cpus if fits(h)]
            if not fitting:
                return None
            host = min(fitting, key=best)
            nodes.append(_grant(host, gpus[host], request))
            gpus[host] = gpus[host][request.gpus :]
            cpus[host] -= request.cpus
            memory[host] -= request.memory
            left = launchers.get(host)
            if left is not None:
                launchers[host] = left - 1
        return tuple(nodes)

    def most_nodes(self, request: Request, spread: bool) -> int:
        """At most how many of ``request``'s nodes fit on what is free (an upper bound,
        each host counted alone; ``request.nodes`` stands for "as many as asked")."""
        total = 0
        for h in self.cpus:
            most = float(request.nodes)
            left = self.launchers.get(h)
            if left is not None:
                most = min(most, max(0, left))
            if request.gpus:
                most = min(most, len(self.gpus[h]) // request.gpus)
            if request.cpus > 0:
                most = min(most, max(0.0, self.cpus[h] + _EPS) / request.cpus)
            if request.memory > 0:
                most = min(most, max(0, self.memory[h]) // request.memory)
            if spread:
                most = min(most, 1)
            total += int(most)
            if total >= request.nodes:
                break
        return total


def _grant(host: str, gpus: list[str], request: Request) -> NodeGrant:
    """A node of ``request`` on ``host``, given its lowest free devices."""
    taken = tuple(gpus[: request.gpus])
    return NodeGrant(host=host, gpus=taken, cpus=request.cpus, memory=request.memory)


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
    launchers = capacity.launchers
    if launchers is not None and request.nodes > launchers:
        return (
            f"asks for {request.nodes} nodes but compute {name!r} runs at most {launchers} "
            "at once (a launcher per CPU slot of its machine)"
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
