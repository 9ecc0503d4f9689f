"""How jobs look in a terminal and in ``--json``."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from phalanx.terminal.columns import print_table, short_duration, short_time
from phalanx.terminal.places import download_command, in_job_folder, output_uris
from phalanx.terminal.termsafe import rank_text
from phalanx.tracking.protocol import OUTSIDE_TARGET
from phalanx.workspace import JobRecord, JobStatus, RootCause
from phalanx.workspace.joblist import JobPage
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.trials import SWEEP_TARGET

STATUS_STYLE = {
    JobStatus.QUEUED: "dim",
    JobStatus.PREPARING: "cyan",
    JobStatus.RUNNING: "bold cyan",
    JobStatus.FINALIZING: "cyan",
    JobStatus.COMPLETED: "bold green",
    JobStatus.FAILED: "bold red",
    JobStatus.CANCELED: "yellow",
}


def status_text(status: JobStatus) -> Text:
    return Text(f"● {status}", style=STATUS_STYLE[status])


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def local_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def preparing_text(job: JobRecord, now: float | None = None) -> Text | None:
    """What a Preparing job is doing, as its supervisor last said: ``building environment
    torch-cpu:2 (pip, first use) · 12s · Collecting numpy``; ``None`` when it says
    nothing (a short step, or not Preparing). The progress is its build's output: only
    its colours reach the terminal."""
    note = job.queue
    if job.status is not JobStatus.PREPARING or not note or not note.get("reason"):
        return None
    text = Text(str(note["reason"]))
    since = note.get("since")
    if isinstance(since, (int, float)):
        text.append(f" · {duration(max(0.0, (now or time.time()) - since))}")
    if note.get("progress"):
        text.append(" · ").append_text(rank_text(str(note["progress"])))
    return text


def _shape(spec: dict[str, Any]) -> tuple[int, int]:
    spec = {**spec, **(spec.get("trial") or {})}  # a sweep's trials' shape
    nodes = int((spec.get("resources") or {}).get("instance_count") or 1)
    procs = int((spec.get("distribution") or {}).get("process_count_per_instance") or 1)
    return nodes, procs


def world_size(spec: dict[str, Any]) -> int:
    """How many ranks a job's spec runs (a sweep's: each trial's)."""
    nodes, procs = _shape(spec)
    return nodes * procs


def job_json(job: JobRecord, *, remote: bool = False) -> dict[str, Any]:
    """The stable machine-readable view of a job (``job show --json``).

    ``remote`` (the job is a server's): ``job_dir``, ``outputs_dir`` and
    ``checkpoint_dir`` are null and the log files are named inside the job's folder
    (``user_logs/std_log_process_0.txt``): the server's disk is not this machine's.
    ``outputs`` (each output's URI) and ``download`` (the command that copies them
    here) say where the files are, on either.
    """
    paths = JobPaths(Path(job.job_dir))
    nodes, procs = _shape(job.spec)
    logs = job.logs or paths.log_files()
    if remote:
        logs = {kind: [in_job_folder(job, f) for f in files] for kind, files in logs.items()}
    return {
        "name": job.name,
        "display_name": job.display_name,
        "experiment_name": job.experiment_name,
        "description": job.description,
        "tags": job.tags,
        "params": job.params or {},
        "run_tags": job.run_tags or {},
        "status": job.status.value,
        "created_at": iso(job.created_at),
        "started_at": iso(job.started_at),
        "ended_at": iso(job.ended_at),
        "duration_s": None if job.duration is None else round(job.duration, 3),
        "compute": None if job.target == OUTSIDE_TARGET else job.spec.get("compute", "local"),
        "queue": job.queue,
        "nodes": list(job.attempts[-1].nodes) if job.attempts else [],
        "instance_count": nodes,
        "process_count_per_instance": procs,
        "command": job.spec.get("command") or (job.spec.get("trial") or {}).get("command"),
        "type": "sweep" if job.target == SWEEP_TARGET else "command",
        "job_dir": None if remote else job.job_dir,
        "outputs_dir": None if remote else str(paths.outputs),
        "checkpoint_dir": None if remote else str(paths.checkpoints),
        "outputs": output_uris(job),
        "download": download_command(job.name),
        "created_by": job.created_by,
        "parent": job.parent,
        **logs,
        "attempts": [
            {
                "number": a.number,
                "status": a.status.value,
                "cause": a.cause.value if a.cause else None,
                "exit_code": a.exit_code,
                "note": a.note,
                "started_at": iso(a.started_at),
                "ended_at": iso(a.ended_at),
                "error": _error_json(job, a.error, remote),
                "nodes": list(a.nodes),
            }
            for a in job.attempts
        ],
        "error": _error_json(job, job.error, remote),
    }


