"""The studio's jobs page over 10,000 jobs, in a real headless Chromium.

The 10,000 jobs are written through the workspace's API (``jobrows``), before the
server starts: the page only needs their rows, none of them runs. The server
filters, sorts and pages them; the page shows 50 at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

import jobpython
import servers
from conftest import workspace_processes
from jobrows import write_jobs
from test_studio import browser, page  # noqa: F401 (the module's browser and page)

pytestmark = pytest.mark.slow

MANY = 10_000


@dataclass
class Many:
    url: str
    home: Path


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Many]:
    root = tmp_path_factory.mktemp("many")
    home = jobpython.workspace_home(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), XDG_CONFIG_HOME=str(root / "config"))
    write_jobs(home, MANY)
    server = servers.start_phalanx_server(home, env)
    try:
        yield Many(server.url, home)
    finally:
        servers.kill_phalanx_server(server)
        for proc in workspace_processes(home):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def _names(tab: Any) -> list[str]:
    return tab.eval_on_selector_all("#jobs tr", "rows => rows.map(r => r.dataset.job)")


def _count_is(tab: Any, text: str) -> None:
    try:
        tab.wait_for_function(
            "text => document.getElementById('count').textContent === text", arg=text
        )
    except Exception:
        raise AssertionError(f"count {tab.text_content('#count')!r}, not {text!r}") from None


def test_ten_thousand_jobs_page_sort_filter_and_follow(many: Many, page: Any) -> None:  # noqa: F811
    page.goto(many.url + "/")
    _count_is(page, "1–50 of 10,000")
    assert _names(page) == [f"job-{i:05d}" for i in range(MANY - 1, MANY - 51, -1)]
    row = page.locator('tr[data-job="job-09999"]').inner_text()
    assert "Trial 9999 of lr sweep" in row and "ann" in row and "exp-4" in row
    chips = page.locator('tr[data-job="job-09999"] .chip').all_inner_texts()
    assert sorted(chips) == ["seed=3", "team=speech"] and "{" not in row  # chips, not JSON
    # Sort by a column: name, A to Z, then Z to A.
    page.click('th[data-sort="name"]')
    page.wait_for_function("document.querySelector('#jobs tr').dataset.job === 'job-00000'")
    assert _names(page)[:3] == ["job-00000", "job-00001", "job-00002"]
    page.click('th[data-sort="name"]')
    page.wait_for_function("document.querySelector('#jobs tr').dataset.job === 'job-09999'")
    # The third job ever made, found by text over all 10,000.
    page.fill("#f-text", "TRIAL 2 OF")
    _count_is(page, "1–1 of 1")
    assert _names(page) == ["job-00002"]
    page.fill("#f-text", "")
    page.select_option("#f-status", "Failed")
    _count_is(page, "1–50 of 3,333")
    assert all("Failed" in t for t in page.locator("#jobs tr td:nth-child(4)").all_inner_texts())
    page.select_option("#f-status", "")
    _count_is(page, "1–50 of 10,000")
    # Paging: the last page holds the oldest names (sorted Z to A), then one back.
    page.click("#page-last")
    _count_is(page, "9,951–10,000 of 10,000")
    assert _names(page)[-1] == "job-00000"
    page.click("#page-prev")
    _count_is(page, "9,901–9,950 of 10,000")
    assert _names(page)[0] == "job-00099"
    # GPUs: those of its latest attempt (3, on two nodes), read with the page.
    assert page.inner_text('tr[data-job="job-00099"] td.gpus') == "3"
    assert page.inner_text('tr[data-job="job-00098"] td.gpus') == "-"
    # Compare still takes jobs picked in the table.
    page.check('tr[data-job="job-00099"] input.pick')
    page.check('tr[data-job="job-00098"] input.pick')
    assert page.is_enabled("#compare")
    # Live: a job made now shows on the first page; a deeper page keeps its rows.
    page.click("#page-first")
    page.click('th[data-sort="created"]')  # created, newest first
    _count_is(page, "1–50 of 10,000")
    write_jobs(many.home, 1, first=MANY)
    _count_is(page, "1–50 of 10,001")
    assert _names(page)[0] == f"job-{MANY:05d}"
    page.click("#page-next")
    _count_is(page, "51–100 of 10,001")
    deeper = _names(page)
    write_jobs(many.home, 1, first=MANY + 1)
    _count_is(page, "52–101 of 10,002")  # the same rows, now one further down the list
    assert _names(page) == deeper
    page.click("#compare")
    page.wait_for_url("**/compare?jobs=*")
    assert "job-00099" in page.url and "job-00098" in page.url
