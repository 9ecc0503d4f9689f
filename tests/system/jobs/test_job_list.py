"""The job list at scale: filters, sorts and keyset pages over the whole workspace,
through the workspace (SQLite and PostgreSQL), a real ``phalanx server`` and the CLI.

The jobs are written through the workspace's API (``jobrows``): the list only needs
their rows, none of them runs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import jobpython
import servers
from conftest import BIN, PHALANX
from jobrows import USERS, write_jobs
from phalanx.errors import PhalanxError
from phalanx.workspace import JobRecord, Workspace
from phalanx.workspace.joblist import SORTS, JobQuery

COUNT = 40


def _walk(ws: Workspace, **asked: Any) -> list[JobRecord]:
    """Every page of a query, first to last; checks each page's start and the total."""
    seen: list[JobRecord] = []
    page = ws.page_jobs(JobQuery.parse(limit=7, **asked))
    while True:
        assert page.start == len(seen)
        seen += page.jobs
        if page.next is None:
            break
        page = ws.page_jobs(JobQuery.parse(limit=7, cursor=page.next, **asked))
    assert page.total == len(seen)
    return seen


def test_every_sort_pages_each_job_once_both_ways(tmp_path: Path, db: str | None) -> None:
    names = write_jobs(tmp_path / "home", COUNT)
    ws = Workspace(tmp_path / "home")
    for sort in SORTS:
        for order in ("asc", "desc"):
            forward = _walk(ws, sort=sort, order=order)
            assert sorted(j.name for j in forward) == names, (sort, order)
            # Back from the last page, one page at a time: the same jobs, the same order.
            page = ws.page_jobs(JobQuery.parse(limit=7, sort=sort, order=order))
            page = ws.page_jobs(JobQuery.parse(limit=7, sort=sort, order=order, cursor=page.last))
            back = []
            while True:
                back[:0] = page.jobs
                if page.prev is None:
                    break
                page = ws.page_jobs(
                    JobQuery.parse(limit=7, sort=sort, order=order, cursor=page.prev)
                )
            assert [j.name for j in back] == [j.name for j in forward], (sort, order)
    by_name = [j.name for j in _walk(ws, sort="name", order="desc")]
    assert by_name == names[::-1]
    newest = [j.name for j in _walk(ws)]
    assert newest == names[::-1]  # created, newest first: the default
    users = [j.created_by for j in _walk(ws, sort="user")]
    assert users == sorted(users)


def test_filters_narrow_on_each_backend(tmp_path: Path, db: str | None) -> None:
    write_jobs(tmp_path / "home", COUNT)
    ws = Workspace(tmp_path / "home")
    every = _walk(ws)

    def names(**asked: Any) -> set[str]:
        return {j.name for j in _walk(ws, **asked)}

    assert names(user="bob") == {j.name for j in every if j.created_by == "bob"}
    assert names(experiment="exp-3") == {j.name for j in every if j.experiment_name == "exp-3"}
    assert names(status=["failed,Canceled"]) == {
        j.name for j in every if j.status.value in ("Failed", "Canceled")
    }
    assert names(tag=["team=speech"]) == {j.name for j in every if j.tags["team"] == "speech"}
    assert names(tag=["seed=2"]) == {j.name for j in every if j.tags["seed"] == 2}
    assert len(names(tag=["team"])) == COUNT and names(tag=["nope"]) == set()
    # Text: any case, in the name, display name, experiment or user; % is not a wildcard.
    assert names(text="TRIAL 3") == {
        j.name for j in every if "trial 3" in (j.display_name or "").lower()
    }
    assert names(text="ann") == {j.name for j in every if j.created_by == "ann"}
    assert names(text="%") == set()
    both = names(user="cyd", tag=["team=vision"], experiment="exp-1")
    assert both and all(
        (j.created_by, j.tags["team"], j.experiment_name) == ("cyd", "vision", "exp-1")
        for j in every
        if j.name in both
    )


def test_each_listed_job_carries_its_latest_attempt_only(tmp_path: Path) -> None:
    write_jobs(tmp_path / "home", 100)
    ws = Workspace(tmp_path / "home")
    listed = {j.name: j for j in ws.page_jobs(JobQuery.parse(limit=100)).jobs}
    [latest] = listed["job-00099"].attempts
    assert latest.number == 2 and [n["gpus"] for n in latest.nodes] == [["0", "1"], ["2"]]
    assert all(j.attempts == () for n, j in listed.items() if n != "job-00099")


def _forged(**fields: Any) -> str:
    """A cursor made up by a client, for the newest-first sort."""
    data = {"b": False, "t": 1.0, "s": "created", "d": True, **fields}
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


