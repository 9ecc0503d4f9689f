"""Where a request fits: free devices and CPU slots per host, and placing nodes on them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from phalanx.scheduler.model import Capacity, NodeGrant, Request, gib

_EPS = 1e-9


@dataclass
class MachineLeft:
    """What a machine several targets share has left, every target's jobs counted."""

    host: str
    cpus: float
    memory: int
    launchers: int

    def hold(self, node: NodeGrant, sign: int) -> None:
        """Count ``node`` as held (``sign`` -1) or given back (+1), if it is on this machine."""
        if node.host == self.host:
            self.cpus += sign * node.cpus
            self.memory += sign * node.memory
            self.launchers += sign


@dataclass
class Free:
    """What is free on each host of a target, in host order."""

    gpus: dict[str, list[str]]
    cpus: dict[str, float]
    memory: dict[str, int]
    launchers: dict[str, int | None] = field(default_factory=dict)
    """Launchers a host may still start; ``None`` (or absent) where it does not count them."""
    machine: MachineLeft | None = None
    """What the machine the target shares with others has left (``Capacity.machine``): a
    host's slots, memory and launchers are then the lesser of the target's and this."""

    @classmethod
    def of(
        cls,
        capacity: Capacity,
        held: Iterable[Iterable[NodeGrant]] = (),
        *,
        elsewhere: bool = True,
    ) -> Free:
        """The target's capacity less what ``held`` grants hold (unknown hosts ignored) and,
        with ``elsewhere``, less what other targets' jobs hold of a shared machine."""
        free = cls(
            gpus={h.name: list(h.gpus) for h in capacity.hosts},
            cpus={h.name: float(h.cpus) for h in capacity.hosts},
            memory={h.name: h.memory for h in capacity.hosts},
            launchers={h.name: h.launchers for h in capacity.hosts},
        )
        machine = capacity.machine
        if machine is not None:
            free.machine = MachineLeft(machine.host, machine.cpus, machine.memory,
                                       machine.launchers)  # fmt: skip
            if elsewhere:
                for job in machine.elsewhere:
                    free.take(job.nodes, outside=True)
        for nodes in held:
            free.take(nodes)
        return free

    def copy(self) -> Free:
        return Free(
            {h: list(g) for h, g in self.gpus.items()},
            dict(self.cpus),
            dict(self.memory),
            dict(self.launchers),
            replace(self.machine) if self.machine is not None else None,
        )

    def alone(self) -> Free:
        """What is free counting the target's own jobs only (the machine's pool left out)."""
        free = self.copy()
        free.machine = None
        return free

    def take(self, nodes: Iterable[NodeGrant], *, outside: bool = False) -> None:
        """Count ``nodes`` as held; ``outside``: by another target's job, which holds the
        shared machine's slots but none of this target's own."""
        for node in nodes:
            if self.machine is not None:
                self.machine.hold(node, -1)
            if outside or node.host not in self.cpus:
                continue  # a host the target no longer has (a lost Ray node)
            held = set(node.gpus)
            self.gpus[node.host] = [g for g in self.gpus[node.host] if g not in held]
            self.cpus[node.host] -= node.cpus
            self.memory[node.host] -= node.memory
            left = self.launchers.get(node.host)
            if left is not None:
                self.launchers[node.host] = left - 1

    def give(
        self, nodes: Iterable[NodeGrant], capacity: Capacity, *, outside: bool = False
    ) -> None:
        """Return ``nodes``' devices and slots (in the host's own device order); ``outside``:
        a job of another target, which gives back only the shared machine's."""
        order = {h.name: h.gpus for h in capacity.hosts}
        for node in nodes:
            if self.machine is not None:
                self.machine.hold(node, +1)
            if outside or node.host not in self.cpus:
                continue
            back = set(self.gpus[node.host]) | set(node.gpus)
            self.gpus[node.host] = [g for g in order[node.host] if g in back]
            self.cpus[node.host] += node.cpus
            self.memory[node.host] += node.memory
            left = self.launchers.get(node.host)
            if left is not None:
                self.launchers[node.host] = left + 1

    def _shared(self, host: str) -> MachineLeft | None:
        machine = self.machine
        return machine if machine is not None and machine.host == host else None

    def cpus_left(self, host: str) -> float:
        shared = self._shared(host)
        return self.cpus[host] if shared is None else min(self.cpus[host], shared.cpus)

    def memory_left(self, host: str) -> int:
        shared = self._shared(host)
        return self.memory[host] if shared is None else min(self.memory[host], shared.memory)

    def launchers_left(self, host: str) -> int | None:
        """Launchers ``host`` may still start; ``None`` where nobody counts them."""
        left = self.launchers.get(host)
        shared = self._shared(host)
        if shared is None:
            return left
        return shared.launchers if left is None else min(left, shared.launchers)

    def fits(self, host: str, request: Request) -> bool:
        """Whether one node of ``request`` fits on what ``host`` has free."""
        left = self.launchers_left(host)
        return (
            len(self.gpus[host]) >= request.gpus
            and self.cpus_left(host) + _EPS >= request.cpus
            and self.memory_left(host) >= request.memory
            and (left is None or left >= 1)
        )

    def gpu_count(self) -> int:
        return sum(len(g) for g in self.gpus.values())

    def cpu_count(self) -> float:
        return sum(max(0.0, self.cpus_left(h)) for h in self.cpus)

    def memory_count(self) -> int:
        return sum(max(0, self.memory_left(h)) for h in self.memory)

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
        work = self.copy()

        def best(h: str) -> tuple[int, float]:
            return len(work.gpus[h]), work.cpus[h]

        if spread:
            # One node per host: taking a host changes no other, so best fit for each
            # node in turn is the fitting hosts in best-fit order (min() and a stable
            # sort agree on ties).
            chosen = sorted((h for h in work.cpus if work.fits(h, request)), key=best)
            if len(chosen) < request.nodes:
                return None
            return tuple(_grant(h, work.gpus[h], request) for h in chosen[: request.nodes])
        nodes: list[NodeGrant] = []
        for _ in range(request.nodes):
            fitting = [h for h in work.cpus if work.fits(h, request)]
            if not fitting:
                return None
            host = min(fitting, key=best)
            node = _grant(host, work.gpus[host], request)
            nodes.append(node)
            work.take((node,))
        return tuple(nodes)

    def most_nodes(self, request: Request, spread: bool) -> int:
        """At most how many of ``request``'s nodes fit on what is free (an upper bound,
        each host counted alone; ``request.nodes`` stands for "as many as asked")."""
        total = 0
        for h in self.cpus:
            most = float(request.nodes)
            left = self.launchers_left(h)
            if left is not None:
                most = min(most, max(0, left))
            if request.gpus:
                most = min(most, len(self.gpus[h]) // request.gpus)
            if request.cpus > 0:
                most = min(most, max(0.0, self.cpus_left(h) + _EPS) / request.cpus)
            if request.memory > 0:
                most = min(most, max(0, self.memory_left(h)) // request.memory)
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
    if Free.of(capacity, elsewhere=False).place(request, capacity.spread) is not None:
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
