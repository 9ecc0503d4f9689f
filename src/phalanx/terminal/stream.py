"""Stream a job's logs to the terminal until it ends."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.segment import Segment, Segments
from rich.style import Style
from rich.text import Text

from phalanx.jobs.logs import LogLine
from phalanx.service.jobs import Jobs
from phalanx.terminal.columns import starts_in
from phalanx.terminal.places import download_command
from phalanx.terminal.render import (
    duration,
    error_panel,
    preparing_text,
    status_text,
    world_size,
)
from phalanx.terminal.termsafe import rank_segments, rank_text
from phalanx.workspace import JobRecord, JobStatus
from phalanx.workspace.layout import JobPaths

POLL_S = 0.2
REPEAT_S = 30.0
"""A step whose progress does not change (a large wheel downloading) is shown again this
often, with the time it has taken."""
_RANK = Style(color="blue")
_DIM = Style(dim=True)


def stream_job(
    jobs: Jobs, name: str, console: Console, *, all_ranks: bool = False, timestamps: bool = False
) -> JobRecord:
    """Print the job's logs as they are written; return the job once it has ended.

    With every rank, each poll's lines come in the order they were written (the logs'
    time indexes); ``timestamps`` begins each line with its time (``-`` where unknown).
    Ctrl-C (KeyboardInterrupt) propagates to the caller; the job is not touched.
    """
    follower = jobs.follower(name, all_ranks=all_ranks, timed=all_ranks or timestamps)
    paths = JobPaths(Path(name))
    which = "every rank" if all_ranks else f"{paths.rank_log(0).relative_to(paths.root)}"
    console.print(
        f"[dim]job [bold]{name}[/bold] · streaming {which} · Ctrl-C stops streaming only[/]",
        soft_wrap=True,
    )
    last_status: JobStatus | None = None
    standing = _Standing(console)
    while True:
        job = jobs.get(name)
        if job.status is not last_status:
            console.print(status_text(job.status), style="dim")
            last_status = job.status
        standing.show(job)
        # At the end, flush reads every file to its end, a bounded poll at a time.
        lines = follower.flush() if job.status.is_terminal else follower.poll()
        for line in lines:
            console.print(Segments(_line(line, all_ranks, console, timestamps)), soft_wrap=True)
        if job.status.is_terminal:
            break
        if not follower.behind:  # a rank that writes faster than one poll reads is caught up
            time.sleep(POLL_S)
    _summary(console, job, remote=jobs.remote, all_ranks=all_ranks)
    return job


class _Standing:
    """Where a job that does not run yet stands, printed as it changes: a Queued job's
    place and why it waits, a Preparing job's step (a build, a pull) and its progress,
    the latter again every :data:`REPEAT_S` while it does not change."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._wait: tuple[object, object, object] | None = None
        self._step: tuple[object, object] | None = None
        self._step_shown = 0.0

    def show(self, job: JobRecord) -> None:
        wait = _waiting(job)
        if wait is not None and wait != self._wait:
            place, reason, start = wait
            shown = f"  #{place} in the queue of {job.target}" if place else "  in the queue"
            shown = f"{shown}: {reason}" if reason else shown
            if reason:  # the scheduler has looked: its estimate, or that it has none
                shown += f" · {_start_words(start)}"
            self._console.print(Text(shown, style="dim"))
        self._wait = wait
        step = _preparing(job)
        again = step is not None and time.monotonic() - self._step_shown >= REPEAT_S
        if step != self._step or again:
            text = preparing_text(job)
            if text is not None:
                self._console.print(Text("  ").append_text(text), style="dim", soft_wrap=True)
            self._step, self._step_shown = step, time.monotonic()


def _waiting(job: JobRecord) -> tuple[object, object, object] | None:
    """A queued job's place, the scheduler's reason it waits and its estimated start
    (``None`` otherwise)."""
    if job.status is not JobStatus.QUEUED or not job.queue:
        return None
    return job.queue.get("position"), job.queue.get("reason"), job.queue.get("start")


def _preparing(job: JobRecord) -> tuple[object, object] | None:
    """A Preparing job's step and its progress (``None`` when it says nothing)."""
    if job.status is not JobStatus.PREPARING or not job.queue:
        return None
    return job.queue.get("reason"), job.queue.get("progress")


def _start_words(start: object) -> str:
    """``starts about 14:05:10 (in 12m)``, or ``start unknown`` (a job ahead, or one
    holding what it needs, has no time limit)."""
    if not isinstance(start, (int, float)):
        return "start unknown"
    clock = time.strftime("%H:%M:%S", time.localtime(start))
    return f"starts about {clock} ({starts_in(start, time.time())})"


def _line(line: LogLine, all_ranks: bool, console: Console, timestamps: bool) -> list[Segment]:
    """A log line as printed: its time with ``timestamps``, ``[rank N]`` with every rank,
    ``…`` before a continuation.

    The rank's text goes through :mod:`phalanx.terminal.termsafe`: no escape
    sequence of its own reaches the terminal, only its colours.
    """
    head = [Segment(f"{_clock(line.time)} ", _DIM)] if timestamps else []
    if all_ranks:
        head.append(Segment(f"[rank {line.rank}] ", _RANK))
    if line.cont:
        head.append(Segment("… ", _DIM))
    return [*head, *rank_segments(line.text, console), Segment.line()]


def _clock(when: float | None) -> str:
    """``HH:MM:SS.mmm`` in local time; ``-`` padded to the same width when unknown."""
    if when is None:
        return "-".ljust(12)
    return time.strftime("%H:%M:%S", time.localtime(when)) + f".{int(when % 1 * 1000):03d}"


def _summary(console: Console, job: JobRecord, *, remote: bool, all_ranks: bool) -> None:
    """The end of a stream: a failed job's root cause first (the rank that failed first
    and its traceback, as torchrun's summary names it), then how the job ended and
    where its files are."""
    cause = _first_failure(job, all_ranks=all_ranks)
    if cause is not None:
        console.print()
        for line in cause:
            console.print(line, soft_wrap=True)
    panel = error_panel(job, remote=remote)
    if panel is not None:
        console.print(panel)
    console.print(
        f"\njob [bold]{job.name}[/] ",
        status_text(job.status),
        f" in {duration(job.duration)}",
        sep="",
    )
    if remote:  # the server's paths mean nothing here
        where = f"outputs: {download_command(job.name)}"
    else:
        where = f"outputs: {job.job_dir}/outputs · logs: {job.job_dir}/user_logs"
    console.print(where, style="dim", highlight=False, soft_wrap=True)


def _first_failure(job: JobRecord, *, all_ranks: bool) -> list[Text] | None:
    """``rank 1 failed first: KeyError: 'lr'`` for a job that failed on a rank, and, when
    the stream showed another rank's log, that what that rank printed is not the cause
    (a rank whose peer died fails too, with gloo's or NCCL's error)."""
    error = job.error
    if job.status is not JobStatus.FAILED or error is None or error.rank is None:
        return None
    first = "failed first" if world_size(job.spec) > 1 else "failed"
    lines = [Text.assemble((f"rank {error.rank} {first}: ", "bold red"),
                           rank_text(error.message, style="bold"))]  # fmt: skip
    if not all_ranks and error.rank != 0:
        lines.append(Text(
            f"  rank 0's errors above, if any, came after it · every rank's log: "
            f"phalanx job stream {job.name} --all-ranks", style="dim",
        ))  # fmt: skip
    return lines
