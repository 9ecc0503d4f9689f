"""What a job asks of its compute target, derived from its spec as Azure ML does.

- Nodes: ``resources.instance_count``.
- GPUs per node: ``resources.gpus_per_instance`` when given; otherwise one per
  process (``process_count_per_instance``) on a target that has GPUs, and none
  on one that has not.
- CPU slots per node: ``resources.cpus_per_instance`` when given; otherwise one
  per process on a target without GPUs, at most this machine's share (a job
  with more processes than the machine has cores takes the whole machine rather
  than being refused: torchrun would run it so); none counted on a GPU target.
- Memory per node: ``resources.memory_per_instance`` when given (``64G``);
  none counted otherwise.
- A kind may ask otherwise (a Ray target's nodes ask for what its bundles reserve:
  ``--gpus-per-node``, ``--cpus-per-node`` or one CPU per process); each kind's
  :meth:`~phalanx.compute.kind.ComputeKind.request` says.

Before any of that, the counts are checked against what the target could ever
run (:func:`check_counts`), so nothing later loops over a number a user typed:

- a local target runs at most one launcher per CPU slot it declares
  (:func:`phalanx.scheduler.model.launchers_for`): ``instance_count`` is at most
  that; and the processes of a job on its machine (``instance_count`` x
  ``process_count_per_instance``) are at most :data:`PROCESSES_PER_SLOT` per slot
  (a CPU test of 8 ranks on a 2-core laptop runs; 80 do not);
- a Ray cluster, whose size phalanx does not know when the job is created, takes
  at most :data:`MAX_NODES` nodes of at most :data:`MAX_PROCESSES_PER_NODE`
  processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from phalanx.errors import PhalanxError
from phalanx.scheduler.model import (
    DEFAULT_PRIORITY,
    DEFAULT_TIER,
    PRIORITIES,
    TIERS,
    Capacity,
    Request,
)
from phalanx.scheduler.placement import never_fits
from phalanx.spec import JobSpec

if TYPE_CHECKING:
    from phalanx.compute.kind import TargetSettings

MAX_NODES = 1024
"""Nodes of one job on a target whose size is not known when it is created (Ray)."""
MAX_PROCESSES_PER_NODE = 1024
"""Processes of one node there."""
PROCESSES_PER_SLOT = 4
"""A job's processes on a local target's machine, per CPU slot it declares."""


def check_counts(spec: JobSpec, target: TargetSettings, capacity: Capacity | None) -> None:
    """Refuse node and process counts beyond what ``target`` could ever run.

    Raises:
        SpecError: naming the field (and its line), its value and the target's limit.
    """
    nodes, procs = spec.instance_count, spec.process_count_per_instance
    procs_field = (
        "distribution.worker_count"
        if spec.distribution_type == "tensorflow"
        else "distribution.process_count_per_instance"
    )
    if capacity is None or capacity.launchers is None:
        if nodes > MAX_NODES:
            raise spec.error(
                "resources.instance_count",
                f"{nodes} nodes, but phalanx places at most {MAX_NODES} on compute "
                f"{target.name!r}; ask for fewer",
            )
        if procs > MAX_PROCESSES_PER_NODE:
            raise spec.error(
                procs_field,
                f"{procs} processes per node, but phalanx starts at most "
                f"{MAX_PROCESSES_PER_NODE} on a node of compute {target.name!r}; ask for fewer",
            )
        return
    launchers = capacity.launchers
    if nodes > launchers:
        raise spec.error(
            "resources.instance_count",
            f"{nodes} nodes, but compute {target.name!r} runs at most {launchers} (a "
            f"launcher per CPU slot it declares: {capacity.cpus:g}); ask for fewer nodes, "
            "or more processes per node",
        )
    most = PROCESSES_PER_SLOT * launchers
    if nodes * procs > most:
        raise spec.error(
            procs_field,
            f"{procs} processes on each of {nodes} node(s), but compute {target.name!r} "
            f"runs at most {most} processes for a job ({PROCESSES_PER_SLOT} per CPU slot it "
            f"declares: {capacity.cpus:g}); ask for fewer",
        )


def on_hosts(spec: JobSpec, capacity: Capacity) -> Request:
    """What each of ``spec``'s nodes asks of a target whose hosts are known (``capacity``):
    the spec's ``resources``, else a GPU per process where there are GPUs, else a CPU slot
    per process (at most a host's share, on a target that packs nodes on one host)."""
    nodes = spec.instance_count
    procs = spec.process_count_per_instance
    resources = spec.resources
    has_gpus = capacity.gpus > 0
    given_gpus = resources.gpus_per_instance
    gpus = given_gpus if given_gpus is not None else (procs if has_gpus else 0)
    if resources.cpus_per_instance is not None:
        cpus = float(resources.cpus_per_instance)
    elif has_gpus:
        cpus = 0.0
    else:
        host = max((h.cpus for h in capacity.hosts), default=0.0)
        cpus = min(float(procs), host / nodes) if not capacity.spread else float(procs)
    memory = resources.memory_per_instance or 0
    return Request(nodes=nodes, gpus=gpus, cpus=cpus, memory=memory)


def refuse_unfit(request: Request, capacity: Capacity | None, hint: str = "") -> Request:
    """``request``, if ``capacity`` (``None``: not known) could ever hold it.

    Args:
        hint: What the target is at its largest, for the message (``" at its largest
            (...)"``); the default advice is to choose a larger target.

    Raises:
        PhalanxError: the job can never fit the target (both numbers named).
    """
    if capacity is None:
        return request
    reason = never_fits(request, capacity)
    if reason is not None and hint:
        raise PhalanxError(f"the job {reason}{hint}")
    if reason is not None:
        raise PhalanxError(f"the job {reason}; ask for less or choose a larger compute target")
    return request


def priority_of(spec: JobSpec | dict[str, Any]) -> tuple[int, int]:
    """``(priority, tier)`` on the scheduler's scale, from ``queue_settings``."""
    settings = (
        spec.queue_settings.model_dump()
        if isinstance(spec, JobSpec) and spec.queue_settings
        else (spec.get("queue_settings") if isinstance(spec, dict) else None)
    ) or {}
    raw = settings.get("priority")
    if raw is None:
        priority = DEFAULT_PRIORITY
    elif isinstance(raw, str):
        priority = PRIORITIES[raw.lower()]
    else:
        priority = int(raw)
    tier = TIERS.get(str(settings.get("job_tier") or "").lower(), DEFAULT_TIER)
    return priority, tier
