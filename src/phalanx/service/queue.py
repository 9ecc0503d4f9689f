"""The queue of a target as the front ends show it: what it has, what holds it where,
and what waits and why (``phalanx queue``, ``compute show``, ``/api/v1/queue``, the
studio's compute page)."""

from __future__ import annotations

import time
from typing import Any

from phalanx.compute.targets import LocalTarget, RayTarget, Target
from phalanx.scheduler import ledger
from phalanx.scheduler.capacity import local_capacity
from phalanx.scheduler.model import PRIORITIES, TIERS, Request
from phalanx.scheduler.scaling import count_nodes, of_tier
from phalanx.workspace import Workspace


def queue_view(ws: Workspace, target: Target) -> dict[str, Any]:
    """What ``target`` has, what holds it (job, node, host, devices, whose, for how long)
    and its queue in order (whose, priority and tier, what it asks, why it waits)."""
    capacity: dict[str, Any] | None = None
    read: list[dict[str, Any]] | None = None
    if isinstance(target, LocalTarget):
        cap = local_capacity(target, ws)
        capacity = {
            "hosts": [
                {"host": h.name, "gpus": list(h.gpus), "cpus": h.cpus, "memory": h.memory}
                for h in cap.hosts
            ]
        }
    else:
        reading = ledger.capacity_reading(ws, target.name)
        if reading is not None:
            hosts, read_at = reading
            read = hosts = of_tier(hosts, target)
            capacity = {
                "hosts": [
                    {"host": h["host"], "gpus": [str(i) for i in range(h["gpus"])],
                     "cpus": h["cpus"], "memory": h.get("memory", 0)}
                    for h in hosts
                ],
                "read_s_ago": round(time.time() - read_at, 1),
            }  # fmt: skip
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
    view = {"target": target.name, "capacity": capacity, "running": running, "queued": queued}
    if isinstance(target, RayTarget) and target.elastic:
        view["scaling"] = scaling_view(ws, target, read)
    return view


def _name(names: dict[str, int], value: int) -> str:
    """Azure ML's name of a priority or tier value (the number itself if it has none)."""
    return next((name for name, v in names.items() if v == value), str(value))


def scaling_view(ws: Workspace, target: RayTarget, read: list[dict[str, Any]] | None) -> dict:
    """An elastic target's size: worker nodes up (of its probe's reading ``read``), wanted
    by its queue, asked of its autoscaler (and how long ago), its range, and the
    autoscaler's trouble if any."""
    row = ledger.scaling_of(ws, target.name)
    report = row.report if row is not None else {}
    asked_at = row.requested_at if row is not None else None
    return {
        "nodes": count_nodes(read, target) if read is not None else None,
        "min_nodes": target.min_nodes,
        "max_nodes": target.max_nodes,
        "tier": target.tier,
        "idle_time_before_scale_down": target.idle_time_before_scale_down,
        "wanted": row.wanted if row is not None else 0,
        "requested": row.requested if row is not None else None,
        "requested_s_ago": round(time.time() - asked_at, 1) if asked_at else None,
        "adding": report.get("pending", 0),
        "trouble": report.get("trouble"),
    }
