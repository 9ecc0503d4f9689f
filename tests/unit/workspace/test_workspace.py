"""The workspace store and code snapshots, in-process."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phalanx.errors import PhalanxError
from phalanx.workspace import AttemptStatus, JobStatus, RootCause, Workspace
from phalanx.workspace.migrate import SCHEMA_VERSION, revision

NEWER = SCHEMA_VERSION + 1
"""A schema a newer phalanx would have made."""

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


# The schema as phalanx 7 created it (PRAGMA user_version, before Alembic).
V7_SCHEMA = """
CREATE TABLE jobs (name TEXT PRIMARY KEY, display_name TEXT, experiment_name TEXT NOT NULL,
  description TEXT, tags_json TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL,
  created_at REAL NOT NULL, started_at REAL, ended_at REAL, spec_json TEXT NOT NULL,
  supervisor_pid INTEGER, supervisor_started REAL, cancel_requested INTEGER NOT NULL DEFAULT 0,
  preempt_json TEXT, error_json TEXT, target TEXT, request_json TEXT, priority INTEGER,
  tier INTEGER, timeout REAL, queue_json TEXT);
CREATE INDEX jobs_created ON jobs (created_at);
CREATE INDEX jobs_status ON jobs (status);
CREATE TABLE attempts (job_name TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
  number INTEGER NOT NULL, status TEXT NOT NULL, cause TEXT, exit_code INTEGER,
  started_at REAL NOT NULL, ended_at REAL, master_port INTEGER, note TEXT, error_json TEXT,
  nodes_json TEXT, PRIMARY KEY (job_name, number));
CREATE TABLE datastores (name TEXT PRIMARY KEY, type TEXT NOT NULL, config_json TEXT NOT NULL,
  created_at REAL NOT NULL);
