"""What a compute target has: this machine's GPUs and cores, or a Ray cluster's nodes.

Every local target is a queue over one machine, this one. Its GPUs are its own
(each device belongs to one target); its CPU slots, memory and launchers are the
machine's, which every local target's jobs draw from together
(:class:`~phalanx.scheduler.model.Machine`): a target's ``--cpus`` and
``--memory`` are only the most of them its own jobs hold at once. The machine
has what the built-in ``local`` declares (its settings are this machine's own:
``--cpus`` may count more slots than cores, for many light jobs), else the cores
and memory found.

Every node of a job on it is a launcher process here, so the machine also counts
launchers: one per CPU slot, at least one, every job's nodes together
(:func:`phalanx.scheduler.model.launchers_for`), and a target at most one per
slot of its own. The default target on a 2-core machine thus runs 2 nodes at
once (the demo's 2 nodes x 1 process), and a job of more nodes than that is
refused when it is created.

The targets stay queues of their own, but none starves another: the first job
in line of another target that only the machine keeps out is held for (as a
target's own first blocked job is, :mod:`phalanx.scheduler.policy`), so a
stream of small jobs on ``local`` cannot keep a big one on ``cpu-cluster``
waiting for good.
"""

from __future__ import annotations

from dataclasses import replace

from phalanx.compute.machine import detect_cpus, detect_gpus, detect_memory
from phalanx.compute.targets import list_targets, resolve_target
from phalanx.kinds.local.settings import LOCAL, LocalTarget
from phalanx.scheduler import ledger
from phalanx.scheduler.model import Capacity, Host, Machine, QueuedJob, launchers_for
from phalanx.scheduler.placement import Free
from phalanx.workspace import Workspace

__all__ = ["LOCAL_HOST", "local_capacity", "local_machine", "local_targets", "own_settings"]

LOCAL_HOST = "localhost"
"""The host of every local target's allocations: one machine, whatever its name."""


def local_targets(ws: Workspace) -> list[LocalTarget]:
    """The registered local targets (the built-in ``local`` among them when registered)."""
    return [t for t in list_targets(ws) if isinstance(t, LocalTarget)]


def own_settings(ws: Workspace) -> LocalTarget:
    """The built-in ``local``'s settings: this machine's, as registered or found."""
    own = resolve_target(LOCAL, ws)
    assert isinstance(own, LocalTarget)  # create_target keeps 'local' a local target
    return own


def local_machine(ws: Workspace, *, besides: str | None = None, waiting: bool = False) -> Machine:
    """This machine as every local target shares it: its CPU slots and memory (the
    built-in ``local``'s ``--cpus`` and ``--memory``, else the cores and memory found)
    and, with ``besides``, the jobs of local targets other than ``besides`` that hold
    part of it now; with ``waiting`` too, the first job in line of each of those targets
    that its target's own share has room for (:attr:`Machine.waiting`)."""
    own = own_settings(ws)
    cpus = own.cpus if own.cpus is not None else detect_cpus()
    memory = own.memory if own.memory is not None else detect_memory()
    elsewhere = () if besides is None else tuple(ledger.holding_elsewhere(ws, LOCAL_HOST, besides))
    heads = _heads_elsewhere(ws, besides) if waiting and besides is not None else ()
    return Machine(LOCAL_HOST, cpus, memory, launchers_for(cpus), elsewhere, heads)


def _heads_elsewhere(ws: Workspace, besides: str) -> tuple[QueuedJob, ...]:
    """The first job in line of each local target but ``besides`` that fits what its
    target's own jobs leave of its share now (a job that does not is held for by its
    own target, or can never start)."""
    names = {LOCAL, *(t.name for t in local_targets(ws))}
    heads = []
    for name in sorted(names - {besides}):
        queue = ledger.queued(ws, name)
        if not queue:
            continue
        head = min(queue, key=lambda job: job.key)
        target = resolve_target(name, ws)
        assert isinstance(target, LocalTarget)  # a local target's queue has its name
        capacity = local_capacity(target, ws)
        own = Free.of(capacity, [job.nodes for job in ledger.holding(ws, name)], elsewhere=False)
        if own.place(head.request, capacity.spread) is not None:
            heads.append(replace(head, target=name))
    return tuple(heads)


def local_capacity(target: LocalTarget, ws: Workspace, *, waiting: bool = False) -> Capacity:
    """One host, this machine: the target's GPUs, and its share of the machine's CPU
    slots and memory (what it declares, at most the machine's; else all of them).

    The built-in ``local`` without ``--gpus`` has every GPU found except those other
    local targets were given. GPUs still held by jobs of other targets (one deleted or
    changed while they ran) are left out too, so no device is ever handed out twice.
    The capacity's ``machine`` carries what other targets' jobs hold of the machine,
    and with ``waiting`` (the scheduler's pass) the jobs of theirs it may be held for.
    """
    machine = local_machine(ws, besides=target.name, waiting=waiting)
    if target.gpus is not None:
        gpus = tuple(target.gpus)
    else:
        taken = {
            gpu
            for other in local_targets(ws)
            if other.name != target.name and other.gpus
            for gpu in other.gpus
        }
        gpus = tuple(g for g in detect_gpus() if g not in taken)
    held = {gpu for job in machine.elsewhere for node in job.nodes for gpu in node.gpus}
    gpus = tuple(g for g in gpus if g not in held)
    cpus = machine.cpus if target.cpus is None else min(target.cpus, machine.cpus)
    memory = machine.memory if target.memory is None else min(target.memory, machine.memory)
    host = Host(LOCAL_HOST, gpus, cpus, memory, launchers=launchers_for(cpus))
    return Capacity(target.name, (host,), spread=False, machine=machine)
