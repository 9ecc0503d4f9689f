"""The studio's reads, without a browser: log pages tail-first, search, live offsets,
and metric downsampling."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest

from phalanx.errors import PhalanxError
from phalanx.jobs.logs import LINE_CAP, LogFollower, decode_block
from phalanx.launch.logtimes import ENTRY, TimesWriter, stamp_appended, times_path
from phalanx.server.logread import MAX_RANKS_AT_ONCE, read_back, read_logs, read_merged, search
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.metrics import downsample


def _log(tmp_path: Path, data: bytes, rank: int = 0) -> Path:
    paths = JobPaths(tmp_path / "job")
    paths.user_logs.mkdir(parents=True, exist_ok=True)
    paths.rank_log(rank).write_bytes(data)
    return paths.rank_log(rank)


def test_pages_backward_from_the_end_give_every_line_once_in_order(tmp_path: Path) -> None:
    lines = [f"line {i} " + "é" * (i % 50) for i in range(5000)]
    log = _log(tmp_path, ("\n".join(lines) + "\n").encode())
    page = read_back(log, 0, before=None, nbytes=4096)
    assert page["end"] == page["size"] == log.stat().st_size
    got = [ln.text for ln in page["lines"]]
    while page["start"] > 0:
        page = read_back(log, 0, before=page["start"], nbytes=4096)
        assert page["lines"], "a page before the start made no progress"
        got = [ln.text for ln in page["lines"]] + got
    assert got == lines


def test_a_page_of_an_unterminated_last_line_and_of_a_line_longer_than_a_page(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, b"first\n" + b"x" * 10_000 + b"\nlast without end")
    page = read_back(log, 0, before=None, nbytes=100)
    assert [ln.text for ln in page["lines"]] == ["last without end"]
    page = read_back(log, 0, before=page["start"], nbytes=100)
    assert [ln.text for ln in page["lines"]] == ["x" * 99]  # the tail of a line longer than a page
    assert read_back(tmp_path / "none.txt", 3, before=None, nbytes=10)["lines"] == []


def test_search_numbers_lines_and_stops_at_its_limit(tmp_path: Path) -> None:
    text = "".join(f"step {i} {'NaN loss' if i % 1000 == 7 else 'ok'}\r\n" for i in range(10_000))
    log = _log(tmp_path, text.encode())
    found = search(log, 0, "nan", limit=3)
    assert [m["line"] for m in found["matches"]] == [8, 1008, 2008]
    assert found["matches"][0]["text"] == "step 7 NaN loss" and not found["complete"]
    assert len(search(log, 0, "NaN", limit=100)["matches"]) == 10
    assert search(log, 0, "NaN", limit=100)["complete"]


def test_a_follower_of_one_rank_starts_at_an_offset_and_says_where_it_is(
    tmp_path: Path,
) -> None:
    _log(tmp_path, b"old 1\nold 2\n", rank=0)
    log = _log(tmp_path, b"rank 3 old\nrank 3 new\npart", rank=3)
    follower = LogFollower(JobPaths(tmp_path / "job"), rank=3)
    follower.start_at({3: len(b"rank 3 old\n")})
    assert [ln.text for ln in follower.poll()] == ["rank 3 new"]
    assert follower.offsets() == {3: log.stat().st_size - len(b"part")}
    with open(log, "ab") as f:
        f.write(b"ial\n")
    assert [(ln.rank, ln.text) for ln in follower.poll()] == [(3, "partial")]


def test_decode_block_splits_as_the_follower_does() -> None:
    lines = decode_block(2, b"a\r\nbar 10%\rbar 100%\nlong " + b"y" * LINE_CAP)
    assert [ln.text for ln in lines][:2] == ["a", "bar 100%"]
    assert "".join(ln.text for ln in lines[2:]) == "long " + "y" * LINE_CAP
    assert {ln.rank for ln in lines} == {2}


def test_downsampling_keeps_the_ends_the_spikes_and_the_order() -> None:
    points: list[tuple[int | None, float | None]] = [(s, float(s % 10)) for s in range(100_000)]
    points[54_321] = (54_321, 1e6)
    points[77_777] = (77_777, -1e6)
    points[88_888] = (88_888, None)
    small = downsample(points, 2000)
    assert len(small) <= 2002
    assert small[0] == points[0] and small[-1] == points[-1]
    assert (54_321, 1e6) in small and (77_777, -1e6) in small
    steps = [s for s, _ in small]
    assert steps == sorted(steps)
    assert downsample(points[:50], 2000) == points[:50]


def test_a_times_index_swapped_for_a_link_gives_no_times_and_leaks_nothing(
    tmp_path: Path,
) -> None:
    """A walled job owns user_logs: a link to a secret in place of its time index (read
    as root by the server) is never followed, and writing through it is refused too."""
    secret = tmp_path / "secret"
    secret.write_bytes(ENTRY.pack(5, 123.0) * 4)  # would read as valid entries
    log = _log(tmp_path, b"line one\nline two\n")
    times_path(log).symlink_to(secret)
    page = read_back(log, 0, before=None, nbytes=4096, timed=True)
    assert [ln.time for ln in page["lines"]] == [None, None]
    merged = read_merged(JobPaths(tmp_path / "job"), None, nbytes=4096)
    assert [ts for _, _, ts in merged["lines"]] == [None, None]
    with contextlib.suppress(OSError):
        stamp_appended(log, 0, 18, 1.0)
    assert secret.read_bytes() == ENTRY.pack(5, 123.0) * 4  # nothing appended through it


def test_merged_pages_back_by_time_across_ranks(tmp_path: Path) -> None:
    """Rank 0 writes often, rank 1 seldom: paging back a few bytes at a time, every line
    comes once and in time order, though one rank's page spans far more time."""
    paths = JobPaths(tmp_path / "job")
    paths.user_logs.mkdir(parents=True)
    written: list[tuple[float, int, str]] = []
    for rank, every in ((0, 1.0), (1, 7.0)):
        log = paths.rank_log(rank)
        writer = TimesWriter(log, 0)
        with open(log, "ab") as f:
            for i in range(200 if rank == 0 else 30):
                text = f"rank {rank} line {i}"
                written.append((i * every + rank / 10, rank, text))
                writer.note(len(text) + 1, i * every + rank / 10)
                f.write(text.encode() + b"\n")
        writer.close()
    got = _merged_back_to_the_start(paths)
    assert [text for _, text, _ in got] == [text for _, _, text in sorted(written)]


