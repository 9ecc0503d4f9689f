"""``compute create --type local``: the settings its options describe, and the checks
that keep every local target within this one machine."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from phalanx.errors import PhalanxError
from phalanx.kinds.local.capacity import local_capacity, local_machine, local_targets, own_settings
from phalanx.kinds.local.settings import LOCAL, LocalTarget, parse_devices
from phalanx.workspace import Workspace

ELASTIC_OPTIONS = ("min_nodes", "max_nodes", "idle_time_before_scale_down", "node_cpus",
                   "node_gpus")  # fmt: skip
"""Another kind's options, which a local target refuses."""


def local_target(options: Mapping[str, Any]) -> LocalTarget:
    """The local target ``options`` describe.

    Raises:
        PhalanxError: an address, or malformed GPUs, CPUs or memory.
    """
    from phalanx.sizes import parse_size

    if options.get("address") is not None:
        raise PhalanxError("--address is for --type ray; a local target is this machine")
    tier = options.get("tier")
    if tier is not None and str(tier).strip().lower() != "dedicated":
        raise PhalanxError(
            f"--tier {tier}: this machine is not taken away; a low-priority target is a "
            "Ray cluster with a low-priority node type (--type ray --address ...)"
        )
    scaling = [k for k in ELASTIC_OPTIONS if options.get(k) is not None]
    if scaling:
        raise PhalanxError(
            f"--{scaling[0].replace('_', '-')} is for --type ray: this machine does not grow; "
            "register a Ray cluster with an autoscaler to scale"
        )
    cpus, memory, gpus = options.get("cpus"), options.get("memory"), options.get("gpus")
    if cpus is not None and not (math.isfinite(cpus) and cpus > 0):
        raise PhalanxError(f"--cpus {cpus:g}: give a number of CPU slots above 0, e.g. 16")
    try:
        devices = parse_devices(gpus) if gpus is not None else None
    except ValueError as exc:
        raise PhalanxError(str(exc)) from None
    try:
        size = parse_size(memory) if memory is not None else None
    except ValueError as exc:
        raise PhalanxError(f"--memory: {exc}") from None
    if size is not None and size <= 0:
        raise PhalanxError(f"--memory {memory}: give a size above 0, e.g. 200G")
    return LocalTarget(name=options["name"], gpus=devices, cpus=cpus, memory=size)


def check_within_machine(ws: Workspace, target: LocalTarget) -> None:
    """Every local target's jobs draw from this machine's one pool of CPU slots and memory
    (:mod:`phalanx.kinds.local.capacity`): a target may hold at most what the machine has,
    and the built-in ``local``, whose settings are the machine's, may not leave it less
    than a target was given.

    Raises:
        PhalanxError: naming the flag, the machine's size and the fix.
    """
    from phalanx.compute.machine import detect_cpus, detect_memory
    from phalanx.scheduler.model import gib

    if target.name != LOCAL:
        machine = local_machine(ws)
        declared = own_settings(ws)
        if target.cpus is not None and target.cpus > machine.cpus:
            whence = (
                "as compute 'local' declares"
                if declared.cpus is not None
                else "its cores; compute 'local' --cpus N declares another number"
            )
            raise PhalanxError(
                f"--cpus {target.cpus:g}: this machine has {machine.cpus:g} CPU slots "
                f"({whence}), which every local target's jobs share; give --cpus "
                f"{machine.cpus:g} or less"
            )
        if target.memory is not None and target.memory > machine.memory:
            whence = "as compute 'local' declares" if declared.memory is not None else "all of it"
            raise PhalanxError(
                f"--memory {gib(target.memory)}: this machine has {gib(machine.memory)} of "
                f"memory ({whence}), which every local target's jobs share; give at most "
                f"{gib(machine.memory)}"
            )
        return
    cpus = target.cpus if target.cpus is not None else detect_cpus()
    memory = target.memory if target.memory is not None else detect_memory()
    for other in local_targets(ws):
        if other.name == LOCAL:
            continue
        if other.cpus is not None and other.cpus > cpus:
            given = (
                f"--cpus {cpus:g}"
                if target.cpus is not None
                else f"without --cpus (this machine's {cpus:g} cores)"
            )
            raise PhalanxError(
                f"{given}: compute {other.name!r} may hold {other.cpus:g} of this machine's CPU "
                f"slots, more than this leaves the machine; give --cpus {other.cpus:g} or "
                f"more, or `phalanx compute delete {other.name}` first"
            )
        if other.memory is not None and other.memory > memory:
            given = (
                f"--memory {gib(memory)}"
                if target.memory is not None
                else f"without --memory (this machine's {gib(memory)})"
            )
            raise PhalanxError(
                f"{given}: compute {other.name!r} may hold {gib(other.memory)} of this "
                f"machine's memory, more than this leaves the machine; give at least "
                f"{gib(other.memory)}, or `phalanx compute delete {other.name}` first"
            )


def describe_local(ws: Workspace, target: LocalTarget) -> str:
    """What a local target has: its GPUs, CPU slots and memory."""
    from phalanx.scheduler.model import gib

    capacity = local_capacity(target, ws)
    host, machine = capacity.hosts[0], capacity.machine
    assert machine is not None
    gpus = ",".join(host.gpus) if host.gpus else "none"
    cpus = (
        f"{host.cpus:g}" if host.cpus == machine.cpus else f"{host.cpus:g} of its {machine.cpus:g}"
    )
    memory = (
        gib(host.memory)
        if host.memory == machine.memory
        else f"{gib(host.memory)} of its {gib(machine.memory)}"
    )
    shared = sum(t.name != target.name for t in local_targets(ws))
    also = (
        f", shared with {shared} other local target{'s' if shared != 1 else ''}" if shared else ""
    )
    return f"this machine: GPUs {gpus}, {cpus} CPU slots, {memory} memory{also}"


def check_disjoint(ws: Workspace, target: LocalTarget) -> None:
    """Two local targets never share a GPU: each is its own queue over its devices.

    Only the built-in ``local`` may leave its GPUs unsaid (it then has every GPU
    no other local target was given); any other local target names its own.
    """
    if target.name != LOCAL and target.gpus is None:
        raise PhalanxError(
            f"compute {target.name!r}: a local target other than 'local' needs --gpus (the "
            "GPUs it owns, e.g. --gpus 4-7, or --gpus none); 'local' keeps the rest"
        )
    if not target.gpus:
        return
    for other in local_targets(ws):
        if other.name != target.name and other.gpus:
            shared = sorted(set(other.gpus) & set(target.gpus), key=_device_order)
            if shared:
                raise PhalanxError(
                    f"--gpus: device(s) {','.join(shared)} already belong to compute "
                    f"{other.name!r}; give each local target its own GPUs"
                )


def _device_order(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)