def _error_json(job: JobRecord, error: RootCause | None, remote: bool) -> dict[str, Any] | None:
    if error is None:
        return None
    shown = error.to_dict()
    if remote and shown.get("log_file"):
        shown["log_file"] = in_job_folder(job, str(shown["log_file"]))
    return shown


def error_panel(job: JobRecord, traceback_lines: int = 15, *, remote: bool = False) -> Panel | None:
    error = job.error
    if error is None:
        return None
    where = []
    if error.rank is not None:
        where.append(f"rank {error.rank}")
        if error.node_rank is not None:
            where.append(f"node {error.node_rank}, local rank {error.local_rank}")
    elif error.node_rank is not None:
        where.append(f"node {error.node_rank}")
    if error.signal:
        where.append(f"signal {error.signal}")
    elif error.exit_code is not None:
        where.append(f"exit code {error.exit_code}")
    # The message and the traceback are the rank's own text: no escape sequence gets through.
    body: list[Any] = [rank_text(error.message, style="bold")]
    if where:
        body.insert(0, Text(" · ".join(where), style="red"))
    if error.traceback:
        tail = "\n".join(error.traceback.rstrip().splitlines()[-traceback_lines:])
        body.append(rank_text(tail, style="dim"))
    if error.log_file:
        log = in_job_folder(job, error.log_file) if remote else error.log_file
        body.append(Text(f"log: {log}", style="dim"))
    return Panel(Group(*body), title="root cause", border_style="red", expand=False)


def show_job(console: Console, job: JobRecord, *, remote: bool = False) -> None:
    """The job as ``job show`` prints it; ``remote`` (a server's job): its files by URI
    and the commands that fetch them, never the server's paths."""
    paths = JobPaths(Path(job.job_dir))
    nodes, procs = _shape(job.spec)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("job", Text.assemble((job.name, "bold"), "  ", status_text(job.status)))
    # Names a user chose (an MLflow run_name too) are text: "[/x]" is no rich markup.
    if job.display_name:
        head.add_row("display name", Text(job.display_name))
    head.add_row("experiment", Text(job.experiment_name))
    if job.created_by:
        head.add_row("created by", Text(job.created_by))
    if job.description:
        head.add_row("description", Text(job.description))
    # MLflow's own tags (mlflow.user, mlflow.source.*) say what the rows here say already.
    run_tags = {k: v for k, v in (job.run_tags or {}).items() if not k.startswith("mlflow.")}
    tags = {**job.tags, **run_tags}
    # What a run logged is the job's text, not phalanx's: shown without its escapes.
    if tags:
        head.add_row("tags", rank_text(", ".join(f"{k}={v}" for k, v in tags.items())))
    if job.params:
        head.add_row("params", rank_text(", ".join(f"{k}={v}" for k, v in job.params.items())))
    head.add_row("created", local_time(job.created_at))
    head.add_row("duration", duration(job.duration))
    if job.target == OUTSIDE_TARGET:
        head.add_row("compute", "none: an MLflow run logged from outside a job")
    elif job.target == SWEEP_TARGET:
        head.add_row(
            "compute",
            f"{job.spec.get('compute', 'local')} · each trial {nodes} node(s) × {procs} "
            "process(es)",
        )
    else:
        head.add_row(
            "compute",
            f"{job.spec.get('compute', 'local')} · {nodes} node(s) × {procs} process(es)",
        )
    if job.status is JobStatus.QUEUED and job.queue:
        place = job.queue.get("position")
        head.add_row("queue", Text(f"#{place} · {job.queue.get('reason')}" if place else
                                   str(job.queue.get("reason"))))  # fmt: skip
    if (preparing := preparing_text(job)) is not None:
        head.add_row("preparing", preparing)
        if log := (job.queue or {}).get("log"):  # a system log, in the job's folder
            head.add_row("  its log", Text(str(log if remote else Path(job.job_dir) / log)))
    if job.attempts and job.attempts[-1].nodes:
        head.add_row("nodes", node_devices(job.attempts[-1].nodes))
    command = job.spec.get("command") or (job.spec.get("trial") or {}).get("command", "")
    head.add_row("command", Text(str(command).strip()))
    if job.parent:
        head.add_row("sweep", Text(job.parent))
    logs = (job.logs or paths.log_files())["user_logs"]
    if remote:
        head.add_row(
            "user logs", f"{len(logs)} file(s) · phalanx job stream {job.name} --all-ranks"
        )
        head.add_row("outputs", download_command(job.name))
        for key, uri in output_uris(job).items():
            fetch = (
                ""
                if not uri.startswith("azureml://jobs/")
                else " · " + download_command(job.name, key)
            )
            head.add_row(f"  {key}", Text(uri + fetch))
    else:
        head.add_row("job folder", Text(job.job_dir))
        head.add_row("user logs", f"{paths.user_logs} ({len(logs)} file(s))")
        head.add_row("outputs", str(paths.outputs))
    console.print(head)
    if job.attempts:
        console.print("attempts", highlight=False)
        rows = []
        for a in job.attempts:
            end = a.ended_at if a.ended_at is not None else time.time()
            rows.append((str(a.number), a.status.value, a.cause.value if a.cause else "-",
                         "-" if a.exit_code is None else str(a.exit_code),
                         local_time(a.started_at), duration(end - a.started_at)))  # fmt: skip
        # What came next (resumed, retried, …) is a sentence: under its attempt's row.
        notes = [a.note or None for a in job.attempts]
        headers = ("#", "STATUS", "CAUSE", "EXIT", "STARTED", "DURATION")
        print_table(console, headers, rows, optional=("EXIT", "CAUSE"), notes=notes, indent=2)
    panel = error_panel(job, remote=remote)
    if panel is not None:
        console.print(panel)


