"""Shipping a node's job files to the workspace (phalanx.compute.ship), folder to folder."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from phalanx.compute.ship import Scanner, apply
from phalanx.launch.logtimes import (
    TimesWriter,
    entries,
    is_index,
    lookup,
    stamp_appended,
    times_path,
)


def _pair(tmp_path: Path) -> tuple[Path, Path, Scanner]:
    node, ws = tmp_path / "node", tmp_path / "ws"
    node.mkdir()
    ws.mkdir()
    return node, ws, Scanner({"job": node}, skip=frozenset({"code"}))


def _ship(scanner: Scanner, ws: Path, budget: int = 1 << 20) -> bool:
    changes, more = scanner.scan(budget)
    assert apply(changes, {"job": ws}) == []
    return more


def test_logs_are_appended_to_what_the_workspace_has(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    (ws / "user_logs").mkdir()
    (ws / "user_logs" / "std_log_process_0.txt").write_text("attempt 1 line\n")  # earlier attempt
    (node / "user_logs").mkdir()
    log = node / "user_logs" / "std_log_process_0.txt"
    log.write_text("attempt 2 a\n")
    _ship(scanner, ws)
    with open(log, "a") as f:
        f.write("attempt 2 b\n")
    _ship(scanner, ws)
    assert (ws / "user_logs" / "std_log_process_0.txt").read_text() == (
        "attempt 1 line\nattempt 2 a\nattempt 2 b\n"
    )
    changes, _ = scanner.scan()
    assert changes == []  # nothing new: nothing sent


def test_whole_files_replace_grow_in_place_and_deletions(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    (node / "code").mkdir()
    (node / "code" / "train.py").write_text("skipped")
    (node / "checkpoints").mkdir()
    ckpt = node / "checkpoints" / "step.txt"
    ckpt.write_text("5")
    events = node / "outputs" / "events.out"
    events.parent.mkdir()
    events.write_bytes(b"a" * 5000)
    _ship(scanner, ws)
    assert (ws / "checkpoints" / "step.txt").read_text() == "5"
    assert not (ws / "code").exists()
    # Rewritten by rename (a new inode): sent whole.
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text("12")
    os.replace(tmp, ckpt)
    # Grown in place: only the new bytes go.
    with open(events, "ab") as f:
        f.write(b"b" * 10)
    changes, _ = scanner.scan()
    sent = {c.path: c for c in changes}
    grown = sent["outputs/events.out"]
    assert grown.offset == 5000 and grown.data == b"b" * 10
    assert sent["checkpoints/step.txt"].offset == -1
    assert apply(changes, {"job": ws}) == []
    assert (ws / "outputs" / "events.out").read_bytes() == b"a" * 5000 + b"b" * 10
    assert (ws / "checkpoints" / "step.txt").read_text() == "12"
    # Rewritten in place with other bytes: not taken for growth.
    events.write_bytes(b"c" * 6000)
    _ship(scanner, ws)
    assert (ws / "outputs" / "events.out").read_bytes() == b"c" * 6000
    # Rewritten in place at the same size (a database page): sent whole, not as nothing.
    with open(events, "r+b") as f:
        f.write(b"d" * 10)
    os.utime(events, ns=(events.stat().st_atime_ns, events.stat().st_mtime_ns + 1_000_000))
    _ship(scanner, ws)
    assert (ws / "outputs" / "events.out").read_bytes() == b"d" * 10 + b"c" * 5990
    # Only logs and the job's metrics are appended; another .jsonl file is a file.
    rows = node / "outputs" / "eval.jsonl"
    rows.write_text('{"a": 1}\n')
    _ship(scanner, ws)
    rows.write_text('{"a": 2}\n')
    _ship(scanner, ws)
    assert (ws / "outputs" / "eval.jsonl").read_text() == '{"a": 2}\n'
    ckpt.unlink()
    _ship(scanner, ws)
    assert not (ws / "checkpoints" / "step.txt").exists()
    assert not list(ws.rglob(".*.shipping"))


def test_a_copy_that_does_not_match_is_sent_whole_again(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    data = node / "outputs" / "data.bin"
    data.parent.mkdir()
    data.write_bytes(b"x" * 100)
    _ship(scanner, ws)
    (ws / "outputs" / "data.bin").write_bytes(b"x" * 50)  # changed here meanwhile
    with open(data, "ab") as f:
        f.write(b"y")
    changes, _ = scanner.scan()
    resend = apply(changes, {"job": ws})
    assert resend == [("job", "outputs/data.bin")]
    scanner.forget(resend)
    _ship(scanner, ws)
    assert (ws / "outputs" / "data.bin").read_bytes() == b"x" * 100 + b"y"


def test_a_budget_spreads_big_changes_over_scans(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    (node / "outputs").mkdir()
    for i in range(3):
        (node / "outputs" / f"f{i}.bin").write_bytes(bytes([i]) * 1000)
    scans = 1
    while _ship(scanner, ws, budget=1500):
        scans += 1
    assert scans == 3  # one file per scan (each at least one)
    assert [(ws / "outputs" / f"f{i}.bin").read_bytes() for i in range(3)] == [
        bytes([i]) * 1000 for i in range(3)
    ]


def test_a_log_bigger_than_the_budget_is_read_and_sent_in_pieces(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    (node / "user_logs").mkdir()
    data = bytes(range(256)) * 40  # 10 KiB of one rank's output
    (node / "user_logs" / "std_log_process_0.txt").write_bytes(data)
    sizes = []
    more = True
    while more:
        changes, more = scanner.scan(budget=4096)
        sizes += [len(c.data) for c in changes]
        assert apply(changes, {"job": ws}) == []
    assert sizes == [4096, 4096, 2048]  # never the whole log in memory at once
    assert (ws / "user_logs" / "std_log_process_0.txt").read_bytes() == data


def test_seeded_files_are_not_sent_back_and_paths_stay_inside(tmp_path: Path) -> None:
    node, ws, scanner = _pair(tmp_path)
    (node / "checkpoints").mkdir()
    (node / "checkpoints" / "seed.pt").write_bytes(b"seed")
    scanner.know("job")
    assert scanner.scan() == ([], False)
    from phalanx.compute.ship import Change

    bad = [Change("job", "../escape.txt", b"no"), Change("job", "/abs.txt", b"no")]
    assert apply(bad, {"job": ws}) == []
    assert not (tmp_path / "escape.txt").exists() and not Path("/abs.txt").exists()


def test_a_shipped_rank_log_is_timed_on_arrival_and_the_nodes_index_stays(
    tmp_path: Path,
) -> None:
    node, ws, scanner = _pair(tmp_path)
    (ws / "user_logs").mkdir()
    shipped = ws / "user_logs" / "std_log_process_0.txt"
    shipped.write_text("before any index\n")  # an earlier attempt, never timed
    (node / "user_logs").mkdir()
    log = node / "user_logs" / "std_log_process_0.txt"
    log.write_text("node line 1\n")
    times_path(log).write_bytes(b"node offsets: not the workspace's")
    t0 = time.time()
    _ship(scanner, ws)
    assert not times_path(shipped).exists() or times_path(shipped).read_bytes()[:4] != b"node"
    with open(log, "a") as f:
        f.write("node line 2\n")
    _ship(scanner, ws)
    size = shipped.stat().st_size
    # The earlier attempt's bytes are of unknown time; each shipped piece has its arrival.
    first = len("before any index\n")
    found = entries(shipped, [first, first + 12, size])
    assert lookup(found, [first, first + 12, size]) == [None, found[1][1], found[2][1]]
    assert [o for o, _ in found] == [first, first + 12, size]
    assert t0 <= found[1][1] <= found[2][1] <= time.time()


def test_only_rank_logs_indexes_stay_and_only_rank_logs_are_stamped(tmp_path: Path) -> None:
    """A job's own files named like an index (``outputs/.x.times``, a ``user_logs``
    file of its own) are shipped; only a rank log's own index stays on the node, and
    only a rank log is stamped on arrival (no index appears beside any other log)."""
    node, ws, scanner = _pair(tmp_path)
    (node / "outputs").mkdir()
    (node / "outputs" / ".model.times").write_bytes(b"the job's own file")
    (node / "user_logs").mkdir()
    (node / "user_logs" / ".notes.times").write_bytes(b"also the job's")
    (node / "user_logs" / "std_log_process_0.txt").write_text("rank line\n")
    times_path(node / "user_logs" / "std_log_process_0.txt").write_bytes(b"node offsets")
    (node / "user_logs" / "train.log").write_text("the job's own log\n")
    _ship(scanner, ws)
    assert (ws / "outputs" / ".model.times").read_bytes() == b"the job's own file"
    assert (ws / "user_logs" / ".notes.times").read_bytes() == b"also the job's"
    assert (ws / "user_logs" / "train.log").read_text() == "the job's own log\n"
    assert not times_path(ws / "user_logs" / "train.log").exists()
    rank_log = ws / "user_logs" / "std_log_process_0.txt"
    assert lookup(entries(rank_log, [10]), [10])[0] is not None  # stamped here, not the node's
    assert is_index(".std_log_process_12.times")
    assert not is_index(".std_log_process_x.times") and not is_index(".train.times")


def test_a_fifo_in_place_of_an_index_is_refused_not_written(tmp_path: Path) -> None:
    """The supervisor (root) stamps a shipped log's index: a FIFO a job put there would
    accept a few writes, then block it for good. It is refused; the log still arrives."""
    node, ws, scanner = _pair(tmp_path)
    (ws / "user_logs").mkdir()
    shipped = ws / "user_logs" / "std_log_process_0.txt"
    os.mkfifo(times_path(shipped))
    (node / "user_logs").mkdir()
    (node / "user_logs" / "std_log_process_0.txt").write_text("line\n")
    _ship(scanner, ws)
    assert shipped.read_text() == "line\n"
    with pytest.raises(OSError):
        stamp_appended(shipped, 0, 5, 1.0)
    with pytest.raises(OSError):
        TimesWriter(shipped, 5)