BY_NAME = {"sort": "name", "order": "asc"}
FORGED: tuple[dict[str, Any], ...] = (
    # Values no database takes, or takes as something else: a cursor is base64 JSON, so
    # none of them passed the server's checks of characters on the way in.
    {"cursor": _forged(k=10**30, n="job-1")},  # past SQLite's integers
    {"cursor": _forged(k=1e300, n="job-1")},  # a number, but no time
    {"cursor": _forged(k=float("nan"), n="job-1")},
    {"cursor": _forged(k=float("-inf"), n="job-1")},
    {"cursor": _forged(k=1.0, n="job-1", t=float("inf"))},
    {"cursor": _forged(k=1.0, n="job-1", t=float("nan"))},
    {"cursor": _forged(k=1.0, n="\ud800")},  # a lone surrogate: not UTF-8
    {"cursor": _forged(k=1.0, n="a\u0000")},  # PostgreSQL's text holds no NUL
    {**BY_NAME, "cursor": _forged(s="name", d=False, k="\ud800", n="x")},
    {**BY_NAME, "cursor": _forged(s="name", d=False, k="a\u0000", n="x")},
    {**BY_NAME, "cursor": _forged(s="name", d=False, k="a\u001b[2J", n="x")},
)


def test_a_cursor_of_another_sort_or_made_up_is_refused(tmp_path: Path, db: str | None) -> None:
    names = write_jobs(tmp_path / "home", 5)
    ws = Workspace(tmp_path / "home")
    for asked, field in (
        ({"sort": "size"}, "sort"),
        ({"order": "up"}, "order"),
        ({"status": ["Done"]}, "status"),
        ({"limit": 0}, "limit"),
        ({"tag": ["=x"]}, "tag"),
        ({"cursor": "not-base64!"}, "cursor"),
        ({"cursor": _forged(k="x", n="job-1")}, "cursor"),  # a text key for a time
        ({"cursor": _forged(k=1.5, n=7)}, "cursor"),
        ({"cursor": _forged(k=None, n=None, b=False)}, "cursor"),
        *((forged, "cursor") for forged in FORGED),
    ):
        with pytest.raises(PhalanxError, match=f"^{field}: [^\n]*$"):
            ws.page_jobs(JobQuery.parse(**asked))  # refused before the database sees it
    assert [j.name for j in ws.page_jobs(JobQuery.parse(**BY_NAME)).jobs] == names
    # A cursor the list gave still reads back, with its float keys and names.
    first = ws.page_jobs(JobQuery.parse(limit=2))
    rest = ws.page_jobs(JobQuery.parse(limit=5, cursor=first.next))
    assert [j.name for j in first.jobs + rest.jobs] == names[::-1]


@dataclass
class Listed:
    url: str
    names: list[str]
    env: dict[str, str]
    workdir: Path


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listed]:
    """A server on a workspace of ended jobs, written before it starts (so no scheduler
    ever sees them queued)."""
    root = tmp_path_factory.mktemp("joblist")
    home = jobpython.workspace_home(root)  # reachable by a walled-off job's account
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    env["XDG_CONFIG_HOME"] = str(root / "config")
    names = write_jobs(home, COUNT)
    server = servers.start_phalanx_server(home, env)
    try:
        laptop = {**env, "PHALANX_SERVER": server.url, "PHALANX_HOME": str(root / "laptop")}
        yield Listed(server.url, names, laptop, root)
    finally:
        servers.kill_phalanx_server(server)


def _get(listed: Listed, **params: Any) -> httpx.Response:
    return httpx.get(listed.url + "/api/v1/jobs", params=params, timeout=30)


def test_the_server_pages_every_job_once_with_total_and_start(listed: Listed) -> None:
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 9, "sort": "name", "order": "asc"}
    while True:
        body = _get(listed, **params).json()
        assert body["total"] == COUNT and body["start"] == len(seen)
        seen += [j["name"] for j in body["jobs"]]
        if body["next"] is None:
            break
        params["cursor"] = body["next"]
    assert seen == listed.names
    last = _get(listed, limit=9, sort="name", order="asc", cursor=body["last"]).json()
    assert [j["name"] for j in last["jobs"]] == listed.names[-9:] and last["start"] == COUNT - 9
    first = _get(listed).json()  # no parameters: the newest 50, as before pages
    assert [j["name"] for j in first["jobs"]] == listed.names[::-1]
    assert first["prev"] is None and first["next"] is None


