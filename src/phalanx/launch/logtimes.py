"""When each line of a rank's log was written: a sidecar index of (offset, time) entries.

The rank's log (``user_logs/std_log_process_<r>.txt``) stays exactly what the
user's program wrote: no time prefix is added to it, so a user's own tools
(``grep``, ``tail``, a parser of their own lines) read it as before. The times go
to a sidecar, ``user_logs/.std_log_process_<r>.times`` (hidden, and in
``user_logs`` because that is the one folder a walled-off job may write in every
attempt), a flat file of 16-byte entries ``<offset: u64><time: f64>``: every byte
before ``offset`` had been written by ``time`` (Unix seconds). A line's time is that
of the first entry at or after its end. Offsets and times only grow, so a lookup is
a binary search, and a page of lines needs one entry a line at most (the job writes
its index: a reader keeps no more of it than that, whatever it holds). A writer
first cuts entries past the log's end (bytes stamped but never written: a killed
wrapper, a failed write), so offsets keep growing across attempts.

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
import errno
import math
import os
import re
import stat
import struct
from collections.abc import Sequence
from pathlib import Path

from phalanx.nofollow import open_file

ENTRY = struct.Struct("<Qd")
# Never through a link, and never blocking on a FIFO a job put in its place: the
# supervisor writes a shipped log's index as root.
_WRITE = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_RANK_LOG = re.compile(r"std_log_process_[0-9]{1,7}\.txt")
_INDEX = re.compile(r"\.std_log_process_[0-9]{1,7}\.times")
FREE_ENTRIES = 4096
BYTES_PER_ENTRY = 64
_UNKNOWN = float("nan")
# Entries read at once after a search: the next lines' are usually among them.
_NEAR = 64


def times_path(log: Path) -> Path:
    """The sidecar index of a rank's log."""
    return log.with_name(f".{log.stem}.times")


def is_rank_log(name: str) -> bool:
    """Whether a file's ``name`` (in ``user_logs``) is a rank's log, which gets an index."""
    return _RANK_LOG.fullmatch(name) is not None


def is_index(name: str) -> bool:
    """Whether a file's ``name`` is a rank log's time index (phalanx's, not the job's: left
    out of the files a user lists and downloads); any other name is the job's own."""
    return _INDEX.fullmatch(name) is not None


def _open_index(log: Path) -> int:
    """The index of ``log``, opened to append: only a regular file (a FIFO in its place
    would take a few writes, then block the writer for good)."""
    fd = os.open(times_path(log), _WRITE, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(times_path(log)))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _offset_at(fd: int, i: int) -> int:
    return int(ENTRY.unpack(os.pread(fd, ENTRY.size, i * ENTRY.size))[0])


def _first_at(fd: int, lo: int, count: int, offset: int) -> int:
    """The first entry in ``lo..count`` whose offset is at or after ``offset``."""
    hi = count
    while lo < hi:
        mid = (lo + hi) // 2
        if _offset_at(fd, mid) < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _last(fd: int, size: int) -> tuple[int, float] | None:
    """The index's last entry, once entries past byte ``size`` of the log (their bytes
    never reached it: a write failed, or the writer was killed between stamping and
    writing) and a torn last entry are cut off, so offsets keep growing."""
    count = os.fstat(fd).st_size // ENTRY.size
    keep = _first_at(fd, 0, count, size + 1)
    if keep * ENTRY.size != os.fstat(fd).st_size:
        os.ftruncate(fd, keep * ENTRY.size)
    if keep == 0:
        return None
    offset, when = ENTRY.unpack(os.pread(fd, ENTRY.size, (keep - 1) * ENTRY.size))
    return int(offset), float(when)


class TimesWriter:
    """Stamps a log's bytes as one writer appends them (the rank's wrapper).

    Call :meth:`note` with each read *before* writing it to the log, so a reader
    that sees the bytes finds their entry; :meth:`settle` when the output is quiet;
    :meth:`close` at the end.
    """

    def __init__(self, log: Path, size: int) -> None:
        self.fd = _open_index(log)
        self.end = size
        self.last = 0.0
        self.count = 0
        self.written = 0
        self.pending: tuple[int, float] | None = None
        try:
            last = _last(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
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

    def resync(self, size: int) -> None:
        """The log is ``size`` bytes, not what was noted: a write of it failed or fell
        short (a full disk). The entries past ``size`` go, and one at ``size`` says its
        bytes were written by now, so later bytes' offsets are the log's again."""
        self.pending = None
        with contextlib.suppress(OSError):
            _last(self.fd, size)
        self.end = size
        self._put(size, self.last)

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
    fd = _open_index(log)
    try:
        last = _last(fd, before)
        data = b""
        if before > (last[0] if last else 0):
            data += ENTRY.pack(before, _UNKNOWN)
        if last and not math.isnan(last[1]):
            when = max(when, last[1])
        os.write(fd, data + ENTRY.pack(after, when))
    finally:
        os.close(fd)


def entries(log: Path, ends: Sequence[int]) -> list[tuple[int, float]]:
    """For each of ``ends`` (byte offsets of ``log``, ascending), the index's first entry
    at or after it, each entry once: what :func:`lookup` needs for lines ending there.

    Nothing more is kept, whatever the index holds between them: a job writes its own
    index, so its size bounds nothing; memory grows with the lines asked about only.
    """
    try:  # as the log itself is read: never through a link, only a regular file
        fd = open_file(times_path(log))
    except OSError:
        return []
    try:
        count = os.fstat(fd).st_size // ENTRY.size
        out: list[tuple[int, float]] = []
        at = 0  # no entry before this one is at or after the ends still to come
        near: list[tuple[int, float]] = []  # the entries from ``at`` on, as last read
        for end in ends:
            if out and out[-1][0] >= end:
                continue  # the entry found for an earlier end covers this one too
            found = next((e for e in near if e[0] >= end), None)
            if found is None:  # not among the next few: a binary search from here
                at = _first_at(fd, at + len(near), count, end)
                block = os.pread(fd, ENTRY.size * min(_NEAR, count - at), at * ENTRY.size)
                block = block[: len(block) - len(block) % ENTRY.size]  # cut short meanwhile
                near = [(int(o), float(t)) for o, t in ENTRY.iter_unpack(block)]
                if not near:
                    break  # past the index's end: no later end is covered either
                found = near[0]
            out.append(found)
        return out
    except struct.error:  # the index was cut short while it was searched
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
