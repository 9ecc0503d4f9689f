"""Log bytes from given offsets: what a remote ``job stream`` asks for each poll.

The client keeps the offsets and decodes the bytes itself (with the same
:class:`~phalanx.jobs.logs.LogFollower` as a local stream), so a reconnect
resumes exactly where it stopped: no line lost, none repeated.
"""

from __future__ import annotations

import base64
import math
import os
import re
from pathlib import Path
from typing import Any

from phalanx.errors import PhalanxError
from phalanx.jobs.logs import MIN_READ_BYTES, POLL_BYTES, READ_BYTES, LogLine, decode_block
from phalanx.launch.logtimes import entries, lookup
from phalanx.nofollow import open_file
from phalanx.workspace.layout import JobPaths

# No file is larger (a seek past 2**63 overflows), and no job has more ranks.
MAX_OFFSET = 1 << 62
MAX_RANK = 1 << 20
# The most rank logs one request reads together (every rank's poll, merged page, or
# page of each rank). A job writes its own user_logs, so the number of logs there is
# its choice; at this many a poll's reads are at their floor of MIN_READ_BYTES a log.
MAX_RANKS_AT_ONCE = POLL_BYTES // MIN_READ_BYTES
_NEWLINE = re.compile(b"\n")


def rank_logs(paths: JobPaths) -> list[Path]:
    """Every rank's log, to be read in one request.

    Raises:
        PhalanxError: more than :data:`MAX_RANKS_AT_ONCE` (a 400, naming the limit).
    """
    logs = paths.rank_logs()
    if len(logs) > MAX_RANKS_AT_ONCE:
        raise PhalanxError(
            f"this job has {len(logs)} rank logs; at most {MAX_RANKS_AT_ONCE} are read "
            "together: read them one rank at a time (rank=N; `job stream` without --all-ranks)"
        )
    return logs


def parse_offsets(text: str) -> dict[int, int]:
    """``"0:1200,3:0"`` → ``{0: 1200, 3: 0}``.

    Raises:
        ValueError: not that form, or a rank or offset out of range.
    """
    out: dict[int, int] = {}
    for item in filter(None, text.split(",")):
        rank_text, _, offset_text = item.partition(":")
        if len(rank_text) > 8 or len(offset_text) > 20:
            raise ValueError(item)  # before int(): its digits are bounded too
        rank, offset = int(rank_text), int(offset_text)
        if not (0 <= rank <= MAX_RANK and 0 <= offset <= MAX_OFFSET):
            raise ValueError(item)
        out[rank] = offset
    return out


