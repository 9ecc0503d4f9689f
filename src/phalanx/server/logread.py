"""Log bytes from given offsets: what a remote ``job stream`` asks for each poll.

The client keeps the offsets and decodes the bytes itself (with the same
:class:`~phalanx.jobs.logs.LogFollower` as a local stream), so a reconnect
resumes exactly where it stopped: no line lost, none repeated.
"""

from __future__ import annotations

import base64
from typing import Any

from phalanx.jobs.logs import MIN_READ_BYTES, POLL_BYTES, READ_BYTES
from phalanx.workspace.layout import JobPaths


def parse_offsets(text: str) -> dict[int, int]:
    """``"0:1200,3:0"`` → ``{0: 1200, 3: 0}``.

    Raises:
        ValueError: not that form.
    """
    out: dict[int, int] = {}
    for item in filter(None, text.split(",")):
        rank, _, offset = item.partition(":")
        out[int(rank)] = int(offset)
        if out[int(rank)] < 0 or int(rank) < 0:
            raise ValueError(item)
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
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(budget)
                size = f.seek(0, 2)
        except FileNotFoundError:
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
