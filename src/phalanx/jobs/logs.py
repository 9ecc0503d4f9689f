"""Follow a job's per-rank log files as they grow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from phalanx.workspace.layout import JobPaths

_CHUNK = 1 << 20


@dataclass
class LogFollower:
    """Yields complete new lines from rank 0's log, or from every rank's.

    Files that appear later (ranks start at different times) are picked up on
    the next :meth:`poll`. A line is only returned once its newline has been
    written, except by :meth:`flush`, which returns what is left.
    """

    paths: JobPaths
    all_ranks: bool = False
    _offsets: dict[Path, int] = field(default_factory=dict)
    _partial: dict[Path, bytes] = field(default_factory=dict)

    def _files(self) -> list[tuple[int, Path]]:
        if not self.all_ranks:
            path = self.paths.rank_log(0)
            return [(0, path)] if path.exists() else []
        return [(int(p.stem.rsplit("_", 1)[1]), p) for p in self.paths.rank_logs()]

    def poll(self) -> list[tuple[int, str]]:
        """New complete lines since the last call, as ``(rank, line)``."""
        out: list[tuple[int, str]] = []
        for rank, path in self._files():
            offset = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read(_CHUNK)
            except OSError:
                continue
            if not data:
                continue
            self._offsets[path] = offset + len(data)
            data = self._partial.pop(path, b"") + data
            *lines, rest = data.split(b"\n")
            if rest:
                self._partial[path] = rest
            out.extend((rank, line.decode(errors="replace").rstrip("\r")) for line in lines)
        return out

    def flush(self) -> list[tuple[int, str]]:
        """Everything not yet returned, including unterminated last lines."""
        out = self.poll()
        while True:
            more = self.poll()
            if not more:
                break
            out.extend(more)
        for path, rest in sorted(self._partial.items()):
            rank = int(path.stem.rsplit("_", 1)[1])
            out.append((rank, rest.decode(errors="replace")))
        self._partial.clear()
        return out
