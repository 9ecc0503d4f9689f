"""The queue and the allocations, as the workspace database keeps them.

Every statement the scheduler sends is here: the queue (a job's ``target``,
``request_json``, ``priority``, ``tier``, ``timeout`` and ``queue_json``), the
``allocations``, the probes' ``capacities``, and the scheduler's reads of the
jobs it watches. A job's own record and attempts are the workspace store's
(:class:`phalanx.workspace.Workspace`).

A job's allocation is one row per node (``allocations``): its host, devices and
CPU slots. Rows are written by the scheduler when it starts a job, marked
*releasing* when it preempts one, and deleted when the job gives its devices
back (after a preemption) or ends (``Workspace.set_status`` deletes them in the
same transaction as a terminal status, whoever ends the job). A decision is
applied in one write transaction that checks every job it starts is still
Queued and holds nothing, so concurrent creates, cancels and supervisors can
never leave a device with two jobs. A supervisor's own writes here (giving its
devices back, recording where its nodes went) are fenced by its job's lease and
repeated while the database is unavailable, as its other writes are.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from phalanx.scheduler.model import (
    DEFAULT_GRACE_S,
    DEFAULT_PRIORITY,
    DEFAULT_TIER,
    Decision,
    NodeGrant,
    QueuedJob,
    Request,
    RunningJob,
    leaves_by,
)
from phalanx.workspace import JobStatus, QueueEntry, Workspace

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

_HOLDING = (JobStatus.QUEUED, JobStatus.PREPARING, JobStatus.RUNNING, JobStatus.FINALIZING)


def targets_with_work(ws: Workspace) -> list[str]:
    """Targets that have a queued job or a job holding devices."""
    rows = ws.query(
        "SELECT DISTINCT COALESCE(target, 'local') AS target FROM jobs WHERE status = :queued "
        "UNION SELECT DISTINCT target FROM allocations",
        {"queued": JobStatus.QUEUED.value},
    )
    return sorted(r["target"] for r in rows)


def unrequested(ws: Workspace) -> list[str]:
    """Queued jobs recorded before the scheduler existed (schema < 7): they ask for
    nothing yet."""
    rows = ws.query(
        "SELECT name FROM jobs WHERE status = :queued AND request_json IS NULL",
        {"queued": JobStatus.QUEUED.value},
    )
    return [row["name"] for row in rows]


def fill_request(ws: Workspace, name: str, entry: QueueEntry) -> None:
    """Record where such a job queues and what it asks for (unless it already does)."""
    with ws.transaction() as tx:
        tx.execute(
            "UPDATE jobs SET target = :target, request_json = :request, priority = :priority,"
            " tier = :tier, timeout = :timeout WHERE name = :name AND request_json IS NULL",
            {"target": entry.target, "request": json.dumps(entry.request),
             "priority": entry.priority, "tier": entry.tier, "timeout": entry.timeout,
             "name": name},
        )  # fmt: skip


def supervised(ws: Workspace, *, every_queued: bool) -> list[str]:
    """Jobs not over whose supervisor the scheduler watches: those that recorded one and
    are Preparing, Running or Finalizing, or Queued holding devices (admitted, or waiting
    for Ray); with ``every_queued``, Queued ones holding nothing too."""
    sql = (
        "SELECT name FROM jobs WHERE supervisor_pid IS NOT NULL"
        " AND (status IN (:preparing, :running, :finalizing)"
    )
    if every_queued:
        sql += " OR status = :queued"
    else:
        sql += " OR (status = :queued AND EXISTS (SELECT 1 FROM allocations a WHERE "
        sql += "a.job_name = jobs.name))"
    statuses = (JobStatus.PREPARING, JobStatus.RUNNING, JobStatus.FINALIZING, JobStatus.QUEUED)
    rows = ws.query(sql + ")", {s.value.lower(): s.value for s in statuses})
    return [row["name"] for row in rows]


def unsupervised(ws: Workspace) -> list[str]:
    """Queued jobs holding devices that recorded no supervisor (its start failed)."""
    rows = ws.query(
        "SELECT DISTINCT a.job_name FROM allocations a JOIN jobs j ON j.name = a.job_name "
        "WHERE j.supervisor_pid IS NULL AND j.status = :queued",
        {"queued": JobStatus.QUEUED.value},
    )
    return [row["job_name"] for row in rows]


def queued(ws: Workspace, target: str) -> list[QueuedJob]:
    """The jobs waiting on ``target`` (Queued and holding nothing)."""
    rows = ws.query(
        "SELECT name, created_at, request_json, priority, tier, timeout, started_at FROM jobs "
        "WHERE status = :queued AND COALESCE(target, 'local') = :target AND cancel_requested = 0 "
        "AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.job_name = jobs.name)",
        {"queued": JobStatus.QUEUED.value, "target": target},
    )
    jobs = []
    for row in rows:
        request = json.loads(row["request_json"]) if row["request_json"] else {"nodes": 1}
        jobs.append(
            QueuedJob(
                name=row["name"],
                request=Request(
                    nodes=int(request["nodes"]),
                    gpus=int(request.get("gpus", 0)),
                    cpus=float(request.get("cpus", 0.0)),
                    memory=int(request.get("memory", 0)),
                ),
                submitted=row["created_at"],
                priority=row["priority"] if row["priority"] is not None else 2,
                tier=row["tier"] if row["tier"] is not None else 3,
                timeout=row["timeout"],
            )
        )
    return jobs


def holding(ws: Workspace, target: str) -> list[RunningJob]:
    """The jobs holding devices of ``target``, with what each node holds."""
    return _holding(ws, "a.target = :target", {"target": target})


def holding_elsewhere(ws: Workspace, host: str, target: str) -> list[RunningJob]:
    """The jobs of targets other than ``target`` holding part of ``host`` (a machine
    several local targets share), with what each node holds and its target."""
    return _holding(ws, "a.host = :host AND a.target != :target", {"host": host, "target": target})


def _holding(ws: Workspace, where: str, params: dict[str, Any]) -> list[RunningJob]:
    rows = ws.query(
        "SELECT a.job_name, a.node, a.target, a.host, a.gpus_json, a.cpus, a.memory,"
        " a.granted_at, a.releasing_at,"
        " j.priority, j.tier, j.timeout, j.started_at FROM allocations a "
        f"JOIN jobs j ON j.name = a.job_name WHERE {where}"
        " ORDER BY a.job_name, a.node",
        params,
    )
    by_job: dict[str, list[RowMapping]] = {}
    for row in rows:
        by_job.setdefault(row["job_name"], []).append(row)
    jobs = []
    for name, group in by_job.items():
        first = group[0]
        nodes = tuple(
            NodeGrant(r["host"], tuple(json.loads(r["gpus_json"])), r["cpus"], r["memory"] or 0)
            for r in group
        )
        # Since it was given its devices (an over-estimate for a job that ran before it was
        # preempted: safe for backfilling, which only ever starts less then).
        started = first["granted_at"]
        timeout = first["timeout"]
        releasing = first["releasing_at"]
        ends_by = started + timeout if timeout else math.inf
        if releasing is not None:
            ends_by = releasing
        jobs.append(
            RunningJob(
                name=name,
                nodes=nodes,
                priority=first["priority"] if first["priority"] is not None else 2,
                tier=first["tier"] if first["tier"] is not None else 3,
                ends_by=ends_by,
                releasing=releasing is not None,
                started=first["granted_at"],
                target=first["target"],
            )
        )
    return jobs


def apply(ws: Workspace, target: str, decision: Decision) -> list[str]:
    """Carry out ``decision`` in one transaction; returns the jobs actually started.

    A job it preempts is marked releasing until ``decision.leave_by`` (the end of its
    grace), the time the pass's start estimates counted on and later passes read back.
    """
    now = time.time()
    started: list[str] = []
    queued_ = JobStatus.QUEUED.value
    with ws.transaction() as tx:
        for name, nodes in decision.admit.items():
            row = tx.first(
                "SELECT status, cancel_requested FROM jobs WHERE name = :name", {"name": name}
            )
            held = tx.first(
                "SELECT 1 AS held FROM allocations WHERE job_name = :name", {"name": name}
            )
            if row is None or row["status"] != queued_ or row["cancel_requested"] or held:
                continue  # canceled or started meanwhile
            for node, grant in enumerate(nodes):
                tx.execute(
                    "INSERT INTO allocations (job_name, node, target, host, gpus_json, cpus,"
                    " memory, granted_at) VALUES (:name, :node, :target, :host, :gpus, :cpus,"
                    " :memory, :now)",
                    {"name": name, "node": node, "target": target, "host": grant.host,
                     "gpus": json.dumps(list(grant.gpus)), "cpus": grant.cpus,
                     "memory": grant.memory, "now": now},
                )  # fmt: skip
            tx.execute("UPDATE jobs SET queue_json = NULL WHERE name = :name", {"name": name})
            started.append(name)
        for name, for_job in decision.preempt.items():
            until = decision.leave_by.get(name, leaves_by(now, DEFAULT_GRACE_S))
            marked = tx.execute(
                "UPDATE allocations SET releasing_at = :until WHERE job_name = :name"
                " AND releasing_at IS NULL",
                {"until": until, "name": name},
            ).rowcount
            if not marked:
                continue  # it gave its devices back meanwhile: nothing to preempt
            request = {"nodes": None, "at": now, "for": for_job}
            tx.execute(
                "UPDATE jobs SET preempt_json = :request WHERE name = :name"
                " AND preempt_json IS NULL",
                {"request": json.dumps(request), "name": name},
            )
        shown = {
            row["name"]: row["queue_json"]
            for row in tx.all(
                "SELECT name, queue_json FROM jobs WHERE status = :queued", {"queued": queued_}
            )
        }
        for name, reason in decision.waiting.items():
            queue = json.dumps(
                {
                    "position": decision.position.get(name),
                    "reason": reason,
                    "start": decision.starts.get(name),
                }
            )
            if name in shown and shown[name] != queue:  # only what changed is written
                tx.execute(
                    "UPDATE jobs SET queue_json = :queue WHERE name = :name AND status = :queued",
                    {"queue": queue, "name": name, "queued": queued_},
                )
    return started


def grant_of(ws: Workspace, name: str) -> tuple[NodeGrant, ...]:
    """What the job holds, node by node (empty when it holds nothing)."""
    rows = ws.query(
        "SELECT host, gpus_json, cpus, memory FROM allocations WHERE job_name = :name"
        " ORDER BY node",
        {"name": name},
    )
    return tuple(
        NodeGrant(r["host"], tuple(json.loads(r["gpus_json"])), r["cpus"], r["memory"] or 0)
        for r in rows
    )


def is_releasing(ws: Workspace, name: str) -> bool:
    """Whether the scheduler asked the job to give its devices back."""
    rows = ws.query(
        "SELECT 1 AS releasing FROM allocations WHERE job_name = :name"
        " AND releasing_at IS NOT NULL",
        {"name": name},
    )
    return bool(rows)


def release(ws: Workspace, name: str, *, requeue: bool) -> None:
    """Give the job's devices back; with ``requeue`` it waits in the queue again."""
    ws.database.retrying(lambda: _release(ws, name, requeue))


