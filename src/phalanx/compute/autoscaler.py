"""Asking a Ray cluster's autoscaler for nodes, and reading what it says back.

Called by an elastic target's probe (:mod:`phalanx.scheduler.rayprobe`), which
is connected to the cluster. The request and the reading run as one small task
on the cluster (no CPU asked, so it runs on the head of a cluster at zero
workers), because Ray's autoscaler API needs a process of the cluster's own:
through Ray Client the call would not reach it.
"""

from __future__ import annotations

import json
from typing import Any

STATUS_KEY = b"__autoscaling_status"
"""Where Ray's (v1) autoscaler keeps its last report, in the cluster's key-value store."""


def ask(bundles: list[dict[str, float]] | None) -> dict[str, Any]:
    """Send ``bundles`` as the cluster's resource request (``None``: leave the request as
    it is) and return the autoscaler's last report, summed up (:func:`summarize`)."""
    import ray

    remote = ray.remote(num_cpus=0, max_retries=0)(_on_cluster)
    raw = ray.get(remote.remote(bundles), timeout=60)
    return summarize(raw)


def _on_cluster(bundles: list[dict[str, float]] | None) -> bytes | None:
    from ray.autoscaler.sdk import request_resources
    from ray.experimental.internal_kv import _internal_kv_get

    if bundles is not None:
        request_resources(bundles=bundles)
    value = _internal_kv_get(STATUS_KEY)
    return value if isinstance(value, bytes) else None


def summarize(raw: bytes | None) -> dict[str, Any]:
    """The autoscaler's report as phalanx shows it: nodes being added, nodes that failed,
    and its reason a node type cannot be had (provider error, quota), if any."""
    if not raw:
        return {"reporting": False}
    try:
        report = json.loads(raw).get("autoscaler_report") or {}
    except (ValueError, AttributeError):
        return {"reporting": False}
    pending = sum(int(n) for n in (report.get("pending_launches") or {}).values())
    pending += len(report.get("pending_nodes") or [])
    failed = [str(entry[-1]) for entry in report.get("failed_nodes") or [] if entry]
    troubles = []
    availability = (report.get("node_availability_summary") or {}).get("node_availabilities")
    for node_type, state in sorted((availability or {}).items()):
        info = (state or {}).get("unavailable_node_information") or {}
        if not (state or {}).get("is_available", True) and info:
            detail = str(info.get("description") or info.get("category") or "unavailable")
            troubles.append(f"node type {node_type}: {_one_line(detail)}")
    if failed and not troubles:
        troubles.append(f"{len(failed)} node(s) of type {failed[0]} failed to start")
    return {
        "reporting": True,
        "pending": pending,
        "failed": failed,
        "trouble": "; ".join(troubles) or None,
    }


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
