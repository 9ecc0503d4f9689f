"""A Ray cluster's nodes, read for the scheduler: ``python -m phalanx.kinds.ray.probe NAME``.

The scheduler process never imports Ray (one Ray connection per process, and a
cluster that hangs must not stall the other targets' queues). For a Ray target
with work, it starts one probe, which connects as a job's supervisor would
(token included), writes the cluster's live nodes and their CPUs and GPUs into
the workspace's ``capacities`` table every ``EVERY_S`` seconds, and exits once
the target has had nothing queued or running for ``IDLE_EXIT_S`` seconds. Until
a fresh reading exists, the target's jobs start in queue order (Ray queues
what it cannot place yet).

For an elastic target (``max_nodes``) the probe is also the one voice of phalanx
to the cluster's autoscaler (:class:`Requester`): it asks for the worker nodes
the scheduler says the queue wants, as whole nodes of the target's node shape,
at once when more are wanted; fewer only once the target has wanted fewer for
``idle_time_before_scale_down`` (then the autoscaler's own idle timeout removes
the nodes), never below ``min_nodes``. It records what it asked and what the
autoscaler reported, and stays until the request is back at ``min_nodes``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.workspace import Workspace

EVERY_S = 5.0
ELASTIC_IDLE_EXIT_S = 600.0
"""An elastic target's probe stays this long without work: the next job's request to the
autoscaler then goes out at once, not after a new connection."""
CHANGING_EVERY_S = 1.0
"""How often an elastic cluster is read while its nodes are not those asked for."""
IDLE_EXIT_S = 60.0

log = logging.getLogger("phalanx.kinds.ray.probe")


def lock_path(home: Path, target: str) -> Path:
    digest = hashlib.sha256(target.encode()).hexdigest()[:16]
    return Path(home) / "probes" / f"ray-{digest}.lock"


def read_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes: ``{"host": node id, "gpus": n, "cpus": n, "memory": bytes,
    "low_priority": whether it carries the low-priority node type's resource}``."""
    import ray

    from phalanx.kinds.ray.settings import LOW_PRIORITY_RESOURCE

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
                "low_priority": bool(resources.get(LOW_PRIORITY_RESOURCE)),
            }
        )
    return sorted(nodes, key=lambda n: n["host"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m phalanx.kinds.ray.probe TARGET", file=sys.stderr)
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
    from phalanx.compute.targets import resolve_target
    from phalanx.kinds.ray.compute import RayCompute
    from phalanx.kinds.ray.scaling import count_nodes
    from phalanx.kinds.ray.settings import RayTarget
    from phalanx.scheduler import ledger
    from phalanx.scheduler.bell import Bell, probe_bell, ring, scheduler_bell

    try:
        target = resolve_target(name, ws)
        if not isinstance(target, RayTarget):
            return 2
        RayCompute(target, target.token_value(ws)).connect()
    except PhalanxError as exc:
        log.error("%s", exc)
        return 1
    requester = Requester(ws, target) if target.elastic else None
    idle_since = time.monotonic()
    bell = Bell(probe_bell(ws.home, name))
    seen: list[str] = []
    failures = 0
    while True:
        try:
            nodes = read_nodes()
            failures = 0
        except Exception as exc:
            # A dropped connection is made again (an elastic target would otherwise ask
            # for nothing until the scheduler starts another probe); a cluster that stays
            # away ends the probe, and its readings go stale.
            failures += 1
            log.error("reading the cluster's nodes failed: %s", exc)
            if failures > RECONNECTS or not _reconnect(target, ws):
                return 1
            if requester is not None:
                requester.sent_again = False  # a head that restarted lost the request
            continue
        try:
            if _changed(ws, target):
                log.info("compute %s was deleted or changed; this probe ends", name)
                if requester is not None:  # its nodes are nobody's now
                    with contextlib.suppress(Exception):
                        requester.withdraw()
                return 0
            ledger.record_capacity(ws, name, nodes)
            busy = name in ledger.targets_with_work(ws)
        except DatabaseUnavailable as exc:  # the request stands; look again soon
            log.warning("the workspace's database is away (%s); trying again", exc)
            bell.wait(EVERY_S)
            continue
        if [n["host"] for n in nodes] != seen:
            seen = [n["host"] for n in nodes]
            ring(scheduler_bell(ws.home))  # nodes came or went: schedule now
        settled = True
        if requester is not None:
            try:
                settled = requester.step(busy, time.time())
            except Exception as exc:  # the next look tries again; the scheduler goes on
                log.error("asking the cluster's autoscaler failed: %s", exc)
                settled = False
        if busy or not settled:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > (ELASTIC_IDLE_EXIT_S if requester else IDLE_EXIT_S):
            return 0
        # Nodes coming or going: read often, so no job is given a node already gone.
        changing = requester is not None and (requester.sent or 0) != count_nodes(nodes, target)
        bell.wait(CHANGING_EVERY_S if changing else EVERY_S)


RECONNECTS = 3
"""Connections made again in a row before a probe gives up."""
RESEND_S = 300.0
"""An unchanged request is sent again this often: a head that restarted without its
state forgets it, and sending it again changes nothing otherwise."""


def _changed(ws: Workspace, target: Any) -> bool:
    """Whether the target was deleted or made again differently since the probe began."""
    from phalanx.compute.targets import resolve_target

    try:
        return bool(resolve_target(target.name, ws) != target)
    except DatabaseUnavailable:
        raise
    except PhalanxError:
        return True


def _reconnect(target: Any, ws: Workspace) -> bool:
    import ray

    from phalanx.kinds.ray.compute import RayCompute

    with contextlib.suppress(Exception):
        ray.shutdown()
    try:
        RayCompute(target, target.token_value(ws)).connect()
    except PhalanxError as exc:
        log.error("%s", exc)
        return False
    log.info("connected to the cluster again")
    return True


class Requester:
    """What this probe asks of an elastic target's autoscaler, step by step."""

    def __init__(self, ws: Workspace, target: Any) -> None:
        from phalanx.scheduler import ledger

        self.ws = ws
        self.target = target
        row = ledger.scaling_of(ws, target.name)
        self.sent: int | None = row.requested if row is not None else None
        """What the autoscaler was last asked for (a request outlives the probe that sent it)."""
        self.sent_at = (row.requested_at or time.time()) if row is not None else time.time()
        self.needed_at = time.time()
        """The last time the queue wanted at least what was sent."""
        self.sent_again = False
        """Whether this probe has sent its standing request itself (after it began, or
        after a reconnect: the cluster may have lost it)."""
        self.last_sent = 0.0

    def step(self, busy: bool, now: float) -> bool:
        """Ask for what the queue wants now (grow at once, shrink after the idle time) and
        record the autoscaler's report; whether the request is down to ``min_nodes``."""
        from phalanx.kinds.ray.autoscaler import ask
        from phalanx.scheduler import ledger

        target = self.target
        row = ledger.scaling_of(self.ws, target.name)
        wanted = row.wanted if busy and row is not None else target.min_nodes
        wanted = max(target.min_nodes, min(wanted, target.max_nodes))
        if row is not None and row.wanted_at and self.sent is not None and row.wanted >= self.sent:
            # The scheduler wrote it each round while there was work: the idle time counts
            # from the last round that wanted these nodes, not from this probe's last look.
            self.needed_at = max(self.needed_at, row.wanted_at)
        send: int | None = None
        if self.sent is None or wanted >= self.sent:
            self.needed_at = now
            if wanted != self.sent:
                send = wanted
        elif now - self.needed_at >= target.idle_time_before_scale_down:
            send = wanted
        if (
            send is None
            and self.sent is not None
            and (not self.sent_again or now - self.last_sent > RESEND_S)
        ):
            send = self.sent  # the same request again
        if send is not None:
            report = ask(self.bundles(send))
            if send != self.sent:
                log.info("compute %s: asked the autoscaler for %d worker node(s) (was %s)",
                         target.name, send, self.sent)  # fmt: skip
            if self.sent is None or send > self.sent:
                self.sent_at = now
            self.sent = send
            self.sent_again, self.last_sent = True, now
        else:
            report = ask(None)
        ledger.record_request(self.ws, target.name, self.sent or 0, self.sent_at, report)
        return self.sent == target.min_nodes

    def withdraw(self) -> None:
        """Ask the autoscaler for nothing (the target is gone)."""
        from phalanx.kinds.ray.autoscaler import ask

        ask([])
        log.info("compute %s: withdrew its request of the autoscaler", self.target.name)

    def bundles(self, count: int) -> list[dict[str, float]]:
        """``count`` whole machines of the target's node shape (and tier)."""
        node = {"CPU": float(self.target.node_cpus), **self.target.marker()}
        if self.target.node_gpus:
            node["GPU"] = float(self.target.node_gpus)
        return [dict(node) for _ in range(count)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