def _merged_back_to_the_start(paths: JobPaths) -> list[list[object]]:
    """Every merged line, read as the studio reads them: 300-byte pages, backwards."""
    got: list[list[object]] = []
    before = None
    while True:
        page = read_merged(paths, before, nbytes=300)
        got = page["lines"] + got
        left = {r: s for r, s in page["starts"].items() if s > 0}
        if not left:
            return got
        before = left


def test_merged_pages_of_latin1_logs_give_every_line_once(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (a rank printing Latin-1) show as U+FFFD; paging back
    through the merged view still gives every line once, whole and in time order."""
    paths = JobPaths(tmp_path / "job")
    paths.user_logs.mkdir(parents=True)
    written: list[tuple[float, int, str]] = []
    for rank, every in ((0, 1.0), (1, 7.0)):
        log = paths.rank_log(rank)
        writer = TimesWriter(log, 0)
        with open(log, "ab") as f:
            for i in range(400 if rank == 0 else 60):
                data = f"r{rank} l{i} caf\xe9 ".encode("latin-1") + b"\xe9\xfc" * 10 + b"\n"
                written.append((i * every + rank / 10, rank, data[:-1].decode(errors="replace")))
                writer.note(len(data), i * every + rank / 10)
                f.write(data)
        writer.close()
    got = _merged_back_to_the_start(paths)
    assert [(r, text, ts) for r, text, ts in got] == [(r, t, ts) for ts, r, t in sorted(written)]


def test_every_rank_at_once_is_refused_past_its_limit_and_times_are_per_line(
    tmp_path: Path,
) -> None:
    """A job makes its own user_logs: past MAX_RANKS_AT_ONCE rank logs, a merged page or
    every rank's poll is refused with a message naming the limit; and a poll's times are
    at most one per line end, whatever the index holds, an unknown one as None (JSON
    has no NaN)."""
    paths = JobPaths(tmp_path / "job")
    paths.user_logs.mkdir(parents=True)
    log = paths.rank_log(0)
    log.write_bytes(b"".join(b"line %5d\n" % i for i in range(1000)))  # 11 bytes a line
    with open(times_path(log), "wb") as f:
        f.write(ENTRY.pack(11, math.nan))
        f.write(b"".join(ENTRY.pack(o, float(o)) for o in range(12, 11_001)))  # one a byte
    (item,) = read_logs(paths, all_ranks=True, offsets={}, timed=True)
    assert len(item["times"]) <= 1000 + 2
    assert item["times"][0] == [11, None] and item["times"][1] == [22, 22.0]
    for rank in range(1, MAX_RANKS_AT_ONCE + 1):
        paths.rank_log(rank).write_bytes(b"")
    with pytest.raises(PhalanxError, match=f"at most {MAX_RANKS_AT_ONCE} are read together"):
        read_merged(paths, None, nbytes=4096)
    with pytest.raises(PhalanxError, match=str(MAX_RANKS_AT_ONCE)):
        read_logs(paths, all_ranks=True, offsets={}, timed=True)
    assert read_logs(paths, all_ranks=False, offsets={}, timed=True)[0]["size"] == 11_000