def _release(ws: Workspace, name: str, requeue: bool) -> None:
    with ws.transaction() as tx:
        ws.fence(tx, name)
        tx.execute("DELETE FROM allocations WHERE job_name = :name", {"name": name})
        if requeue:
            tx.execute(
                "UPDATE jobs SET status = :queued WHERE name = :name"
                " AND status IN (:h0, :h1, :h2, :h3)",
                {"queued": JobStatus.QUEUED.value, "name": name,
                 **{f"h{i}": s.value for i, s in enumerate(_HOLDING)}},
            )  # fmt: skip


def set_hosts(ws: Workspace, name: str, hosts: list[str]) -> None:
    """Record where a cluster really placed the job's nodes (Ray chooses, not phalanx).

    Device ids on such a target are only counts; each node takes the lowest ids
    no other job holds on its new host, so per-host accounting stays exact.
    """
    ws.database.retrying(lambda: _set_hosts(ws, name, hosts))


def _set_hosts(ws: Workspace, name: str, hosts: list[str]) -> None:
    with ws.transaction() as tx:
        ws.fence(tx, name)
        rows = tx.all(
            "SELECT node, target, gpus_json FROM allocations WHERE job_name = :name ORDER BY node",
            {"name": name},
        )
        for row, host in zip(rows, hosts, strict=False):
            count = len(json.loads(row["gpus_json"]))
            taken = {
                gpu
                for other in tx.all(
                    "SELECT gpus_json FROM allocations WHERE target = :target AND host = :host"
                    " AND NOT (job_name = :name AND node = :node)",
                    {"target": row["target"], "host": host, "name": name, "node": row["node"]},
                )
                for gpu in json.loads(other["gpus_json"])
            }
            ids: list[str] = []
            candidate = 0
            while len(ids) < count:
                if str(candidate) not in taken:
                    ids.append(str(candidate))
                candidate += 1
            tx.execute(
                "UPDATE allocations SET host = :host, gpus_json = :gpus WHERE job_name = :name"
                " AND node = :node",
                {"host": host, "gpus": json.dumps(ids), "name": name, "node": row["node"]},
            )


