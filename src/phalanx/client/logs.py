"""Following a job's logs over HTTP, with the same decoding as a local stream.

Each poll asks the server for the bytes after the offsets this client has
read; the bytes go through :class:`~phalanx.jobs.logs.LogFollower`'s own
line handling. A dropped connection is retried, and resumes at the same
offsets: no line is lost or shown twice.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.client.http import ServerClient
from phalanx.jobs.logs import LogFollower, _File
from phalanx.workspace.layout import JobPaths


@dataclass
class RemoteLogFollower(LogFollower):
    """A :class:`LogFollower` whose files are read from a server."""

    client: ServerClient | None = None
    name: str = ""
    _fetched: dict[Path, tuple[bytes, int]] = field(default_factory=dict)
    _times: dict[Path, list[tuple[int, float]]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, client: ServerClient, name: str, *, all_ranks: bool, timed: bool = False
    ) -> RemoteLogFollower:
        return cls(
            JobPaths(Path("/nonexistent")),
            all_ranks=all_ranks,
            timed=timed,
            client=client,
            name=name,
        )

    @staticmethod
    def _key(rank: int) -> Path:
        return Path(f"rank/{rank}")

    def _logs(self) -> list[tuple[int, Path]]:
        """One request per poll: every log's new bytes at once."""
        assert self.client is not None
        at = ",".join(f"{s.rank}:{s.offset}" for s in self._files.values())
        answer = self.client.request(
            "GET",
            f"/jobs/{self.name}/logs",
            params={
                "all_ranks": str(self.all_ranks).lower(),
                "at": at,
                "times": str(self.timed).lower(),
            },
        )
        self._fetched = {}
        logs = []
        for item in answer["files"]:
            rank = int(item["rank"])
            state = self._files.get(self._key(rank))
            if state is not None and int(item["offset"]) != state.offset:
                continue  # an answer to an older question; the next poll asks again
            self._fetched[self._key(rank)] = (base64.b64decode(item["data"]), int(item["size"]))
            # A server from before time indexes sends none: the lines have no time. An
            # unknown time comes as null (JSON has no NaN).
            self._times[self._key(rank)] = [
                (int(o), math.nan if t is None else float(t)) for o, t in item.get("times", [])
            ]
            logs.append((rank, self._key(rank)))
        return logs

    def _entries(self, path: Path, ends: list[int]) -> list[tuple[int, float]]:
        """The time-index entries sent with the last bytes of this log (every line
        stamped in a poll ends at or after the offset those bytes were asked from)."""
        return self._times.get(path, [])

    def _read(self, path: Path, state: _File, budget: int) -> bytes:
        data, size = self._fetched.pop(path, (b"", state.offset))
        state.offset += len(data)
        if size > state.offset:
            self.behind = True
        return data
