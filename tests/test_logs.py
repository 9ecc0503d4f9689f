"""Following log files: whole lines, late files, progress bars."""

from __future__ import annotations

import time
from pathlib import Path

from phalanx.jobs.logs import PARTIAL_AFTER_S, LogFollower
from phalanx.workspace.layout import JobPaths


def test_lines_appear_once_whole_and_in_rank_order(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths, all_ranks=True)
    assert follower.poll() == []
    paths.rank_log(0).write_text("a\nhalf")
    assert follower.poll() == [(0, "a")]
    with open(paths.rank_log(0), "a") as f:
        f.write(" line\n")
    paths.rank_log(1).write_text("b\n")  # a rank that starts later is picked up
    assert follower.poll() == [(0, "half line"), (1, "b")]
    assert follower.poll() == []


def test_rank_zero_only_by_default(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    paths.rank_log(0).write_text("zero\n")
    paths.rank_log(1).write_text("one\n")
    assert LogFollower(paths).poll() == [(0, "zero")]


def test_progress_bar_shows_its_latest_state_and_flush_ends_lines(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path)
    paths.make()
    follower = LogFollower(paths)
    paths.rank_log(0).write_text("10%\r50%\r90%")
    assert follower.poll() == []
    time.sleep(PARTIAL_AFTER_S + 0.1)
    assert follower.poll() == [(0, "90%")]
    with open(paths.rank_log(0), "a") as f:
        f.write("\rdone")
    assert follower.flush() == [(0, "done")]