def record_capacity(ws: Workspace, target: str, hosts: list[dict[str, Any]]) -> None:
    """Keep a probe's reading of a cluster's nodes (the newest replaces the one before)."""
    with ws.transaction() as tx:
        tx.execute(
            "INSERT INTO capacities (target, hosts_json, read_at) VALUES (:target, :hosts, :now)"
            " ON CONFLICT (target) DO UPDATE SET hosts_json = excluded.hosts_json,"
            " read_at = excluded.read_at",
            {"target": target, "hosts": json.dumps(hosts), "now": time.time()},
        )


@dataclass(frozen=True)
class Waiting:
    """A job waiting in a target's queue, as the queue's views show it."""

    name: str
    created_at: float
    queue: dict[str, Any]
    """Its place, why it waits and when it should start (``position``, ``reason``,
    ``start``: Unix seconds or ``None``), once the scheduler looked."""
    request: dict[str, Any] | None
    priority: int = DEFAULT_PRIORITY
    tier: int = DEFAULT_TIER
    timeout: float | None = None
    created_by: str | None = None


def waiting(ws: Workspace, target: str) -> list[Waiting]:
    """The jobs Queued on ``target`` that hold nothing, with their place and reason."""
    rows = ws.query(
        "SELECT name, created_at, queue_json, request_json, priority, tier, timeout, created_by"
        " FROM jobs WHERE status = :queued AND COALESCE(target, 'local') = :target"
        " AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.job_name = jobs.name)",
        {"queued": JobStatus.QUEUED.value, "target": target},
    )
    return [
        Waiting(
            name=r["name"],
            created_at=r["created_at"],
            queue=json.loads(r["queue_json"]) if r["queue_json"] else {},
            request=json.loads(r["request_json"]) if r["request_json"] else None,
            priority=r["priority"] if r["priority"] is not None else DEFAULT_PRIORITY,
            tier=r["tier"] if r["tier"] is not None else DEFAULT_TIER,
            timeout=r["timeout"],
            created_by=r["created_by"],
        )
        for r in rows
    ]


