"""A Ray cluster's nodes, read for the scheduler: ``python -m phalanx.scheduler.rayprobe NAME``.

The scheduler process never imports Ray (one Ray connection per process, and a
cluster that hangs must not stall the other targets' queues). For a Ray target
with work, it starts one probe, which connects as a job's supervisor would
(token included), writes the cluster's live nodes and their CPUs and GPUs into
the workspace's ``capacities`` table every ``EVERY_S`` seconds, and exits once
the target has had nothing queued or running for ``IDLE_EXIT_S`` seconds. Until
a fresh reading exists, the target's jobs start in queue order (Ray queues
what it cannot place yet).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from phalanx.workspace import Workspace

EVERY_S = 5.0
IDLE_EXIT_S = 60.0
# A reading older than this is not trusted (the probe died, or the cluster does not answer).
FRESH_S = 30.0

log = logging.getLogger("phalanx.scheduler.rayprobe")


def lock_path(home: Path, target: str) -> Path:
    digest = hashlib.sha256(target.encode()).hexdigest()[:16]
    return Path(home) / "probes" / f"ray-{digest}.lock"


def read_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes: ``{"host": node id, "gpus": n, "cpus": n, "memory": bytes}``."""
    import ray

    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources") or {}
        nodes.append(
            {
                "host": str(node.get("NodeID")),
                "gpus": int(resources.get("GPU", 0)),
                "cpus": float(resources.get("CPU", 0)),
                "memory": int(resources.get("memory", 0)),
            }
        )
    return sorted(nodes, key=lambda n: n["host"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m phalanx.scheduler.rayprobe TARGET", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s rayprobe[%(process)d] %(message)s"
    )
    name = argv[0]
    ws = Workspace()
    path = lock_path(ws.home, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another probe reads this target
    from phalanx.compute.ray import RayCompute
    from phalanx.compute.targets import RayTarget, resolve_target
    from phalanx.errors import PhalanxError
    from phalanx.scheduler import ledger

    try:
        target = resolve_target(name, ws)
        if not isinstance(target, RayTarget):
            return 2
        RayCompute(target, target.token_value(ws)).connect()
    except PhalanxError as exc:
        log.error("%s", exc)
        return 1
    idle_since = time.monotonic()
    while True:
        try:
            nodes = read_nodes()
        except Exception as exc:  # the cluster went away: readings stop, and go stale
            log.error("reading the cluster's nodes failed: %s", exc)
            return 1
        ledger.record_capacity(ws, name, nodes)
        if name in ledger.targets_with_work(ws):
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_EXIT_S:
            return 0
        time.sleep(EVERY_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
