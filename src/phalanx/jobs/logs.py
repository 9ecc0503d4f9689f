"""Follow a job's per-rank log files as they grow, in bounded memory.

A rank may write anything: a progress bar redrawn with carriage returns for
hours, or hundreds of megabytes without a newline. So nothing here grows with
the log: each :meth:`LogFollower.poll` reads at most :data:`READ_BYTES` of a
file, splits the bytes at line ends and decodes each line on its own (so every
line's end is its exact byte offset, whatever bytes that are not UTF-8 it holds,
and a character split between two reads is whole once its last byte arrives),
and holds back at most one unfinished line per file, shorter than
:data:`LINE_CAP` bytes. A longer line is returned in pieces, every piece after
the first marked as a continuation.

Lines end at ``\\n``, ``\\r\\n`` or ``\\r``. A carriage return redraws the line
on a terminal, so a line that a later ``\\r`` redraws within the same read is
dropped: a progress bar shows its latest state, not every state it went
through.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from phalanx.launch.logtimes import entries, lookup
from phalanx.nofollow import open_file
from phalanx.workspace.layout import JobPaths

# An unterminated line is shown after waiting this long for its end.
PARTIAL_AFTER_S = 1.0
# At most this much of one file is read per poll...
READ_BYTES = 1 << 20
# ...and of all files together, but never less than MIN_READ_BYTES a file.
POLL_BYTES = 16 << 20
MIN_READ_BYTES = 64 << 10
# A line longer than this (in bytes) is returned in pieces.
LINE_CAP = 64 << 10


class LogLine(NamedTuple):
    """One line of a rank's log, or one piece of a line too long or too slow to wait for."""

    rank: int
    text: str
    cont: bool = False
    """The piece continues a line whose beginning was returned before."""
    end: int = 0
    """The byte offset in its log just past the piece (its line end included): what its
    time is looked up by, and where the next line begins."""
    time: float | None = None
    """When it was written (Unix seconds), where the follower is ``timed`` and the log's
    time index (:mod:`phalanx.launch.logtimes`) covers it."""


def _whole(data: bytes) -> int:
    """How many of ``data``'s bytes end on a whole UTF-8 character: a character whose
    last bytes are still to come is held back."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # the lead byte of a character of 2, 3 or 4 bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if need > back else len(data)
    return len(data)


@dataclass
class _File:
    """How far one log file has been read, and its unfinished line."""

    rank: int
    offset: int = 0
    partial: bytes = b""
    """The unfinished line's bytes, not yet decoded."""
    since: float | None = None
    """When ``partial`` began to wait for its line end."""
    cr: bool = False
    """What was read ends with ``\\r``: a ``\\n`` read next ends the same line."""
    shown: bool = False
    """Part of the current line was returned already (its pieces that follow are continuations)."""
    pos: int = 0
    """The byte offset just past the bytes taken (into lines, ``partial``, or dropped)."""
    key: float = -math.inf
    """The latest time of the lines returned so far: what a line of unknown time is
    ordered by (after them), so one rank's lines keep their order."""