def holders(ws: Workspace, target: str) -> dict[str, tuple[str | None, float | None]]:
    """The jobs holding devices of ``target`` → who made each and its time limit."""
    rows = ws.query(
        "SELECT DISTINCT j.name, j.created_by, j.timeout FROM jobs j"
        " JOIN allocations a ON a.job_name = j.name WHERE a.target = :target",
        {"target": target},
    )
    return {r["name"]: (r["created_by"], r["timeout"]) for r in rows}


def capacity_reading(ws: Workspace, target: str) -> tuple[list[dict[str, Any]], float] | None:
    """A probe's last reading of a cluster's nodes, and when it was made; ``None`` if none."""
    rows = ws.query(
        "SELECT hosts_json, read_at FROM capacities WHERE target = :target", {"target": target}
    )
    if not rows:
        return None
    return json.loads(rows[0]["hosts_json"]), float(rows[0]["read_at"])


def record_wanted(ws: Workspace, target: str, wanted: int) -> None:
    """Keep the worker nodes an elastic target's queue wants (the scheduler's side)."""
    with ws.transaction() as tx:
        tx.execute(
            "INSERT INTO scaling (target, wanted, wanted_at) VALUES (:target, :wanted, :now)"
            " ON CONFLICT (target) DO UPDATE SET wanted = excluded.wanted,"
            " wanted_at = excluded.wanted_at",
            {"target": target, "wanted": wanted, "now": time.time()},
        )


