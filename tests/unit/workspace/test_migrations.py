"""The Alembic revisions against schema.py, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from phalanx.scheduler import ledger
from phalanx.workspace import JobStatus, Workspace
from phalanx.workspace.database import Database, resolve_url
from phalanx.workspace.joblist import JobQuery
from phalanx.workspace.migrate import MIGRATIONS, SCHEMA_VERSION, _alembic, revision
from phalanx.workspace.schema import metadata


def _database(home: Path) -> Database:
    """The database a workspace in ``home`` would use, left empty."""
    home.mkdir(parents=True, exist_ok=True)
    return Database(*resolve_url(home, None))


def _differences(database: Database) -> list[object]:
    with database.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(context, metadata))


def test_the_newest_revision_is_the_schema_version() -> None:
    script = ScriptDirectory(str(MIGRATIONS))
    assert script.get_current_head() == revision(SCHEMA_VERSION)
    # One revision per schema version, each after the one before.
    chain = [s.revision for s in script.walk_revisions()][::-1]
    assert chain == [revision(v) for v in range(1, SCHEMA_VERSION + 1)]


def test_the_revisions_build_exactly_the_tables_of_schema_py(
    tmp_path: Path, db: str | None
) -> None:
    migrated = _database(tmp_path / "migrated")
    with migrated.transaction() as tx:
        _alembic(tx.connection, "upgrade", "head")
    assert _differences(migrated) == []
    # A new workspace is made from schema.py at once, and reads as the same revision.
    created = Workspace(tmp_path / "created")
    assert _differences(created.database) == []
    for database in (migrated, created.database):
        with database.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
            assert current == revision(SCHEMA_VERSION)


def test_a_database_at_revision_7_keeps_its_records_through_the_upgrade(
    tmp_path: Path, db: str | None
) -> None:
    database = _database(tmp_path / "home")
    with database.transaction() as tx:
        _alembic(tx.connection, "upgrade", "0007")
        tx.execute(
            "INSERT INTO jobs (name, experiment_name, status, created_at, spec_json, target)"
            " VALUES ('old', 'exp', 'Running', 1.25, :spec, 'local')",
            {"spec": json.dumps({"command": "true"})},
        )
        tx.execute(
            "INSERT INTO allocations (job_name, node, target, host, gpus_json, cpus, memory,"
            " granted_at) VALUES ('old', 0, 'local', 'localhost', '[\"0\"]', 2.0, :memory, 1.5)",
            {"memory": 80 << 30},
        )
    database.close()
    ws = Workspace(tmp_path / "home")
    job = ws.get_job("old")
    assert (job.status, job.created_at, job.created_by) == (JobStatus.RUNNING, 1.25, None)
    assert ledger.holding(ws, "local")[0].nodes[0].memory == 80 << 30
    assert ws.query("SELECT name FROM tokens") == []  # the table schema 8 added
    assert ws.query("SELECT name FROM environments") == []  # the table schema 9 added


def test_tokens_of_a_schema_9_workspace_become_admins_and_records_have_no_owner(
    tmp_path: Path, db: str | None
) -> None:
    from phalanx.workspace.tokens import identity_of, token_hash

    database = _database(tmp_path / "home")
    with database.transaction() as tx:
        _alembic(tx.connection, "upgrade", "0009")
        tx.execute(
            "INSERT INTO tokens (name, user_name, hash, created_at)"
            " VALUES ('laptop', 'alice', :hash, 1.0)",
            {"hash": token_hash("phx_old")},
        )
        tx.execute(
            "INSERT INTO datastores (name, type, config_json, created_at)"
            " VALUES ('blobs', 'local', '{}', 1.0)"
        )
    database.close()
    ws = Workspace(tmp_path / "home")
    identity = identity_of(ws, "phx_old")
    assert identity is not None and (identity.user, identity.role) == ("alice", "admin")
    assert ws.query("SELECT owner FROM datastores") == [{"owner": None}]
    assert ws.query("SELECT lease_generation FROM jobs") == []


def test_the_upgrade_to_14_gives_old_jobs_their_tag_rows(tmp_path: Path, db: str | None) -> None:
    database = _database(tmp_path / "home")
    with database.transaction() as tx:
        _alembic(tx.connection, "upgrade", "0013")
        for name, tags in (("tagged", {"team": "nlp", "epochs": 3}), ("bare", {})):
            tx.execute(
                "INSERT INTO jobs (name, experiment_name, status, created_at, spec_json,"
                " tags_json) VALUES (:name, 'exp', 'Completed', 1.25, '{}', :tags)",
                {"name": name, "tags": json.dumps(tags)},
            )
    database.close()
    ws = Workspace(tmp_path / "home")
    found = ws.page_jobs(JobQuery.parse(tag=["team=nlp", "epochs=3"]))
    assert [j.name for j in found.jobs] == ["tagged"] and found.total == 1
    assert ws.page_jobs(JobQuery.parse(tag=["team"])).total == 1
    assert ws.page_jobs(JobQuery.parse()).total == 2
