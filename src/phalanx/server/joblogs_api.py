"""A job's logs for a browser: a page of lines tail-first, search, and a live stream.

``GET …/logs`` (in :mod:`phalanx.server.jobs_api`) gives raw bytes from offsets
for the CLI's follower. A page wants lines: ``…/logs/page`` returns the last
lines before an offset (the tail first, then older pages as the reader scrolls
up), ``…/logs/merged`` every rank's lines in the order they were written (by the
logs' time indexes, :mod:`phalanx.launch.logtimes`), ``…/logs/search`` the lines
of a rank that hold a text, and ``…/logs/events`` streams new lines (with their
times) as server-sent events from the offsets the page was shown, through the
same :class:`~phalanx.jobs.logs.LogFollower` as ``phalanx job stream`` (one line
parser).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from phalanx.errors import PhalanxError
from phalanx.jobs.logs import LogFollower
from phalanx.server.auth import User
from phalanx.server.logread import (
    parse_offsets,
    rank_logs,
    rank_of,
    read_back,
    read_merged,
    search,
)
from phalanx.server.settings import request_workspace, settings_of, workspace
from phalanx.service.jobs import LocalJobs

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

# How often a live stream looks for new lines, and for the job's end.
POLL_S = 0.2
STATUS_EVERY_S = 1.0
# A comment sent this often keeps proxies from closing an idle stream.
HEARTBEAT_S = 15.0
# The most lines one event carries (a burst is sent as several events).
EVENT_LINES = 2000

RankQuery = Annotated[str, Query(pattern=r"^(all|[0-9]{1,6})$")]


def _ranks(paths: Any, rank: str) -> list[int]:
    if rank == "all":
        return [rank_of(p) for p in rank_logs(paths)]
    return [int(rank)]


@router.get("/{name}/logs/page")
def log_page(
    name: str,
    request: Request,
    who: User,
    rank: RankQuery = "0",
    before: Annotated[int | None, Query(ge=0)] = None,
    kib: Annotated[int, Query(ge=1, le=4096)] = 256,
) -> dict[str, Any]:
    """The lines of a rank's log (or of each rank's) ending before byte ``before``
    (default: the end), about ``kib`` KiB in all: the newest first, then older pages;
    ``times`` beside ``lines``: when each was written (``null`` where unknown)."""
    paths = LocalJobs(request_workspace(request), who).paths(name)
    ranks = _ranks(paths, rank)
    share = max(4 << 10, (kib << 10) // max(1, len(ranks)))
    pages = [
        read_back(paths.rank_log(r), r, before=before, nbytes=share, timed=True) for r in ranks
    ]
    for page in pages:  # each line's time (Unix seconds, or null where unknown) beside it
        page["times"] = [line.time for line in page["lines"]]
        page["lines"] = [line.text for line in page["lines"]]
    return {"pages": pages}


@router.get("/{name}/logs/merged")
def log_merged(
    name: str,
    request: Request,
    who: User,
    before: Annotated[str | None, Query(max_length=100_000, pattern=r"^[0-9:,]*$")] = None,
    kib: Annotated[int, Query(ge=1, le=4096)] = 256,
) -> dict[str, Any]:
    """Every rank's lines merged in the order they were written, each with its time
    (Unix seconds, or ``null`` where unknown), ending before each rank's offset in
    ``before`` (``rank:offset,…``; default: every log's end), about ``kib`` KiB in all:
    the newest first, then older pages from the ``starts`` returned."""
    paths = LocalJobs(request_workspace(request), who).paths(name)
    try:
        offsets = None if before is None else parse_offsets(before)
    except ValueError:
        raise PhalanxError("before: give rank:offset pairs, e.g. before=0:1200,1:80") from None
    return read_merged(paths, offsets, nbytes=kib << 10)


@router.get("/{name}/logs/search")
def log_search(
    name: str,
    request: Request,
    who: User,
    q: Annotated[str, Query(min_length=1, max_length=200)],
    rank: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    """The first ``limit`` lines of rank ``rank``'s log holding ``q`` (any case)."""
    paths = LocalJobs(request_workspace(request), who).paths(name)
    return search(paths.rank_log(rank), rank, q, limit=limit)


@router.get("/{name}/logs/events")
async def log_events(
    name: str,
    request: Request,
    who: User,
    rank: RankQuery = "0",
    at: Annotated[str, Query(max_length=100_000, pattern=r"^[0-9:,]*$")] = "",
) -> StreamingResponse:
    """New lines as server-sent events (``data: {"lines": [[rank, text, cont, time], …],
    "at": "rank:offset,…"}``) from the offsets ``at``; an ``end`` event once the job
    has ended and every line is sent. A reconnecting ``EventSource`` resumes from
    its ``Last-Event-ID`` (the ``at`` of the last event)."""
    settings = settings_of(request)
    job = await asyncio.to_thread(lambda: workspace(settings).get_job(name))
    try:
        offsets = parse_offsets(request.headers.get("last-event-id") or at)
    except ValueError:
        raise PhalanxError("at: give rank:offset pairs, e.g. at=0:1200,1:0") from None
    if rank == "all":  # refused before the stream begins, as a page of every rank is
        await asyncio.to_thread(rank_logs, workspace(settings).paths(job.name))
    follower = LogFollower(
        workspace(settings).paths(job.name),
        all_ranks=rank == "all",
        rank=0 if rank == "all" else int(rank),
        timed=True,
    )
    follower.start_at(offsets)

    def status() -> bool:
        from phalanx.jobs.control import refresh

        ws = workspace(settings)
        return refresh(ws, ws.get_job(name)).status.is_terminal

    async def events() -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        last_beat = last_status = time.monotonic()
        ended = False
        while not await request.is_disconnected():
            now = time.monotonic()
            if now - last_status >= STATUS_EVERY_S:
                last_status = now
                ended = await asyncio.to_thread(status)
            read = (lambda: list(follower.flush())) if ended else follower.poll
            lines = await asyncio.to_thread(read)
            for start in range(0, len(lines), EVENT_LINES):
                batch = lines[start : start + EVENT_LINES]
                chunk = [[ln.rank, ln.text, ln.cont, ln.time] for ln in batch]
                mark = ",".join(f"{r}:{o}" for r, o in sorted(follower.offsets().items()))
                body = json.dumps({"lines": chunk, "at": mark})
                yield f"id: {mark}\ndata: {body}\n\n"
                last_beat = now
            if ended:
                yield "event: end\ndata: {}\n\n"
                return
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                yield ": keep-alive\n\n"
            if not follower.behind:
                await asyncio.sleep(POLL_S)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