def node_devices(nodes: tuple[dict[str, Any], ...]) -> Text:
    """``node 0: host-a GPUs 0,1 · node 1: host-a GPUs 2,3``."""
    parts = []
    for k, node in enumerate(nodes):
        gpus = node.get("gpus") or []
        what = f"GPUs {','.join(gpus)}" if gpus else f"{node.get('cpus', 0):g} CPU slots"
        parts.append(f"node {k}: {node.get('host')} {what}")
    return Text(" · ".join(parts))


def queue_place(job: JobRecord) -> str:
    """``#3`` for a queued job, ``-`` otherwise."""
    if job.status is not JobStatus.QUEUED or not job.queue or not job.queue.get("position"):
        return "-"
    return f"#{job.queue['position']}"


def list_jobs(console: Console, page: JobPage) -> None:
    """The page as a table that fits the terminal (whole columns give way, never a word),
    then which jobs of how many it shows and the cursor of the next page."""
    if not page.jobs:
        console.print("no jobs" if page.total == 0 else f"none here of {page.total:,} jobs")
        return
    headers = ["NAME", "STATUS", "QUEUE", "USER", "EXPERIMENT", "DISPLAY NAME", "CREATED",
               "DURATION"]  # fmt: skip
    rows = [
        [
            job.name,
            job.status.value,
            queue_place(job),
            job.created_by or "-",
            job.experiment_name,
            job.display_name or "-",
            short_time(job.created_at),
            short_duration(job.duration),
        ]
        for job in page.jobs
    ]
    optional = ["DISPLAY NAME", "QUEUE", "USER", "CREATED", "EXPERIMENT"]
    print_table(console, headers, rows, optional=optional)  # users' text shown, never obeyed
    shown = f"{page.start + 1}-{page.start + len(page.jobs)}"
    console.print(f"{shown} of {page.total:,} jobs", style="dim", highlight=False)
    if page.next is not None:
        console.print(f"next page: --cursor {page.next}", style="dim", highlight=False,
                      soft_wrap=True)  # fmt: skip