def test_the_servers_filters_narrow_and_repeat(listed: Listed) -> None:
    body = _get(listed, status=["Completed", "Failed"], user="ann", tag="team=vision").json()
    jobs = body["jobs"]
    assert jobs and body["total"] == len(jobs)
    for job in jobs:
        assert job["status"] in ("Completed", "Failed") and job["created_by"] == "ann"
        assert job["tags"]["team"] == "vision"
    expected = {
        n for i, n in enumerate(listed.names)
        if i % 3 in (0, 1) and USERS[i % 3] == "ann" and i % 2 == 0
    }  # fmt: skip
    assert {j["name"] for j in jobs} == expected
    found = _get(listed, text="TRIAL 7 OF").json()["jobs"]
    assert [j["name"] for j in found] == ["job-00007"]


def test_bad_list_parameters_are_4xx_one_liners_naming_them(listed: Listed) -> None:
    other = _get(listed, sort="name", limit=5).json()["next"]
    for params, field in (
        ({"sort": "size"}, "sort"),
        ({"order": "sideways"}, "order"),
        ({"status": "Done"}, "status"),
        ({"limit": 0}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "%%%"}, "cursor"),
        ({"cursor": other, "sort": "user"}, "cursor"),
        ({"tag": "=v"}, "tag"),
        ({"cursor": _forged(k="'; DROP TABLE jobs; --", n="x")}, "cursor"),
        ({"text": "x" * 1001}, "text"),
        *((forged, "cursor") for forged in FORGED),
    ):
        answer = _get(listed, **params)
        assert 400 <= answer.status_code < 500, (params, answer.text)
        message = answer.json()["error"]
        assert field in message and "\n" not in message and "Traceback" not in message
    assert _get(listed, text="'; DROP TABLE jobs; --").json()["total"] == 0  # only text
    assert _get(listed).json()["total"] == COUNT  # every job still there


def _job_list(listed: Listed, *args: str, columns: str = "200") -> subprocess.CompletedProcess[str]:
    """``phalanx job list`` through the server."""
    env = {**listed.env, "COLUMNS": columns}
    return subprocess.run(
        [PHALANX, "job", "list", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_job_list_through_the_server_filters_sorts_and_fits_80_columns(listed: Listed) -> None:
    def run(*args: str, columns: str = "200") -> subprocess.CompletedProcess[str]:
        return _job_list(listed, *args, columns=columns)

    shown = run("--user", "bob", "--tag", "team", "--search", "trial", "--sort", "name",
                "--order", "desc", "--limit", "5", "--json")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    bobs = [n for i, n in enumerate(listed.names) if USERS[i % 3] == "bob"]
    assert [j["name"] for j in json.loads(shown.stdout)] == sorted(bobs, reverse=True)[:5]
    table = run("--limit", "12", "--status", "Failed", columns="80")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines[:-1]), table.stdout  # the cursor may wrap
    failed = [n for i, n in enumerate(listed.names) if i % 3 == 1][::-1][:12]
    assert [line.split()[0] for line in lines[1:13]] == failed  # whole names, newest first
    assert re.search(r"1-12 of 13 jobs", table.stdout), table.stdout
    cursor = lines[-1].split("--cursor ")[1]
    rest = run("--status", "Failed", "--cursor", cursor, "--json")
    assert [j["name"] for j in json.loads(rest.stdout)] == [listed.names[1]]
    bad = run("--sort", "name", "--cursor", cursor)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "cursor" in bad.stderr


def test_job_list_json_page_gives_a_script_every_page_and_the_cursors(listed: Listed) -> None:
    seen: list[str] = []
    pages: list[dict[str, Any]] = []
    args = ["--sort", "name", "--order", "asc", "--limit", "15", "--json-page"]
    cursor: list[str] = []
    while True:
        shown = _job_list(listed, *args, *cursor)
        assert shown.returncode == 0, shown.stderr
        page = json.loads(shown.stdout)
        assert set(page) == {"jobs", "total", "start", "next", "prev", "last"}
        assert page["total"] == COUNT and page["start"] == len(seen)
        assert (page["prev"] is None) == (not seen)
        seen += [j["name"] for j in page["jobs"]]
        pages.append(page)
        if page["next"] is None:
            break
        cursor = ["--cursor", page["next"]]
    assert seen == listed.names and len(pages) == 3
    # Each job as --json shows it; prev and last name the pages a script would expect.
    assert pages[0]["jobs"][0].keys() == json.loads(_job_list(listed, "--json").stdout)[0].keys()
    back = json.loads(_job_list(listed, *args, "--cursor", pages[2]["prev"]).stdout)
    assert [j["name"] for j in back["jobs"]] == listed.names[15:30] and back["start"] == 15
    last = json.loads(_job_list(listed, *args, "--cursor", pages[0]["last"]).stdout)
    assert [j["name"] for j in last["jobs"]] == listed.names[-15:]
    both = _job_list(listed, "--json", "--json-page")
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "--json-page" in both.stderr
    assert both.stdout == ""
