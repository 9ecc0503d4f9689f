"""``phalanx queue``: every target's capacity, what runs where, and what waits (and why).

With ``PHALANX_SERVER`` set, the queues are the server's scheduler's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.console import Console

from phalanx.scheduler.model import gib
from phalanx.terminal.columns import print_table, short_duration, starts_in

console = Console()


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
    if scaling := view.get("scaling"):
        out.print(f"  {scaling_line(scaling)}", highlight=False)
    out.print("  running" if view["running"] else "  nothing running", highlight=False)
    if view["running"]:
        headers = ("JOB", "NODE", "HOST", "GPUS", "CPUS", "USER", "FOR", "LIMIT")
        rows = [
            (
                r["job"],
                str(r["node"]),
                r["host"],
                ",".join(r["gpus"]) or "-",
                f"{r['cpus']:g}",
                r.get("created_by") or "-",
                short_duration(r.get("held_s")),
                short_duration(r.get("time_limit_s")),
            )
            for r in view["running"]
        ]
        notes = ["leaving (preempted)" if r["leaving"] else None for r in view["running"]]
        print_table(out, headers, rows, optional=RUNNING_OPTIONAL, notes=notes, indent=2)
    out.print("  queue" if view["queued"] else "  nothing queued", highlight=False)
    if view["queued"]:
        queued_headers = (
            "#",
            "JOB",
            "USER",
            "PRIORITY",
            "TIER",
            "ASKS",
            "LIMIT",
            "WAITING",
            "START",
        )
        now = time.time()
        queued_rows = [
            (
                str(q["position"] or "-"),
                q["job"],
                q.get("created_by") or "-",
                q.get("priority", "-"),
                q.get("tier", "-"),
                asks(q.get("request")),
                short_duration(q.get("time_limit_s")),
                short_duration(q["waiting_s"]),
                starts_in(q.get("start"), now),
            )
            for q in view["queued"]
        ]
        # Why it waits goes under its row: a sentence, wrapped at spaces, never squeezed.
        notes = [q["reason"] for q in view["queued"]]
        print_table(
            out, queued_headers, queued_rows, optional=QUEUED_OPTIONAL, notes=notes, indent=2
        )


# Left out first when a terminal is too narrow for every column (whole columns, never
# part of a name).
RUNNING_OPTIONAL = ("LIMIT", "CPUS", "NODE", "HOST", "FOR", "USER")
# A job's tier goes first (most jobs are "standard"); its estimated start goes last.
QUEUED_OPTIONAL = ("TIER", "LIMIT", "ASKS", "WAITING", "PRIORITY", "USER", "START")


def asks(request: dict[str, Any] | None) -> str:
    """A request as ``2×4 GPU`` (nodes × each node's GPUs, else CPU slots)."""
    request = request or {"nodes": 1}
    nodes = int(request.get("nodes") or 1)
    if request.get("gpus"):
        return f"{nodes}×{request['gpus']} GPU"
    return f"{nodes}×{float(request.get('cpus') or 0):g} CPU"


def scaling_line(s: dict[str, Any]) -> str:
    """``elastic: 0 → 2 worker nodes (min 0, max 4), requested 40 s ago; adding 2``."""
    now = "?" if s["nodes"] is None else str(s["nodes"])
    asked = s["requested"] if s["requested"] is not None else s["wanted"]
    kind = "low-priority worker nodes" if s.get("tier") == "low_priority" else "worker nodes"
    line = f"elastic: {now} → {asked} {kind} (min {s['min_nodes']}, max {s['max_nodes']}"
    line += f", idle {s['idle_time_before_scale_down']} s before scale-down)"
    if s["requested_s_ago"] is not None:
        line += f", requested {s['requested_s_ago']:.0f} s ago"
    if s["adding"]:
        line += f"; adding {s['adding']}"
    if s["trouble"]:
        line += f"; Ray's autoscaler: {s['trouble']}"
    return line


@click.command("queue")
@click.option("--compute", "name", help="One target only.")
@click.option("--json", "as_json", is_flag=True)
def queue_cmd(name: str | None, as_json: bool) -> int:
    """Every compute target: what it has, what runs where, and its queue."""
    from phalanx.client.backends import targets

    # The command to run after a reboot: it starts the scheduler, which recovers what died.
    views = targets().queue(name)
    if as_json:
        click.echo(json.dumps(views, indent=2))
        return 0
    for view in views:
        render_queue(console, view)
    return 0
