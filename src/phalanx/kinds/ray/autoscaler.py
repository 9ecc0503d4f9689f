"""Asking a Ray cluster's autoscaler for nodes, and reading what it says back.

Called by an elastic target's probe (:mod:`phalanx.kinds.ray.probe`), which
is connected to the cluster. The request and the reading run as one small task
on the head node (no CPU asked), because Ray's autoscaler API needs a process
of the cluster's own: through Ray Client the call would not reach it.

Why a scale-up does not come is read from two places: the autoscaler's report
(a node type its provider marked unavailable, with the provider's words: what
the cloud providers' quota and capacity errors become) and, for any other
launch failure, the autoscaler's own log on the head (``monitor.log``): its
last "Failed to launch" and the error under it, if recent.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

STATUS_KEY = b"__autoscaling_status"
"""Where Ray's (v1) autoscaler keeps its last report, in the cluster's key-value store."""
HEAD = "node:__internal_head__"
"""The resource only the head node has: the task runs where the autoscaler does."""
LOG_TAIL = 256 << 10
"""Bytes of the end of the autoscaler's log read for its last launch failure."""
RECENT_S = 120.0
"""A launch failure older than this is not the current one."""
_FAILED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\s.*:event_summary:(Failed to launch .*)$"
)
_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exceeded)\b.*")


def ask(bundles: list[dict[str, float]] | None) -> dict[str, Any]:
    """Send ``bundles`` as the cluster's resource request (``None``: leave the request as
    it is) and return the autoscaler's last report, summed up (:func:`summarize`)."""
    import ray

    remote = ray.remote(num_cpus=0, resources={HEAD: 0.001}, max_retries=0)(_on_cluster)
    raw, failure = ray.get(remote.remote(bundles), timeout=60)
    return summarize(raw, failure)


def _on_cluster(bundles: list[dict[str, float]] | None) -> tuple[bytes | None, str | None]:
    import ray
    from ray.autoscaler.sdk import request_resources
    from ray.experimental.internal_kv import _internal_kv_get

    if bundles is not None:
        request_resources(bundles=bundles)
    value = _internal_kv_get(STATUS_KEY)
    logs = Path(ray._private.worker.global_worker.node.get_logs_dir_path())
    return (value if isinstance(value, bytes) else None), last_launch_failure(logs)


def last_launch_failure(logs: Path, now: float | None = None) -> str | None:
    """The autoscaler's last "Failed to launch …" in its log, with the error logged
    under it (``Failed to launch 1 node(s) of type gpu: ValueError: …``), if it is
    recent; ``None`` otherwise."""
    path = logs / "monitor.log"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - LOG_TAIL))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for index in range(len(lines) - 1, -1, -1):
        found = _FAILED.match(lines[index])
        if not found:
            continue
        stamp = time.mktime(time.strptime(found[1], "%Y-%m-%d %H:%M:%S"))
        if (now if now is not None else time.time()) - stamp > RECENT_S:
            return None
        event = found[2].rstrip(".")
        errors = [ln for ln in lines[max(0, index - 80) : index] if _ERROR.match(ln)]
        return f"{event}: {_one_line(errors[-1])}" if errors else event
    return None


def summarize(raw: bytes | None, launch_failure: str | None = None) -> dict[str, Any]:
    """The autoscaler's report as phalanx shows it: nodes being added, nodes that failed,
    and its reason a node type cannot be had (provider error, quota), if any."""
    if not raw:
        return {"reporting": False, "trouble": launch_failure}
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
    if launch_failure and not troubles:
        troubles.append(launch_failure)
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
