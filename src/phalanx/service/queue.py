"""The queue of a target as the front ends show it: what it has, what holds it where,
and what waits and why (``phalanx queue``, ``compute show``, ``/api/v1/queue``, the
studio's compute page)."""

from __future__ import annotations

import time
from typing import Any

from phalanx.compute.registry import kind_of
from phalanx.compute.targets import Target
from phalanx.scheduler import ledger
from phalanx.scheduler.model import PRIORITIES, TIERS, Request
from phalanx.workspace import Workspace


def queue_view(ws: Workspace, target: Target) -> dict[str, Any]:
    """What ``target`` has (as its kind reads it), what holds it (job, node, host,
    devices, whose, for how long) and its queue in order (whose, priority and tier, what
    it asks, why it waits)."""
    own = kind_of(target).queue_view(ws, target)
    now = time.time()
    running = []
    owners = ledger.holders(ws, target.name)
    for job in ledger.holding(ws, target.name):
        created_by, timeout = owners.get(job.name, (None, None))
        for node, grant in enumerate(job.nodes):
            running.append(
                {
                    "job": job.name,
                    "node": node,
                    "host": grant.host,
                    "gpus": list(grant.gpus),
                    "cpus": grant.cpus,
                    "memory": grant.memory,
                    "leaving": job.releasing,
                    "created_by": created_by,
                    "priority": _name(PRIORITIES, job.priority),
                    "tier": _name(TIERS, job.tier),
                    "held_s": round(now - job.started, 1),
                    "time_limit_s": timeout,
                }
            )
    queued = []
    for entry in ledger.waiting(ws, target.name):
        request = entry.request or {"nodes": 1}
        asks = Request(
            nodes=int(request["nodes"]),
            gpus=int(request.get("gpus", 0)),
            cpus=float(request.get("cpus", 0.0)),
            memory=int(request.get("memory", 0)),
        )
        queued.append(
            {
                "job": entry.name,
                "position": entry.queue.get("position"),
                "waiting_s": round(now - entry.created_at, 1),
                "request": entry.request,
                "asks": asks.describe(),
                "reason": entry.queue.get("reason") or "not looked at yet",
                # When it should start by the time limits ahead (Unix seconds); None: unknown.
                "start": entry.queue.get("start"),
                "created_by": entry.created_by,
                "priority": _name(PRIORITIES, entry.priority),
                "tier": _name(TIERS, entry.tier),
                "time_limit_s": entry.timeout,
            }
        )
    queued.sort(key=lambda q: (q["position"] is None, q["position"] or 0, q["job"]))
    return {"target": target.name, "capacity": own.pop("capacity", None), "running": running,
            "queued": queued, **own}  # fmt: skip


def _name(names: dict[str, int], value: int) -> str:
    """Azure ML's name of a priority or tier value (the number itself if it has none)."""
    return next((name for name, v in names.items() if v == value), str(value))