def read_logs(
    paths: JobPaths, *, all_ranks: bool, offsets: dict[int, int], timed: bool = False
) -> list[dict[str, Any]]:
    """Each log's bytes from its offset (a bounded amount per poll), with its size, and
    when ``timed`` the entries of its time index for those bytes (``times``)."""
    one = [(0, paths.rank_log(0))]
    logs = [(rank_of(p), p) for p in rank_logs(paths)] if all_ranks else one
    budget = max(MIN_READ_BYTES, min(READ_BYTES, POLL_BYTES // max(1, len(logs))))
    out = []
    for rank, path in logs:
        offset = offsets.get(rank, 0)
        try:
            with os.fdopen(open_file(path), "rb") as f:
                f.seek(offset)
                data = f.read(budget)
                size = f.seek(0, 2)
        except OSError:  # missing, or not a plain file (a link is never followed)
            continue
        item: dict[str, Any] = {
            "rank": rank,
            "offset": offset,
            "data": base64.b64encode(data).decode(),
            "size": size,
        }
        if timed:  # for each line end in the bytes (and their start and end) its entry
            ends = [offset, *(offset + m.end() for m in _NEWLINE.finditer(data))]
            found = entries(path, [*ends, offset + len(data)])
            item["times"] = [[o, t if math.isfinite(t) else None] for o, t in found]
        out.append(item)
    return out


def rank_of(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def read_back(
    path: Path, rank: int, *, before: int | None, nbytes: int, timed: bool = False
) -> dict[str, Any]:
    """The whole lines of a rank's log that end before byte ``before`` (its end when
    ``None``), at most about ``nbytes`` of them: how a page shows a log tail-first and
    pages backward, so a log of a million lines opens as fast as a short one.

    Returns ``{"rank", "start", "end", "size", "lines"}``: ``start`` is where the
    first line returned begins (0: the log's beginning was reached); ``lines`` are
    :class:`~phalanx.jobs.logs.LogLine` (with their times when ``timed``).
    """
    try:
        with os.fdopen(open_file(path), "rb") as f:
            size = f.seek(0, 2)
            end = size if before is None else max(0, min(before, size))
            start = max(0, end - nbytes)
            f.seek(start)
            data = f.read(end - start)
    except OSError:  # missing, or not a plain file (a link is never followed)
        return {"rank": rank, "start": 0, "end": 0, "size": 0, "lines": []}
    if start > 0:  # begin at the first whole line (a line longer than nbytes: its tail)
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data, start = data[cut + 1 :], start + cut + 1
    lines = decode_block(rank, data, start)
    if timed and lines:
        ends = [ln.end for ln in lines]
        stamps = lookup(entries(path, ends), ends)
        lines = [ln._replace(time=t) for ln, t in zip(lines, stamps, strict=True)]
    return {"rank": rank, "start": start, "end": end, "size": size, "lines": lines}


def read_merged(paths: JobPaths, before: dict[int, int] | None, *, nbytes: int) -> dict[str, Any]:
    """Every rank's lines before its offset in ``before`` (each rank's end when
    ``None``), merged in the order they were written, about ``nbytes`` in all.

    Paging backward through several logs at once, a rank whose page reaches further
    back in time than another's must not show lines that the other's next page may
    have to go before; so only lines at or after the latest first time of the pages
    that have more before them are returned, and each rank's ``start`` is where its
    first line returned begins. Each call reads at most about ``nbytes``, and returns
    at least the page of the rank whose page began last. A line of unknown time
    (a log written before times were recorded) sorts after the known ones, so
    such a log shows rank by rank.

    Returns ``{"lines": [[rank, text, time], …], "starts": {rank: start},
    "ends": {rank: end}}``; a rank that reached its log's beginning has start 0.
    """
    ranks = [rank_of(p) for p in rank_logs(paths)]
    if before is not None:
        ranks = [r for r in ranks if before.get(r, 0) > 0]
    share = max(4 << 10, nbytes // max(1, len(ranks)))
    pages = {}
    for rank in ranks:
        at = None if before is None else before[rank]
        pages[rank] = read_back(paths.rank_log(rank), rank, before=at, nbytes=share, timed=True)
    keyed: dict[int, list[tuple[float, LogLine]]] = {}
    for rank, page in pages.items():
        later = math.inf  # a line of unknown time goes with the next one known after it
        keys = []
        for line in reversed(page["lines"]):
            later = later if line.time is None else line.time
            keys.append((later, line))
        keyed[rank] = keys[::-1]
    cut = max(
        (keys[0][0] for rank, keys in keyed.items() if keys and pages[rank]["start"] > 0),
        default=-math.inf,
    )
    merged: list[tuple[float, int, int, LogLine]] = []
    starts = {}
    for rank, keys in keyed.items():
        start = pages[rank]["start"]
        for order, (key, line) in enumerate(keys):
            if key < cut:
                start = line.end  # held back for the next page
                continue
            merged.append((key, rank, order, line))
        starts[rank] = start
    merged.sort(key=lambda item: item[:3])
    return {
        "lines": [[rank, line.text, line.time] for _, rank, _, line in merged],
        "starts": starts,
        "ends": {rank: page["end"] for rank, page in pages.items()},
    }


def search(path: Path, rank: int, text: str, *, limit: int) -> dict[str, Any]:
    """The first ``limit`` lines of a rank's log that hold ``text`` (case-insensitive),
    each with its line number, read a block at a time (bounded memory for any log)."""
    needle = text.casefold()
    found: list[dict[str, Any]] = []
    number = 0
    carry = b""
    try:
        with os.fdopen(open_file(path), "rb") as f:
            while len(found) < limit:
                block = f.read(READ_BYTES)
                data = carry + block
                if not block:
                    cut = len(data)
                else:
                    cut = data.rfind(b"\n") + 1
                    if cut == 0 and len(data) < 4 * READ_BYTES:
                        carry = data  # no line end yet: read on (a very long line is cut)
                        continue
                    cut = cut or len(data)
                for line in decode_block(rank, data[:cut]):
                    number += 1
                    if needle in line.text.casefold():
                        found.append({"line": number, "text": line.text})
                        if len(found) >= limit:
                            break
                carry = data[cut:]
                if not block:
                    break
    except OSError:
        pass
    return {"rank": rank, "matches": found, "complete": len(found) < limit}
