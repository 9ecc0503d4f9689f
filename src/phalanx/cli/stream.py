"""Stream a job's logs to the terminal until it ends."""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape

from phalanx.cli.render import duration, error_panel, status_text
from phalanx.jobs.control import refresh
from phalanx.jobs.logs import LogFollower
from phalanx.workspace import JobRecord, JobStatus, Workspace

POLL_S = 0.2


def stream_job(ws: Workspace, name: str, console: Console, *, all_ranks: bool = False) -> JobRecord:
    """Print the job's logs as they are written; return the job once it has ended.

    Ctrl-C (KeyboardInterrupt) propagates to the caller; the job is not touched.
    """
    paths = ws.paths(name)
    follower = LogFollower(paths, all_ranks=all_ranks)
    which = "every rank" if all_ranks else f"{paths.rank_log(0).relative_to(paths.root)}"
    console.print(
        f"[dim]job [bold]{name}[/bold] · streaming {which} · Ctrl-C stops streaming only[/]",
        soft_wrap=True,
    )
    last_status: JobStatus | None = None
    while True:
        job = refresh(ws, ws.get_job(name))
        if job.status is not last_status:
            console.print(status_text(job.status), style="dim")
            last_status = job.status
        lines = follower.flush() if job.status.is_terminal else follower.poll()
        for rank, line in lines:
            if all_ranks:
                console.print(
                    f"[blue]\\[rank {rank}][/] {escape(line)}", highlight=False, soft_wrap=True
                )
            else:
                console.print(escape(line), highlight=False, soft_wrap=True)
        if job.status.is_terminal:
            break
        time.sleep(POLL_S)
    _summary(console, job)
    return job


def _summary(console: Console, job: JobRecord) -> None:
    paths_line = f"outputs: {job.job_dir}/outputs"
    console.print(
        f"\njob [bold]{job.name}[/] ",
        status_text(job.status),
        f" in {duration(job.duration)}",
        sep="",
    )
    console.print(f"[dim]{paths_line} · logs: {job.job_dir}/user_logs[/]", soft_wrap=True)
    panel = error_panel(job)
    if panel is not None:
        console.print(panel)
