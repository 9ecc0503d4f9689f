"""When each line of a rank's log was written: a sidecar index of (offset, time) entries.

The rank's log (``user_logs/std_log_process_<r>.txt``) stays exactly what the
user's program wrote: no time prefix is added to it, so a user's own tools
(``grep``, ``tail``, a parser of their own lines) read it as before. The times go
to a sidecar, ``user_logs/.std_log_process_<r>.times`` (hidden, and in
``user_logs`` because that is the one folder a walled-off job may write in every
attempt), a flat file of 16-byte entries ``<offset: u64><time: f64>``: every byte
before ``offset`` had been written by ``time`` (Unix seconds). A line's time is that
of the first entry at or after its end. Offsets and times only grow, so a lookup is
a binary search, and a page of lines needs only the entries of its bytes.

Who writes it: the rank's wrapper (:mod:`phalanx.launch.worker`), which reads the
rank's output from a pipe and stamps each read before it appends it to the log;
for a node whose folder is shipped (:mod:`phalanx.compute.ship`), the supervisor,
as the bytes arrive (the node's own index stays on the node: its offsets are its
folder's, not the workspace's). An entry with a NaN time marks bytes of unknown
time (written before any index, or whose entry was lost with a killed wrapper).

Bounded on disk: an entry per read while the index holds fewer than
:data:`FREE_ENTRIES` plus one per :data:`BYTES_PER_ENTRY` bytes of log (a log of
normal lines gets a time per line; a burst of tiny writes shares entries), plus at
most one per quiet spell of the output. The index is then at most a quarter of the
log plus 64 KiB. Standard library only: the wrapper imports it.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path

from phalanx.nofollow import open_file

ENTRY = struct.Struct("<Qd")
# Never through a link: the supervisor writes a shipped log's index as root.
_WRITE = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
FREE_ENTRIES = 4096
BYTES_PER_ENTRY = 64
_UNKNOWN = float("nan")


def times_path(log: Path) -> Path:
    """The sidecar index of a rank's log."""
    return log.with_name(f".{log.stem}.times")


def is_index(name: str) -> bool:
    """Whether a file's ``name`` is a log's time index (phalanx's, not the job's: left out
    of the files a user lists and downloads)."""
    return name.startswith(".std_log") and name.endswith(".times")


def _last(fd: int) -> tuple[int, float] | None:
    size = os.fstat(fd).st_size
    if size < ENTRY.size:
        return None
    offset, when = ENTRY.unpack(os.pread(fd, ENTRY.size, size - size % ENTRY.size - ENTRY.size))
    return int(offset), float(when)


class TimesWriter:
    """Stamps a log's bytes as one writer appends them (the rank's wrapper).

    Call :meth:`note` with each read *before* writing it to the log, so a reader
    that sees the bytes finds their entry; :meth:`settle` when the output is quiet;
    :meth:`close` at the end.
    """

    def __init__(self, log: Path, size: int) -> None:
        self.fd = os.open(times_path(log), _WRITE, 0o644)
        self.end = size
        self.last = 0.0
        self.count = 0
        self.written = 0
        self.pending: tuple[int, float] | None = None
        last = _last(self.fd)
        if size > (last[0] if last else 0):  # bytes no entry covers: their time is unknown
            self._put(size, _UNKNOWN)
        if last and not math.isnan(last[1]):
            self.last = last[1]

    def note(self, nbytes: int, when: float) -> None:
        self.end += nbytes
        self.written += nbytes
        self.last = max(self.last, when)  # a clock set back never reorders a log
        if self.count < FREE_ENTRIES + self.written // BYTES_PER_ENTRY:
            self.pending = None
            self._put(self.end, self.last)
        else:
            self.pending = (self.end, self.last)

    def settle(self) -> None:
        """Write an entry held back by the budget (the output went quiet)."""
        if self.pending is not None:
            self._put(*self.pending)
            self.pending = None

    def close(self) -> None:
        self.settle()
        os.close(self.fd)

    def _put(self, offset: int, when: float) -> None:
        self.count += 1
        with contextlib.suppress(OSError):  # a full disk loses times, never the log
            os.write(self.fd, ENTRY.pack(offset, when))


def stamp_appended(log: Path, before: int, after: int, when: float) -> None:
    """Stamp bytes ``before..after`` of ``log``, appended by someone else at ``when``
    (the supervisor writing a shipped node's log)."""
    if after <= before:
        return
    fd = os.open(times_path(log), _WRITE, 0o644)
    try:
        last = _last(fd)
        data = b""
        if before > (last[0] if last else 0):
            data += ENTRY.pack(before, _UNKNOWN)
        if last and not math.isnan(last[1]):
            when = max(when, last[1])
        os.write(fd, data + ENTRY.pack(after, when))
    finally:
        os.close(fd)


def entries(log: Path, start: int, end: int, cap: int = 1 << 16) -> list[tuple[int, float]]:
    """The index's entries for bytes ``start..end`` of ``log``: from the first entry at
    or after ``start`` to the first at or after ``end`` (at most ``cap``)."""
    try:  # as the log itself is read: never through a link, only a regular file
        fd = open_file(times_path(log))
    except OSError:
        return []
    try:
        count = os.fstat(fd).st_size // ENTRY.size

        def offset_at(i: int) -> int:
            return int(ENTRY.unpack(os.pread(fd, ENTRY.size, i * ENTRY.size))[0])

        lo, hi = 0, count
        while lo < hi:  # the first entry whose offset is >= start
            mid = (lo + hi) // 2
            if offset_at(mid) < start:
                lo = mid + 1
            else:
                hi = mid
        out: list[tuple[int, float]] = []
        while lo < count and len(out) < cap:
            block = os.pread(fd, ENTRY.size * min(4096, count - lo), lo * ENTRY.size)
            for offset, when in ENTRY.iter_unpack(block[: len(block) - len(block) % ENTRY.size]):
                out.append((int(offset), float(when)))
                if offset >= end or len(out) >= cap:
                    return out
            lo += max(1, len(block) // ENTRY.size)
        return out
    finally:
        os.close(fd)


def lookup(found: Sequence[tuple[int, float]], ends: Sequence[int]) -> list[float | None]:
    """The time of each line ending at ``ends`` (bytes), from :func:`entries`;
    ``None`` where no entry covers it or its time is unknown."""
    offsets = [offset for offset, _ in found]
    out: list[float | None] = []
    for end in ends:
        i = bisect.bisect_left(offsets, end)
        when = found[i][1] if i < len(found) else None
        out.append(None if when is None or math.isnan(when) else when)
    return out
