"""Follow a job's per-rank log files as they grow."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.workspace.layout import JobPaths

# An unterminated line is shown after waiting this long for its newline.
PARTIAL_AFTER_S = 1.0


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
    _partial_since: dict[Path, float] = field(default_factory=dict)

    def _files(self) -> list[tuple[int, Path]]:
        if not self.all_ranks:
            path = self.paths.rank_log(0)
            return [(0, path)] if path.exists() else []
        return [(int(p.stem.rsplit("_", 1)[1]), p) for p in self.paths.rank_logs()]

    def poll(self) -> list[tuple[int, str]]:
        """New complete lines since the last call, as ``(rank, line)``.

        A line rewritten in place with carriage returns (a progress bar) is
        returned as its latest state once it has waited ``PARTIAL_AFTER_S``
        without a newline, so progress shows while it moves.
        """
        out: list[tuple[int, str]] = []
        now = time.monotonic()
        for rank, path in self._files():
            data = self._read_new(path)
            if data:
                data = self._partial.pop(path, b"") + data
                *lines, rest = data.split(b"\n")
                out.extend((rank, _text(line)) for line in lines)
                if rest:
                    self._partial[path] = rest
                    if lines:  # a new line began now
                        self._partial_since[path] = now
                    else:
                        self._partial_since.setdefault(path, now)
                else:
                    self._partial_since.pop(path, None)
            since = self._partial_since.get(path)
            if since is not None and now - since >= PARTIAL_AFTER_S and path in self._partial:
                out.append((rank, _text(self._partial.pop(path))))
                del self._partial_since[path]
        return out

    def _read_new(self, path: Path) -> bytes:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return b""
        self._offsets[path] = offset + len(data)
        return data

    def flush(self) -> list[tuple[int, str]]:
        """Everything not yet returned, including unterminated last lines."""
        out = self.poll()
        for path, rest in sorted(self._partial.items()):
            out.append((int(path.stem.rsplit("_", 1)[1]), _text(rest)))
        self._partial.clear()
        self._partial_since.clear()
        return out


def _text(line: bytes) -> str:
    """A log line as printed: the last state of a line redrawn with carriage returns."""
    text = line.decode(errors="replace").rstrip("\r")
    return text.rsplit("\r", 1)[-1]