@dataclass
class LogFollower:
    """Yields new lines from rank 0's log, or from every rank's, in rank order.

    Files that appear later (ranks start at different times) are picked up on
    the next :meth:`poll`. A line is returned once it has ended, reached
    :data:`LINE_CAP` characters, or waited :data:`PARTIAL_AFTER_S`; :meth:`flush`
    returns everything that is left.
    """

    paths: JobPaths
    all_ranks: bool = False
    rank: int = 0
    """The one rank followed when not ``all_ranks``."""
    timed: bool = False
    """Give each line its time, and each poll's lines in the order they were written."""
    behind: bool = False
    """The last poll left bytes unread: poll again without waiting."""
    _files: dict[Path, _File] = field(default_factory=dict)

    def _logs(self) -> list[tuple[int, Path]]:
        if not self.all_ranks:
            path = self.paths.rank_log(self.rank)
            return [(self.rank, path)] if path.exists() else []
        return [(int(p.stem.rsplit("_", 1)[1]), p) for p in self.paths.rank_logs()]

    def start_at(self, offsets: dict[int, int]) -> None:
        """Begin each rank's file at a byte offset (the start of a line) rather than at 0."""
        for rank, offset in offsets.items():
            self._files[self.paths.rank_log(rank)] = _File(rank, offset, pos=offset)

    def offsets(self) -> dict[int, int]:
        """Where a reader that reconnects resumes: each file's offset less the unfinished
        line held back (so that line is not lost; a piece of it shown already repeats)."""
        return {s.rank: s.offset - len(s.partial) - s.cr for s in self._files.values()}

    def poll(self) -> list[LogLine]:
        """The lines written since the last call, at most :data:`READ_BYTES` of each file.

        An unfinished line (a progress bar between redraws, a ``print(end="")``)
        is returned as it stands once it has waited :data:`PARTIAL_AFTER_S`, so
        progress shows while it moves; the rest of it follows as a continuation.
        """
        out: list[LogLine] = []
        keys: list[float] = []
        now = time.monotonic()
        logs = self._logs()
        budget = max(MIN_READ_BYTES, min(READ_BYTES, POLL_BYTES // max(1, len(logs))))
        self.behind = False
        for rank, path in logs:
            state = self._files.setdefault(path, _File(rank))
            first = len(out)
            data = self._read(path, state, budget)
            if data:
                state.pos = state.offset - len(data)
                self._take(state, data, now, out)
            if state.partial and state.since is not None and now - state.since >= PARTIAL_AFTER_S:
                self._emit_waiting(state, out)
            if self.timed and len(out) > first:
                out[first:] = self._stamped(path, out[first:])
                keys += self._keys(state, out[first:])
        if self.timed and self.all_ranks:  # stable: each rank's lines keep their order
            order = sorted(range(len(out)), key=keys.__getitem__)
            out = [out[i] for i in order]
        return out

    @staticmethod
    def _keys(state: _File, lines: list[LogLine]) -> list[float]:
        """What each of a rank's ``lines`` is ordered by: its time, or where unknown (the
        tail of an attempt before times were kept, an entry still held back) the latest
        time of the rank's lines before it, so a rank's lines never change places."""
        keys = []
        for line in lines:
            if line.time is not None:
                state.key = max(state.key, line.time)
            keys.append(state.key)
        return keys

    def _stamped(self, path: Path, lines: list[LogLine]) -> list[LogLine]:
        """``lines`` (of one file, in order) with their times."""
        ends = [ln.end for ln in lines]
        times = lookup(self._entries(path, ends), ends)
        return [ln._replace(time=t) for ln, t in zip(lines, times, strict=True)]

    def _entries(self, path: Path, ends: list[int]) -> list[tuple[int, float]]:
        return entries(path, ends)

    def flush(self) -> Iterator[LogLine]:
        """Everything not yet returned, unterminated last lines included.

        Reads every file to its end, a poll at a time: consume the lines as
        they come to keep memory bounded.
        """
        while True:
            yield from self.poll()
            if not self.behind:
                break
        out: list[LogLine] = []
        for path, state in self._files.items():
            first = len(out)
            if state.partial:
                self._emit(state, state.partial, out, ended=True, end=state.pos - state.cr)
            state.cr = state.shown = False
            if self.timed and len(out) > first:
                out[first:] = self._stamped(path, out[first:])
        yield from out

    def _read(self, path: Path, state: _File, budget: int) -> bytes:
        try:
            with os.fdopen(open_file(path), "rb") as f:
                f.seek(state.offset)
                data = f.read(budget)
                size = f.seek(0, 2)
        except OSError:
            return b""
        state.offset += len(data)
        if size > state.offset:
            self.behind = True
        return data

    def _take(self, state: _File, data: bytes, now: float, out: list[LogLine]) -> None:
        """Add bytes read to the file's state; complete lines go to ``out``.

        The bytes are split at ``\\n`` and ``\\r`` (neither is ever part of a UTF-8
        character) before anything is decoded, so each line's end is its exact offset.
        """
        if not data:
            return
        if state.cr:
            state.cr = False
            if data.startswith(b"\n"):  # "\r\n" split between two reads: one line end
                data = data[1:]
                state.pos += 1
                self._emit(state, state.partial, out, ended=True, end=state.pos - 2)
            else:  # redrawn by what follows
                self._drop(state)
        # Split at newlines only: a bar redrawn a million times is one piece, not a million.
        pieces = data.split(b"\n")
        for i, piece in enumerate(pieces):
            ended = i < len(pieces) - 1
            state.pos += len(piece) + ended
            cr = piece.endswith(b"\r")
            if cr:  # "\r\n" is one line end; a last "\r" may be half of one
                piece = piece[:-1]
            if b"\r" in piece:
                self._drop(state)  # redrawn within this read: only the latest state shows
                piece = piece.rpartition(b"\r")[2]
            if ended:
                end = state.pos - 1 - cr
                self._emit(state, state.partial + piece, out, ended=True, end=end)
            else:
                state.partial += piece
                state.cr = cr
        if state.partial and state.since is None:
            state.since = now  # a line began
        if len(state.partial) >= LINE_CAP:
            whole = _whole(state.partial[: len(state.partial) - len(state.partial) % LINE_CAP])
            head, state.partial = state.partial[:whole], state.partial[whole:]
            end = state.pos - state.cr - len(state.partial)
            self._emit(state, head, out, ended=False, end=end, keep=True)
            state.since = now if state.partial else None

    def _emit_waiting(self, state: _File, out: list[LogLine]) -> None:
        """Return an unfinished line that waited long enough, as it stands (a character
        whose last bytes are still to come waits for them)."""
        whole = _whole(state.partial)
        if whole:
            head, rest = state.partial[:whole], state.partial[whole:]
            end = state.pos - state.cr - len(rest)
            self._emit(state, head, out, ended=False, end=end)
            state.partial = rest

    def _emit(
        self,
        state: _File,
        data: bytes,
        out: list[LogLine],
        *,
        ended: bool,
        end: int,
        keep: bool = False,
    ) -> None:
        """Return ``data`` (whose last byte is just before byte ``end`` of the log) in
        pieces of at most :data:`LINE_CAP` bytes; ``ended``: the line is over (its last
        piece's end is then past its line end)."""
        if data or not (ended and state.shown):  # an end right after a shown piece adds nothing
            start = 0
            while True:
                cut = len(data)
                if cut - start > LINE_CAP:
                    cut = start + (_whole(data[start : start + LINE_CAP]) or LINE_CAP)
                last = cut >= len(data)
                at = (state.pos if ended else end) if last else end - len(data) + cut
                text = data[start:cut].decode("utf-8", errors="replace")
                out.append(LogLine(state.rank, text, state.shown, at))
                state.shown = True
                start = cut
                if last:
                    break
        if not keep:
            state.partial, state.since = b"", None
        if ended:
            state.shown = False

    @staticmethod
    def _drop(state: _File) -> None:
        state.partial, state.since, state.shown = b"", None, False


def decode_block(rank: int, data: bytes, base: int = 0) -> list[LogLine]:
    """The lines of a block of a log read whole (a page of it), by the follower's rules.

    The block should begin at the start of a line (at byte ``base`` of its log, which
    each line's ``end`` counts from); its last line is returned even if unterminated.
    """
    state = _File(rank, base, pos=base)
    out: list[LogLine] = []
    follower = LogFollower(JobPaths(Path()))
    follower._take(state, data, time.monotonic(), out)
    if state.partial:
        follower._emit(state, state.partial, out, ended=True, end=state.pos - state.cr)
    return out
