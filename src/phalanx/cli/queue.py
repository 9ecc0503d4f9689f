"""``phalanx queue``: every target's capacity, what runs where, and what waits (and why).

With ``PHALANX_SERVER`` set, the queues are the server's scheduler's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from phalanx.compute.targets import LocalTarget, Target
from phalanx.scheduler import ledger
from phalanx.scheduler.capacity import local_capacity
from phalanx.scheduler.model import gib
from phalanx.workspace import JobStatus, Workspace

console = Console()


def queue_view(ws: Workspace, target: Target) -> dict[str, Any]:
    """What ``target`` has, what holds it (job, node, host, devices) and its queue in order."""
    capacity: dict[str, Any] | None = None
    if isinstance(target, LocalTarget):
        cap = local_capacity(target, ws)
        capacity = {
            "hosts": [
                {"host": h.name, "gpus": list(h.gpus), "cpus": h.cpus, "memory": h.memory}
                for h in cap.hosts
            ]
        }
    else:
        rows = ws.query(
            "SELECT hosts_json, read_at FROM capacities WHERE target = :target",
            {"target": target.name},
        )
        if rows:
            hosts = json.loads(rows[0]["hosts_json"])
            capacity = {
                "hosts": [
                    {"host": h["host"], "gpus": [str(i) for i in range(h["gpus"])],
                     "cpus": h["cpus"], "memory": h.get("memory", 0)}
                    for h in hosts
                ],
                "read_s_ago": round(time.time() - rows[0]["read_at"], 1),
            }  # fmt: skip
    running = []
    for job in ledger.holding(ws, target.name):
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
                }
            )
    rows = ws.query(
        "SELECT name, created_at, queue_json, request_json FROM jobs WHERE status = :queued"
        " AND COALESCE(target, 'local') = :target AND NOT EXISTS (SELECT 1 FROM allocations a"
        " WHERE a.job_name = jobs.name)",
        {"queued": JobStatus.QUEUED.value, "target": target.name},
    )
    queued = []
    for row in rows:
        queue = json.loads(row["queue_json"]) if row["queue_json"] else {}
        queued.append(
            {
                "job": row["name"],
                "position": queue.get("position"),
                "waiting_s": round(time.time() - row["created_at"], 1),
                "request": json.loads(row["request_json"]) if row["request_json"] else None,
                "reason": queue.get("reason") or "not looked at yet",
            }
        )
    queued.sort(key=lambda q: (q["position"] is None, q["position"] or 0, q["job"]))
    return {"target": target.name, "capacity": capacity, "running": running, "queued": queued}


def render_queue(out: Console, view: dict[str, Any]) -> None:
    """The view of :func:`queue_view` as text."""
    out.print(f"[bold]compute {view['target']}[/bold]")
    capacity = view.get("capacity")
    if capacity:
        for host in capacity["hosts"]:
            gpus = ",".join(host["gpus"]) or "none"
            memory = f"; {gib(host['memory'])} memory" if host.get("memory") else ""
            out.print(f"  {host['host']}: GPUs {gpus}; {host['cpus']:g} CPU slots{memory}")
        if "read_s_ago" in capacity:
            out.print(f"  (the Ray cluster's nodes as read {capacity['read_s_ago']:.0f} s ago)")
    else:
        out.print("  capacity: not read yet (the Ray cluster places what it can)")
    running = Table(box=None, header_style="bold", title="running", title_justify="left")
    for column in ("JOB", "NODE", "HOST", "GPUS", "CPUS", ""):
        running.add_column(column)
    for r in view["running"]:
        running.add_row(
            r["job"],
            str(r["node"]),
            r["host"],
            ",".join(r["gpus"]) or "-",
            f"{r['cpus']:g}",
            "leaving (preempted)" if r["leaving"] else "",
        )
    out.print(running if view["running"] else "  nothing running")
    queued = Table(box=None, header_style="bold", title="queue", title_justify="left")
    for column in ("#", "JOB", "WAITING", "WHY"):
        queued.add_column(column)
    for q in view["queued"]:
        queued.add_row(str(q["position"] or "-"), q["job"], f"{q['waiting_s']:.0f}s", q["reason"])
    out.print(queued if view["queued"] else "  nothing queued")


@click.command("queue")
@click.option("--compute", "name", help="One target only.")
@click.option("--json", "as_json", is_flag=True)
def queue_cmd(name: str | None, as_json: bool) -> int:
    """Every compute target: what it has, what runs where, and its queue."""
    from phalanx.cli.where import targets

    # The command to run after a reboot: it starts the scheduler, which recovers what died.
    views = targets().queue(name)
    if as_json:
        click.echo(json.dumps(views, indent=2))
        return 0
    for view in views:
        render_queue(console, view)
    return 0
