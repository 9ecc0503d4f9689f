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
- A Ray target's nodes ask for what its bundles reserve (``--gpus-per-node``,
  ``--cpus-per-node`` or one CPU per process).
"""

from __future__ import annotations

import math
from typing import Any

from phalanx.compute.targets import RayTarget, Target
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


def request_for(spec: JobSpec, target: Target, capacity: Capacity | None) -> Request:
    """The nodes, GPUs and CPU slots ``spec`` needs on ``target``.

    Args:
        capacity: What the target has; ``None`` when it is not known (a Ray
            cluster, which may also grow), and then nothing is refused.

    Raises:
        PhalanxError: the job can never fit the target (both numbers named).
    """
    nodes = spec.instance_count
    procs = spec.process_count_per_instance
    resources = spec.resources
    if isinstance(target, RayTarget):
        asked = (
            resources.gpus_per_instance,
            resources.cpus_per_instance,
            resources.memory_per_instance,
        )
        if any(value is not None for value in asked):
            raise PhalanxError(
                "resources.gpus_per_instance / cpus_per_instance / memory_per_instance: a Ray "
                "target's nodes get what its bundles reserve; set --gpus-per-node / "
                "--cpus-per-node on the target"
            )
        gpus = math.ceil(target.gpus_per_node)
        cpus = target.cpus_per_node if target.cpus_per_node is not None else float(procs)
    elif capacity is None:
        raise ValueError("a local target's capacity is always known")
    else:
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
    memory = resources.memory_per_instance or 0 if not isinstance(target, RayTarget) else 0
    request = Request(nodes=nodes, gpus=gpus, cpus=cpus, memory=memory)
    if capacity is None:
        return request
    reason = never_fits(request, capacity)
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