CREATE TABLE data_assets (name TEXT NOT NULL, version TEXT NOT NULL, seq INTEGER NOT NULL,
  type TEXT NOT NULL, path TEXT NOT NULL, description TEXT, tags_json TEXT NOT NULL DEFAULT '{}',
  created_at REAL NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE models (name TEXT NOT NULL, version TEXT NOT NULL, seq INTEGER NOT NULL,
  source TEXT NOT NULL, job_name TEXT, files_json TEXT NOT NULL,
  metrics_json TEXT NOT NULL DEFAULT '{}', description TEXT, tags_json TEXT NOT NULL DEFAULT '{}',
  created_at REAL NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE computes (name TEXT PRIMARY KEY, type TEXT NOT NULL, config_json TEXT NOT NULL,
  created_at REAL NOT NULL);
CREATE TABLE allocations (job_name TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
  node INTEGER NOT NULL, target TEXT NOT NULL, host TEXT NOT NULL, gpus_json TEXT NOT NULL,
  cpus REAL NOT NULL, memory INTEGER NOT NULL DEFAULT 0, granted_at REAL NOT NULL,
  releasing_at REAL, PRIMARY KEY (job_name, node));
CREATE TABLE capacities (target TEXT PRIMARY KEY, hosts_json TEXT NOT NULL,
  read_at REAL NOT NULL);
INSERT INTO jobs (name, experiment_name, status, created_at, started_at, spec_json, target,
  request_json, priority, tier)
  VALUES ('trainer', 'exp', 'Running', 1.5, 2.5, '{"command": "python train.py"}', 'local',
  '{"nodes": 1, "gpus": 2, "cpus": 4.0, "memory": 68719476736}', 1, 3);
INSERT INTO attempts (job_name, number, status, started_at, master_port, nodes_json)
  VALUES ('trainer', 1, 'Running', 2.5, 29500, '[{"host": "localhost", "gpus": ["0", "1"]}]');
INSERT INTO allocations (job_name, node, target, host, gpus_json, cpus, memory, granted_at)
  VALUES ('trainer', 0, 'local', 'localhost', '["0", "1"]', 4.0, 68719476736, 2.0);
INSERT INTO models (name, version, seq, source, job_name, files_json, metrics_json, created_at)
  VALUES ('resnet', '1', 1, 'azureml://jobs/trainer/outputs/model', 'trainer',
  '[{"path": "model.pt", "size": 3, "sha256": "00"}]', '{"loss": 0.25}', 3.0);
INSERT INTO data_assets (name, version, seq, type, path, created_at)
  VALUES ('imagenet', '1', 1, 'uri_folder', '/data/imagenet', 1.0);
PRAGMA user_version=7;
"""


def _open_together(home: Path, processes: int = 3) -> None:
    """Open the workspace from several processes at once; each must succeed."""
    opener = (
        "import sys; from pathlib import Path; from phalanx.workspace import Workspace; "
        "Workspace(Path(sys.argv[1]))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", opener, str(home)], stderr=subprocess.PIPE)
        for _ in range(processes)
    ]
    results = [(p.wait(60), p.stderr.read() if p.stderr else b"") for p in procs]
    assert [code for code, _ in results] == [0] * processes, results


def test_a_schema_7_workspace_is_upgraded_in_place_with_its_records(tmp_path: Path) -> None:
    from phalanx.registry import list_models
    from phalanx.scheduler import ledger
    from phalanx.storage.assets import get_asset
    from phalanx.workspace.tokens import create_token, identity_of

    home = tmp_path / "home"
    home.mkdir()
    db = sqlite3.connect(home / "phalanx.db")
    db.executescript(V7_SCHEMA)
    db.close()
    _open_together(home)
    ws = Workspace(home)
    job = ws.get_job("trainer")
    assert (job.status, job.target, job.created_by) == (JobStatus.RUNNING, "local", None)
    assert job.attempts[0].master_port == 29500 and job.attempts[0].nodes[0]["gpus"] == ["0", "1"]
    [held] = ledger.holding(ws, "local")
    assert held.name == "trainer" and held.nodes[0].memory == 64 << 30
    [model] = list_models(ws, "resnet")
    assert model.metrics == {"loss": 0.25} and model.job_name == "trainer"
    assert get_asset(ws, "imagenet").path == "/data/imagenet"
    # What schema 8 added works on the upgraded workspace.
    _, token = create_token(ws, "alice")
    assert getattr(identity_of(ws, token), "user", None) == "alice"
    assert ws.create_job(SPEC, spec_text="", created_by="alice").created_by == "alice"
    # Alembic's revision and the old version number both say 8 (an older phalanx refuses it).
    db = sqlite3.connect(home / "phalanx.db")
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [
        (revision(SCHEMA_VERSION),)
    ]
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.close()


def test_a_new_database_is_created_once_even_by_many_processes(
    tmp_path: Path, db: str | None
) -> None:
    home = tmp_path / "home"
    _open_together(home, processes=4)
    ws = Workspace(home)
    assert ws.query("SELECT version_num FROM alembic_version") == [
        {"version_num": revision(SCHEMA_VERSION)}
    ]
    assert ws.list_jobs() == []


def test_a_newer_schema_is_refused_in_one_line(tmp_path: Path, db: str | None) -> None:
    ws = Workspace(tmp_path / "home")
    with ws.transaction() as tx:
        tx.execute(f"UPDATE alembic_version SET version_num = '{revision(NEWER)}'")
    ws.close()
    with pytest.raises(
        PhalanxError, match=rf"newer phalanx \(schema {NEWER}\); upgrade phalanx"
    ) as e:
        Workspace(tmp_path / "home")
    assert str(e.value).endswith(
        "another PHALANX_HOME" if db is None else "another PHALANX_DB database"
    )


def test_a_newer_pre_alembic_sqlite_workspace_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db = sqlite3.connect(home / "phalanx.db")
    db.executescript(f"CREATE TABLE jobs (name TEXT PRIMARY KEY); PRAGMA user_version={NEWER};")
    db.close()
    with pytest.raises(PhalanxError, match=rf"newer phalanx \(schema {NEWER}\)"):
        Workspace(home)


def test_times_keep_their_precision_and_order(tmp_path: Path, db: str | None) -> None:
    ws = Workspace(tmp_path / "home")
    before = time.time()
    names = [ws.create_job(SPEC, spec_text="").name for _ in range(3)]
    assert [j.name for j in ws.list_jobs()] == names[::-1]  # newest first, ms apart
    created = ws.get_job(names[0]).created_at
    assert abs(created - before) < 5 and created != int(created)
