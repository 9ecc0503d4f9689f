"""What a compute target has: this machine's GPUs and cores, or a Ray cluster's nodes.

A local target is one host, this machine. Every node of a job on it is a launcher
process here, so the host also counts launchers: one per CPU slot the target
declares (``--cpus``, else this machine's cores), at least one, every job's nodes
together (:func:`phalanx.scheduler.model.launchers_for`). The default target on a
2-core machine thus runs 2 nodes at once (the demo's 2 nodes x 1 process), and a
job of more nodes than that is refused when it is created.
"""

from __future__ import annotations

from phalanx.compute.machine import detect_cpus, detect_gpus, detect_memory
from phalanx.compute.targets import LocalTarget, list_targets
from phalanx.scheduler import ledger
from phalanx.scheduler.model import Capacity, Host, launchers_for
from phalanx.workspace import Workspace

__all__ = ["LOCAL_HOST", "local_capacity"]

LOCAL_HOST = "localhost"
"""The host of every local target's allocations: one machine, whatever its name."""


def local_capacity(target: LocalTarget, ws: Workspace | None = None) -> Capacity:
    """One host, this machine: the target's GPUs, CPU slots and memory, or what it has.

    The built-in ``local`` without ``--gpus`` has every GPU found except those other
    local targets were given. With ``ws``, GPUs still held by jobs of other targets
    (one deleted or changed while they ran) are left out too, so no device is ever
    handed out twice.
    """
    if target.gpus is not None:
        gpus = tuple(target.gpus)
    else:
        gpus = detect_gpus()
        if ws is not None:
            taken = {
                gpu
                for other in list_targets(ws)
                if isinstance(other, LocalTarget) and other.name != target.name and other.gpus
                for gpu in other.gpus
            }
            gpus = tuple(g for g in gpus if g not in taken)
    if ws is not None:
        held = ledger.held_elsewhere(ws, LOCAL_HOST, target.name)
        gpus = tuple(g for g in gpus if g not in held)
    cpus = target.cpus if target.cpus is not None else detect_cpus()
    memory = target.memory if target.memory is not None else detect_memory()
    host = Host(LOCAL_HOST, gpus, cpus, memory, launchers=launchers_for(cpus))
    return Capacity(target.name, (host,), spread=False)
