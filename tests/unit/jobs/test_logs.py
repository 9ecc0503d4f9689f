"""Following log files: whole lines, late files, progress bars, bounded reads."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from phalanx.jobs.logs import LINE_CAP, PARTIAL_AFTER_S, READ_BYTES, LogFollower, LogLine
from phalanx.launch.logtimes import (
    BYTES_PER_ENTRY,
    ENTRY,
    FREE_ENTRIES,
    TimesWriter,
    entries,
    lookup,
    times_path,
)
from phalanx.launch.worker import _copy_output
from phalanx.workspace.layout import JobPaths


def texts(lines: object) -> list[tuple[int, str]]:
    """``(rank, text)`` of each line returned (a flush's iterator included)."""
    assert not isinstance(lines, str)
    return [(line.rank, line.text) for line in lines]  # type: ignore[attr-defined]


def test_lines_appear_once_whole_and_in_rank_order(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths, all_ranks=True)
    assert follower.poll() == []
    paths.rank_log(0).write_text("a\nhalf")
    assert texts(follower.poll()) == [(0, "a")]
    with open(paths.rank_log(0), "a") as f:
        f.write(" line\n")
    paths.rank_log(1).write_text("b\n")  # a rank that starts later is picked up
    assert texts(follower.poll()) == [(0, "half line"), (1, "b")]
    assert follower.poll() == []


def test_rank_zero_only_by_default(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    paths.rank_log(0).write_text("zero\n")
    paths.rank_log(1).write_text("one\n")
    assert texts(LogFollower(paths).poll()) == [(0, "zero")]


def test_progress_bar_shows_its_latest_state_and_flush_ends_lines(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths)
    paths.rank_log(0).write_text("10%\r50%\r90%")
    assert follower.poll() == []
    time.sleep(PARTIAL_AFTER_S + 0.1)
    assert texts(follower.poll()) == [(0, "90%")]
    with open(paths.rank_log(0), "a") as f:
        f.write("\rdone")
    assert texts(follower.flush()) == [(0, "done")]


def test_carriage_returns_end_lines_and_redraws_in_one_read_collapse(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths)
    log = paths.rank_log(0)
    log.write_text("\r  0%|\r 50%|\r100%|\r\nepoch 1\r\n\r\n")  # tqdm, then Windows ends
    assert texts(follower.poll()) == [(0, "100%|"), (0, "epoch 1"), (0, "")]
    with open(log, "a") as f:
        f.write("saving\r")  # a "\r" that ends a read may be half of "\r\n"
    assert follower.poll() == []
    with open(log, "a") as f:
        f.write("\nstep 1\rstep 2\r")
    assert texts(follower.poll()) == [(0, "saving")]
    with open(log, "a") as f:
        f.write("step 3\n")
    assert texts(follower.poll()) == [(0, "step 3")]  # step 2 was redrawn


def test_a_line_longer_than_the_cap_comes_in_marked_pieces(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths)
    paths.rank_log(0).write_text("a" * LINE_CAP + "b" * LINE_CAP + "tail")
    # Without waiting for the line's end or PARTIAL_AFTER_S.
    got = [ln[:3] for ln in follower.poll()]  # rank, text, cont (not where the pieces end)
    assert got == [LogLine(0, "a" * LINE_CAP)[:3], LogLine(0, "b" * LINE_CAP, cont=True)[:3]]
    with open(paths.rank_log(0), "a") as f:
        f.write(" end\nnext\n")
    got = [ln[:3] for ln in follower.poll()]
    assert got == [LogLine(0, "tail end", cont=True)[:3], LogLine(0, "next")[:3]]


def test_reads_are_bounded_and_characters_stay_whole_across_them(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths, all_ranks=True)
    # "é" is two bytes: the first ends a read, the second begins the next.
    line = "a" * (READ_BYTES - 1) + "é"
    paths.rank_log(0).write_text(f"{line}\n" * 3)
    paths.rank_log(1).write_text("one\n")
    first = follower.poll()
    assert follower.behind
    assert 0 < sum(len(x.text) for x in first if x.rank == 0) <= READ_BYTES
    assert texts(x for x in first if x.rank == 1) == [(1, "one")]
    shown = list(first)
    while follower.behind:
        shown += follower.poll()
    shown += follower.flush()
    whole: list[str] = []  # pieces joined back by their marks
    for piece in shown:
        if piece.rank == 0:
            whole[-1:] = [whole[-1] + piece.text] if piece.cont else [*whole[-1:], piece.text]
    assert whole == [line] * 3


def test_memory_stays_bounded_on_a_bar_that_never_ends_its_line(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    with open(paths.rank_log(0), "w") as f:
        for i in range(2_000_000):  # 20 MB of redraws and never a newline
            f.write(f"\r{i:>8}%")
    follower = LogFollower(paths)
    tracemalloc.start()
    try:
        shown = list(follower.flush())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert texts(shown)[-1] == (0, f"{1_999_999:>8}%")
    assert peak < 8 << 20, f"following a bar held {peak >> 20} MiB"


def test_the_worker_copies_output_as_written_times_each_line_and_leaves_a_daemon(
    tmp_path: Path,
) -> None:
    """The rank's wrapper: its log is exactly what the command printed, each line has
    the time it was printed, and a process the command left holding its output does not
    keep the wrapper from ending."""
    pid_file = tmp_path / "daemon.pid"
    command = f"echo one; sleep 0.5; echo two; (sleep 60 & echo $! > {pid_file}); echo three"
    env = {**os.environ, "RANK": "0", "PHALANX_JOB_DIR": str(tmp_path)}
    (tmp_path / "user_logs").mkdir()
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "phalanx.launch.worker", command], env=env, timeout=60
        )
        took = time.monotonic() - started
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert proc.returncode == 0
    assert took < 30  # not the daemon's 60 s
    log = tmp_path / "user_logs" / "std_log_process_0.txt"
    assert log.read_bytes() == b"one\ntwo\nthree\n"  # no time written into the log
    ends = [4, 8, 14]
    one, two, three = lookup(entries(log, ends), ends)
    assert one is not None and two is not None and three is not None
    assert two - one >= 0.4 and three >= two
    # The follower gives the same times, and the live API's lines carry them.
    follower = LogFollower(JobPaths(tmp_path), timed=True)
    assert [(ln.text, ln.time) for ln in follower.flush()] == [
        ("one", one), ("two", two), ("three", three)
    ]  # fmt: skip


def test_a_times_index_marks_untimed_bytes_and_stays_within_its_budget(tmp_path: Path) -> None:
    log = tmp_path / "std_log_process_0.txt"
    log.write_bytes(b"written before any index\n")
    writer = TimesWriter(log, log.stat().st_size)
    for i in range(FREE_ENTRIES * 3):  # a burst of one-byte writes
        writer.note(1, 1000.0 + i / 1e6)
    writer.close()
    size = 25 + FREE_ENTRIES * 3
    found = entries(log, range(size + 1))  # every entry: one at or after each byte
    assert found[0][0] == 25 and lookup(found, [25]) == [None]  # unknown, never invented
    assert FREE_ENTRIES < len(found) <= FREE_ENTRIES + 3 * FREE_ENTRIES // BYTES_PER_ENTRY + 2
    assert found[-1] == (size, 1000.0 + (FREE_ENTRIES * 3 - 1) / 1e6)  # the last byte's time
    assert [o for o, _ in found] == sorted(o for o, _ in found)


def test_a_line_of_unknown_time_keeps_its_place_among_its_ranks_lines(tmp_path: Path) -> None:
    """Attempt 1's last line lost its entry (its wrapper was killed): it is of unknown
    time, and still comes before attempt 2's lines of the same rank, after the lines
    written before it."""
    paths = JobPaths(tmp_path)
    paths.make()
    zero, one = paths.rank_log(0), paths.rank_log(1)
    for log, lines in ((zero, [("a1", 10.0)]), (one, [("r1", 15.0)])):
        writer = TimesWriter(log, 0)
        for text, when in lines:
            writer.note(len(text) + 1, when)
            with open(log, "a") as f:
                f.write(text + "\n")
        writer.close()
    with open(zero, "a") as f:
        f.write("tail\n")  # no entry: the wrapper died before it wrote one
    writer = TimesWriter(zero, zero.stat().st_size)  # attempt 2
    writer.note(2, 20.0)
    with open(zero, "a") as f:
        f.write("b\n")
    writer.close()
    follower = LogFollower(paths, all_ranks=True, timed=True)
    assert [(ln.rank, ln.text, ln.time) for ln in follower.poll()] == [
        (0, "a1", 10.0), (0, "tail", None), (1, "r1", 15.0), (0, "b", 20.0)
    ]  # fmt: skip


def test_bytes_that_are_not_utf8_keep_every_line_end_exact(tmp_path: Path) -> None:
    """A rank printing Latin-1: each invalid byte shows as U+FFFD, yet each line's end is
    its real offset, so its time is its own (not a later line's)."""
    paths = JobPaths(tmp_path)
    paths.make()
    log = paths.rank_log(0)
    writer = TimesWriter(log, 0)
    written = []
    with open(log, "ab") as f:
        for i in range(50):
            data = f"caf\xe9 {i} ".encode("latin-1") + b"\xe9" * 20 + b"\n"
            writer.note(len(data), 1000.0 + i)
            f.write(data)
            written.append((f"caf\ufffd {i} " + "\ufffd" * 20, 1000.0 + i))
    writer.close()
    follower = LogFollower(paths, timed=True)
    assert [(ln.text, ln.time) for ln in follower.poll()] == written
    assert follower.offsets() == {0: log.stat().st_size}


def test_a_crafted_index_costs_no_more_than_the_lines_asked_about(tmp_path: Path) -> None:
    """A job writes its own index: one of an entry per byte gives back one entry per
    line end asked about, not every entry in the range."""
    log = tmp_path / "std_log_process_0.txt"
    log.write_bytes(b"x" * 99 + b"\n" + b"y" * 99_899 + b"\n")
    with open(times_path(log), "wb") as f:
        f.write(b"".join(ENTRY.pack(o, float(o)) for o in range(1, 100_001)))
    found = entries(log, [100, 100_000])
    assert found == [(100, 100.0), (100_000, 100_000.0)]
    assert lookup(found, [100, 100_000]) == [100.0, 100_000.0]


def test_an_index_past_its_log_is_cut_back_before_the_next_attempt_appends(
    tmp_path: Path,
) -> None:
    """A wrapper killed between stamping a read and writing it leaves an entry past the
    log's end: the next attempt's writer drops it, so offsets keep growing."""
    log = tmp_path / "std_log_process_0.txt"
    log.write_bytes(b"abc\n")
    times_path(log).write_bytes(ENTRY.pack(4, 1.0) + ENTRY.pack(10, 2.0) + b"torn")
    writer = TimesWriter(log, 4)
    writer.note(3, 3.0)
    with open(log, "ab") as f:
        f.write(b"de\n")
    writer.close()
    assert entries(log, range(8)) == [(4, 1.0), (7, 3.0)]
    assert lookup(entries(log, [4, 7]), [4, 7]) == [1.0, 3.0]


def test_a_write_that_fails_leaves_no_entry_past_the_log(tmp_path: Path) -> None:
    """A full disk (``/dev/full`` as the log: every write fails): the index never says
    bytes were written that the log lacks, so later times stay on their own lines."""
    log_path = tmp_path / "std_log_process_0.txt"
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(["sh", "-c", "echo one; echo two"], stdout=write_end)
    os.close(write_end)
    with open("/dev/full", "wb", buffering=0) as full:
        assert _copy_output(proc, read_end, full.fileno(), log_path) == 0
    index = times_path(log_path).read_bytes()
    assert index and {o for o, _ in ENTRY.iter_unpack(index)} == {0}
