"""Log bytes from given offsets: what a remote ``job stream`` asks for each poll.

The client keeps the offsets and decodes the bytes itself (with the same
:class:`~phalanx.jobs.logs.LogFollower` as a local stream), so a reconnect
resumes exactly where it stopped: no line lost, none repeated.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from phalanx.jobs.logs import MIN_READ_BYTES, POLL_BYTES, READ_BYTES, decode_block
from phalanx.nofollow import open_file
from phalanx.workspace.layout import JobPaths

# No file is larger (a seek past 2**63 overflows), and no job has more ranks.
MAX_OFFSET = 1 << 62
MAX_RANK = 1 << 20


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


def read_logs(paths: JobPaths, *, all_ranks: bool, offsets: dict[int, int]) -> list[dict[str, Any]]:
    """Each log's bytes from its offset (a bounded amount per poll), with its size."""
    if all_ranks:
        logs = [(int(p.stem.rsplit("_", 1)[1]), p) for p in paths.rank_logs()]
    else:
        logs = [(0, paths.rank_log(0))]
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
        out.append(
            {
                "rank": rank,
                "offset": offset,
                "data": base64.b64encode(data).decode(),
                "size": size,
            }
        )
    return out


def rank_of(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def read_back(path: Path, rank: int, *, before: int | None, nbytes: int) -> dict[str, Any]:
    """The whole lines of a rank's log that end before byte ``before`` (its end when
    ``None``), at most about ``nbytes`` of them: how a page shows a log tail-first and
    pages backward, so a log of a million lines opens as fast as a short one.

    Returns ``{"rank", "start", "end", "size", "lines"}``: ``start`` is where the
    first line returned begins (0: the log's beginning was reached).
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
    lines = [line.text for line in decode_block(rank, data)]
    return {"rank": rank, "start": start, "end": end, "size": size, "lines": lines}


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
