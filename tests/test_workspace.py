"""The workspace store and code snapshots, in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phalanx.errors import PhalanxError
from phalanx.workspace import AttemptStatus, JobStatus, RootCause, Workspace

SPEC = {"command": "echo hi", "experiment_name": "exp"}


def test_job_lifecycle_and_terminal_is_final(tmp_path: Path, db: str | None) -> None:
    ws = Workspace(tmp_path / "home")
    job = ws.create_job(SPEC, spec_text="command: echo hi\n")
    assert job.status is JobStatus.QUEUED
    assert Path(job.job_dir, "spec.yaml").read_text() == "command: echo hi\n"
    ws.set_status(job.name, JobStatus.PREPARING)
    attempt = ws.start_attempt(job.name, master_port=1234)
    assert attempt.number == 1 and attempt.status is AttemptStatus.RUNNING
    error = RootCause(message="supervisor lost")
    assert ws.set_status(job.name, JobStatus.FAILED, error=error)
    assert not ws.set_status(job.name, JobStatus.RUNNING)  # a terminal job never moves
    job = ws.get_job(job.name)
    assert job.status is JobStatus.FAILED and job.error == error
    assert job.ended_at is not None and job.started_at is not None
    # The attempt that was running ends with its job.
    assert [(a.status, a.error) for a in job.attempts] == [(AttemptStatus.FAILED, error)]


def test_names_are_unique_and_a_failed_create_leaves_nothing(
    tmp_path: Path, db: str | None
) -> None:
    ws = Workspace(tmp_path / "home")
    ws.create_job(SPEC, spec_text="", name="same")
    with pytest.raises(PhalanxError, match="already exists"):
        ws.create_job(SPEC, spec_text="", name="same")
    (ws.jobs_dir / "squatter" / "user_logs").mkdir(parents=True)  # a stray folder of that name
    with pytest.raises(PhalanxError, match="cannot create the job folder"):
        ws.create_job(SPEC, spec_text="", name="squatter")
    assert [j.name for j in ws.list_jobs()] == ["same"]
    assert not [p for p in ws.jobs_dir.iterdir() if p.name.startswith(".staging")]
    with pytest.raises(PhalanxError, match="invalid"):
        ws.create_job(SPEC, spec_text="", name="../escape")


def test_snapshot_rules(tmp_path: Path, db: str | None) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    (code / "pkg" / "mod.py").write_text("x = 1\n")
    (code / "data").mkdir()
    (code / "data" / "big.bin").write_bytes(b"0" * 1000)
    (code / "notes.log").write_text("log\n")
    (code / ".amlignore").write_text("data/\n*.log\n")
    (code / "link_to_pkg").symlink_to("pkg")
    (code / "loop").symlink_to(".")
    os.mkfifo(code / "fifo")
    home = code / ".phalanx"  # the workspace inside the code folder is never copied
    ws = Workspace(home)
    job = ws.create_job(SPEC, spec_text="", code=code)
    snap = Path(job.job_dir) / "code"
    files = sorted(str(p.relative_to(snap)) for p in snap.rglob("*"))
    assert files == [".amlignore", "link_to_pkg", "loop", "pkg", "pkg/mod.py", "train.py"]
    assert os.readlink(snap / "link_to_pkg") == "pkg"


def test_snapshot_limit_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str | None
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.bin").write_bytes(b"0" * 2 * 1024 * 1024)
    monkeypatch.setenv("PHALANX_SNAPSHOT_LIMIT_MB", "1")
    ws = Workspace(tmp_path / "home")
    with pytest.raises(PhalanxError, match=r"more than 1 MB.*\.amlignore"):
        ws.create_job(SPEC, spec_text="", code=code)
    monkeypatch.setenv("PHALANX_SNAPSHOT_LIMIT_MB", "lots")
    with pytest.raises(PhalanxError, match="not a number"):
        ws.create_job(SPEC, spec_text="", code=code)
    assert ws.list_jobs() == []


def test_corrupt_database_is_a_user_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "phalanx.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(PhalanxError, match="cannot open the workspace database"):
        Workspace(home)


V1_SCHEMA = """
CREATE TABLE jobs (name TEXT PRIMARY KEY, display_name TEXT, experiment_name TEXT NOT NULL,
  description TEXT, tags_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL,
  created_at REAL NOT NULL, started_at REAL, ended_at REAL, spec_json TEXT NOT NULL,
  supervisor_pid INTEGER, supervisor_started REAL, cancel_requested INTEGER NOT NULL DEFAULT 0,
  error_json TEXT);
CREATE TABLE attempts (job_name TEXT NOT NULL, number INTEGER NOT NULL, status TEXT NOT NULL,
  cause TEXT, exit_code INTEGER, started_at REAL NOT NULL, ended_at REAL, master_port INTEGER,
  error_json TEXT, PRIMARY KEY (job_name, number));
INSERT INTO jobs (name, experiment_name, status, created_at, spec_json)
  VALUES ('old', 'exp', 'Completed', 1.0, '{"command": "echo"}');
INSERT INTO attempts (job_name, number, status, started_at) VALUES ('old', 1, 'Succeeded', 1.0);
PRAGMA user_version=1;
"""


def test_an_old_workspace_is_upgraded_once_even_by_many_processes(tmp_path: Path) -> None:
    import sqlite3
    import subprocess
    import sys

    for round_ in range(5):
        home = tmp_path / f"home{round_}"
        home.mkdir()
        db = sqlite3.connect(home / "phalanx.db")
        db.executescript(V1_SCHEMA)
        db.close()
        opener = "import sys; from phalanx.workspace import Workspace; Workspace(Path(sys.argv[1]))"
        opener = "from pathlib import Path; " + opener
        procs = [subprocess.Popen([sys.executable, "-c", opener, str(home)]) for _ in range(3)]
        assert [p.wait(60) for p in procs] == [0, 0, 0]
        ws = Workspace(home)
        job = ws.get_job("old")
        assert job.status is JobStatus.COMPLETED
        assert [a.note for a in job.attempts] == [None]  # the column added by version 3
        assert ws.requests("old") == (False, False)  # the column added by version 2