def record_request(
    ws: Workspace, target: str, requested: int, requested_at: float, report: dict[str, Any]
) -> None:
    """Keep what was asked of an elastic target's autoscaler and what it reported (the
    probe's side)."""
    with ws.transaction() as tx:
        tx.execute(
            "INSERT INTO scaling (target, requested, requested_at, report_json, reported_at)"
            " VALUES (:target, :requested, :at, :report, :now) ON CONFLICT (target) DO UPDATE"
            " SET requested = excluded.requested, requested_at = excluded.requested_at,"
            " report_json = excluded.report_json, reported_at = excluded.reported_at",
            {"target": target, "requested": requested, "at": requested_at,
             "report": json.dumps(report), "now": time.time()},
        )  # fmt: skip


@dataclass(frozen=True)
class Scaling:
    """An elastic target's row: what its queue wants, what was asked, what was reported."""

    wanted: int
    wanted_at: float | None
    requested: int | None
    requested_at: float | None
    report: dict[str, Any]
    reported_at: float | None


def scaling_of(ws: Workspace, target: str) -> Scaling | None:
    rows = ws.query("SELECT * FROM scaling WHERE target = :target", {"target": target})
    if not rows:
        return None
    row = rows[0]
    return Scaling(
        wanted=int(row["wanted"]),
        wanted_at=row["wanted_at"],
        requested=row["requested"],
        requested_at=row["requested_at"],
        report=json.loads(row["report_json"]) if row["report_json"] else {},
        reported_at=row["reported_at"],
    )


@dataclass(frozen=True)
class Waits:
    """What one user has waiting: what a server's ``--max-queued-per-user`` bounds."""

    queued: int
    """Jobs Queued and holding nothing (a sweep's trials are not counted: its own
    ``max_concurrent_trials`` bounds them)."""
    sweeps: int
    """Sweeps not over (each makes trials)."""

    @property
    def total(self) -> int:
        return self.queued + self.sweeps


def waits_of(ws: Workspace, user: str | None) -> Waits:
    """What ``user`` (``None``: jobs made without a user) has waiting."""
    from phalanx.workspace.trials import SWEEP_TARGET

    owner = "created_by IS NULL" if user is None else "created_by = :user"
    rows = ws.query(
        "SELECT SUM(CASE WHEN status = :queued AND NOT EXISTS (SELECT 1 FROM allocations a"
        " WHERE a.job_name = jobs.name) THEN 1 ELSE 0 END) AS queued,"
        " SUM(CASE WHEN target = :sweep AND status IN (:h0, :h1, :h2, :h3) THEN 1 ELSE 0 END)"
        f" AS sweeps FROM jobs WHERE parent_name IS NULL AND {owner}",
        {"user": user, "queued": JobStatus.QUEUED.value, "sweep": SWEEP_TARGET,
         **{f"h{i}": s.value for i, s in enumerate(_HOLDING)}},
    )  # fmt: skip
    return Waits(queued=int(rows[0]["queued"] or 0), sweeps=int(rows[0]["sweeps"] or 0))
