"""The workspace: a folder per job plus a SQLite database of jobs and attempts.

SQLite runs in WAL mode so the CLI reads while a job's supervisor writes; every
connection waits up to 30 s for a lock rather than failing. Writes that belong
together happen in one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phalanx.errors import JobNotFoundError, PhalanxError
from phalanx.workspace.layout import JobPaths, phalanx_home
from phalanx.workspace.names import NAME_RE, generate_name
from phalanx.workspace.records import (
    AttemptRecord,
    AttemptStatus,
    FailureCause,
    JobRecord,
    JobStatus,
    QueueEntry,
    RootCause,
)
from phalanx.workspace.snapshot import snapshot_code

SCHEMA_VERSION = 8
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    display_name TEXT,
    experiment_name TEXT NOT NULL,
    description TEXT,
    tags_json TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    spec_json TEXT NOT NULL,
    supervisor_pid INTEGER,
    supervisor_started REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    preempt_json TEXT,
    error_json TEXT,
    target TEXT,
    request_json TEXT,
    priority INTEGER,
    tier INTEGER,
    timeout REAL,
    queue_json TEXT,
    created_by TEXT
);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status);
CREATE TABLE IF NOT EXISTS attempts (
    job_name TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    status TEXT NOT NULL,
    cause TEXT,
    exit_code INTEGER,
    started_at REAL NOT NULL,
    ended_at REAL,
    master_port INTEGER,
    note TEXT,
    error_json TEXT,
    nodes_json TEXT,
    PRIMARY KEY (job_name, number)
);
CREATE TABLE IF NOT EXISTS datastores (
    name TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    config_json TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS data_assets (
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    path TEXT NOT NULL,
    description TEXT,
    tags_json TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS models (
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    seq INTEGER NOT NULL,
    source TEXT NOT NULL,
    job_name TEXT,
    files_json TEXT NOT NULL,
    metrics_json TEXT NOT NULL DEFAULT '{}',
    description TEXT,
    tags_json TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS computes (
    name TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    config_json TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS allocations (
    job_name TEXT NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
    node INTEGER NOT NULL,
    target TEXT NOT NULL,
    host TEXT NOT NULL,
    gpus_json TEXT NOT NULL,
    cpus REAL NOT NULL,
    memory INTEGER NOT NULL DEFAULT 0,
    granted_at REAL NOT NULL,
    releasing_at REAL,
    PRIMARY KEY (job_name, node)
);
CREATE TABLE IF NOT EXISTS capacities (
    target TEXT PRIMARY KEY,
    hosts_json TEXT NOT NULL,
    read_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    user_name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    last_used_at REAL
);
"""
# Each step upgrades a workspace from the version before it.
_MIGRATIONS: dict[int, list[str]] = {
    2: ["ALTER TABLE jobs ADD COLUMN preempt_json TEXT"],
    3: ["ALTER TABLE attempts ADD COLUMN note TEXT"],
    # The datastores and data_assets tables, as in _SCHEMA.
    4: [sql for sql in _SCHEMA.split(";") if "datastores (" in sql or "data_assets (" in sql],
    5: [sql for sql in _SCHEMA.split(";") if "models (" in sql],
    6: [sql for sql in _SCHEMA.split(";") if "computes (" in sql],
    # The scheduler: what each job asks for, its place in the queue, what it holds.
    7: [
        *(
            f"ALTER TABLE jobs ADD COLUMN {column}"
            for column in (
                "target TEXT",
                "request_json TEXT",
                "priority INTEGER",
                "tier INTEGER",
                "timeout REAL",
                "queue_json TEXT",
            )
        ),
        "ALTER TABLE attempts ADD COLUMN nodes_json TEXT",
        "CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status)",
        *(sql for sql in _SCHEMA.split(";") if "allocations (" in sql or "capacities (" in sql),
    ],
    # The server: who created each job, and the API tokens (hashes only).
    8: [
        "ALTER TABLE jobs ADD COLUMN created_by TEXT",
        *(sql for sql in _SCHEMA.split(";") if "tokens (" in sql),
    ],
}


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _set_wal(db: sqlite3.Connection, wait_s: float = 30.0) -> None:
    """Switch to WAL, waiting while another process holds the database.

    The switch needs the database to itself, and SQLite answers "locked" at
    once instead of calling the busy handler when another connection is
    reading (several processes opening a new or old workspace together).
    """
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


class Workspace:
    """A ``PHALANX_HOME`` folder: its database and job folders.

    Args:
        home: The workspace folder; ``$PHALANX_HOME`` or ``~/.phalanx`` when ``None``.
    """

    def __init__(self, home: Path | None = None) -> None:
        self.home = (home or phalanx_home()).resolve()
        self.jobs_dir = self.home / "jobs"
        try:
            self.jobs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PhalanxError(
                f"cannot create the workspace folder {self.home}: {exc.strerror}; "
                "set PHALANX_HOME to a writable folder"
            ) from exc
        self.db_path = self.home / "phalanx.db"
        try:
            self._db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            _set_wal(self._db)
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise PhalanxError(
                f"cannot open the workspace database {self.db_path}: {exc}; "
                "restore it or point PHALANX_HOME at another folder"
            ) from exc
        if version > SCHEMA_VERSION:
            raise PhalanxError(
                f"workspace {self.home} was written by a newer phalanx (schema {version}); "
                "upgrade phalanx or use another PHALANX_HOME"
            )
        if version < SCHEMA_VERSION:
            self._upgrade()

    def _upgrade(self) -> None:
        """Create or migrate the schema, once, even with several processes at it."""
        with self._transaction() as db:
            # Read again under the write lock: another process may have upgraded.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                steps = [sql for sql in _SCHEMA.split(";") if sql.strip()]
            else:
                steps = [
                    sql for v in range(version + 1, SCHEMA_VERSION + 1) for sql in _MIGRATIONS[v]
                ]
            for sql in steps:
                db.execute(sql)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``): committed on success, else rolled back."""
        with self._transaction() as db:
            yield db

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """Rows of one read-only statement."""
        return self._db.execute(sql, params).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    # -- jobs ---------------------------------------------------------------

    def paths(self, name: str) -> JobPaths:
        return JobPaths(self.jobs_dir / name)

    def create_job(
        self,
        spec: dict[str, Any],
        *,
        spec_text: str,
        name: str | None = None,
        code: Path | None = None,
        queue: QueueEntry | None = None,
        created_by: str | None = None,
    ) -> JobRecord:
        """Record a new Queued job, with its folder and code snapshot.

        The folder is built under a temporary name and renamed into place only
        after the database row is in, so a failure leaves neither half.

        Args:
            spec: The validated spec as a JSON-ready dict.
            spec_text: The YAML the user submitted (after ``--set``), kept verbatim.
            name: The job name; generated when ``None``.
            code: A folder to snapshot as the job's working directory.
            queue: Where it queues and what it asks for (the scheduler's part).
            created_by: Who submitted it (the server's user); ``None`` for this machine's user.

        Raises:
            PhalanxError: the name is taken or invalid, or the code folder is too large.
        """
        if name is not None and not NAME_RE.fullmatch(name):
            raise PhalanxError(
                f"job name {name!r} is invalid: use letters, digits, '_' and '-', "
                "starting with a letter or digit"
            )
        if name is not None and self._exists(name):
            raise PhalanxError(
                f"job name {name!r} already exists; choose another name or omit `name` to get one"
            )
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.jobs_dir))
        try:
            paths = JobPaths(staging)
            if code is not None:
                snapshot_code(code, paths.code, exclude=(self.home,))
            paths.make()
            paths.spec_yaml.write_text(spec_text)
            paths.spec_json.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
            # The row commits only once the folder is in place: never one without the other.
            with self._transaction():
                final_name = self._insert_job(spec, name, queue or QueueEntry(), created_by)
                try:
                    staging.rename(self.jobs_dir / final_name)
                except OSError as exc:
                    raise PhalanxError(
                        f"cannot create the job folder {self.jobs_dir / final_name}: "
                        f"{exc.strerror}; remove what is there or choose another job name"
                    ) from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.get_job(final_name)

    def _exists(self, name: str) -> bool:
        row = self._db.execute("SELECT 1 FROM jobs WHERE name = ?", (name,)).fetchone()
        return row is not None

    def _insert_job(
        self, spec: dict[str, Any], name: str | None, queue: QueueEntry, created_by: str | None
    ) -> str:
        for _ in range(20):
            candidate = name or generate_name()
            try:
                self._db.execute(
                    "INSERT INTO jobs (name, display_name, experiment_name, description, tags_json,"
                    " status, created_at, spec_json, target, request_json, priority, tier, timeout,"
                    " created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        candidate,
                        spec.get("display_name"),
                        spec.get("experiment_name") or "Default",
                        spec.get("description"),
                        json.dumps(spec.get("tags") or {}),
                        JobStatus.QUEUED.value,
                        time.time(),
                        json.dumps(spec, sort_keys=True),
                        queue.target,
                        _dumps(queue.request),
                        queue.priority,
                        queue.tier,
                        queue.timeout,
                        created_by,
                    ),
                )
                return candidate
            except sqlite3.IntegrityError:
                if name is not None:
                    raise PhalanxError(
                        f"job name {name!r} already exists; choose another name or omit `name`"
                    ) from None
        raise RuntimeError("could not generate a unique job name in 20 tries")

    def get_job(self, name: str) -> JobRecord:
        row = self._db.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise JobNotFoundError(name)
        return self._job_from_row(row, self.list_attempts(name))

    def list_jobs(
        self, *, limit: int = 50, status: JobStatus | None = None, experiment: str | None = None
    ) -> list[JobRecord]:
        """The newest jobs first."""
        sql = "SELECT * FROM jobs"
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            where.append("status = ?")
            args.append(status.value)
        if experiment is not None:
            where.append("experiment_name = ?")
            args.append(experiment)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC LIMIT ?"
        args.append(limit)
        return [self._job_from_row(row, ()) for row in self._db.execute(sql, args).fetchall()]

    def _job_from_row(self, row: sqlite3.Row, attempts: Any) -> JobRecord:
        return JobRecord(
            name=row["name"],
            status=JobStatus(row["status"]),
            experiment_name=row["experiment_name"],
            created_at=row["created_at"],
            spec=json.loads(row["spec_json"]),
            job_dir=str(self.jobs_dir / row["name"]),
            display_name=row["display_name"],
            description=row["description"],
            tags=json.loads(row["tags_json"]),
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            supervisor_pid=row["supervisor_pid"],
            supervisor_started=row["supervisor_started"],
            cancel_requested=bool(row["cancel_requested"]),
            error=RootCause.from_dict(json.loads(row["error_json"])) if row["error_json"] else None,
            attempts=tuple(attempts),
            target=row["target"] or "local",
            queue=json.loads(row["queue_json"]) if row["queue_json"] else None,
            created_by=row["created_by"],
        )

    def set_waiting(self, name: str, reason: str) -> None:
        """Show a job that holds its grant but waits for its nodes (a pending Ray
        placement group) as Queued, with ``reason``; its next attempt makes it Running."""
        with self._transaction() as db:
            db.execute(
                "UPDATE jobs SET status = ?, queue_json = ? WHERE name = ? AND status IN (?, ?)",
                (
                    JobStatus.QUEUED.value,
                    json.dumps({"position": None, "reason": reason}),
                    name,
                    JobStatus.PREPARING.value,
                    JobStatus.RUNNING.value,
                ),
            )

    def clear_supervisor(self, name: str) -> None:
        """Forget a supervisor that died (the scheduler starts another when it is needed)."""
        self._db.execute(
            "UPDATE jobs SET supervisor_pid = NULL, supervisor_started = NULL WHERE name = ?",
            (name,),
        )

    def claim_supervisor(self, name: str, pid: int, alive: Callable[[int], bool]) -> bool:
        """Record ``pid`` as the job's supervisor unless another live one is recorded."""
        with self._transaction() as db:
            row = db.execute("SELECT supervisor_pid FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise JobNotFoundError(name)
            current = row[0]
            if current is not None and current != pid and alive(current):
                return False
            db.execute(
                "UPDATE jobs SET supervisor_pid = ?, supervisor_started = ? WHERE name = ?",
                (pid, time.time(), name),
            )
        return True

    def set_status(self, name: str, status: JobStatus, *, error: RootCause | None = None) -> bool:
        """Move a job to ``status``; a terminal job never moves again.

        Returns:
            Whether the job moved (False when it had already ended).
        """
        now = time.time()
        with self._transaction() as db:
            row = db.execute(
                "SELECT status, started_at FROM jobs WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise JobNotFoundError(name)
            if JobStatus(row["status"]).is_terminal:
                return False
            started = row["started_at"]
            if started is None and status is not JobStatus.QUEUED:
                started = now
            if status is not JobStatus.QUEUED:
                # Its place in the queue and why it waited are history now.
                db.execute("UPDATE jobs SET queue_json = NULL WHERE name = ?", (name,))
            db.execute(
                "UPDATE jobs SET status = ?, started_at = ?, ended_at = ?, error_json = ? "
                "WHERE name = ?",
                (
                    status.value,
                    started,
                    now if status.is_terminal else None,
                    _dumps(error.to_dict()) if error else None,
                    name,
                ),
            )
            if status.is_terminal:
                # Its devices are free the moment it ends, whoever ends it.
                db.execute("DELETE FROM allocations WHERE job_name = ?", (name,))
                # An attempt cut short with its job (supervisor lost, cancel) ends with it.
                ended = {
                    JobStatus.COMPLETED: AttemptStatus.SUCCEEDED,
                    JobStatus.FAILED: AttemptStatus.FAILED,
                    JobStatus.CANCELED: AttemptStatus.CANCELED,
                }[status]
                db.execute(
                    "UPDATE attempts SET status = ?, ended_at = ?, error_json = COALESCE("
                    "error_json, ?) WHERE job_name = ? AND status = ?",
                    (
                        ended.value,
                        now,
                        _dumps(error.to_dict()) if error else None,
                        name,
                        AttemptStatus.RUNNING.value,
                    ),
                )
        return True

    def request_cancel(self, name: str) -> None:
        self._db.execute("UPDATE jobs SET cancel_requested = 1 WHERE name = ?", (name,))

    def requests(self, name: str) -> tuple[bool, bool]:
        """Whether a cancel, and whether a preemption, is pending for the job (one cheap read)."""
        row = self._db.execute(
            "SELECT cancel_requested, preempt_json IS NOT NULL FROM jobs WHERE name = ?", (name,)
        ).fetchone()
        return (bool(row[0]), bool(row[1])) if row else (False, False)

    def request_preemption(
        self, name: str, nodes: list[int] | None, *, for_job: str | None = None
    ) -> None:
        """Ask the job's runner to treat ``nodes`` (every node when ``None``) as evicted.

        Args:
            for_job: The queued job the scheduler makes room for (``None``: a user's
                ``phalanx job preempt``).
        """
        request: dict[str, Any] = {"nodes": nodes, "at": time.time()}
        if for_job is not None:
            request["for"] = for_job
        self._db.execute(
            "UPDATE jobs SET preempt_json = ? WHERE name = ?", (json.dumps(request), name)
        )

    def take_preemption_request(self, name: str) -> dict[str, Any] | None:
        """The pending preemption request, cleared as it is read."""
        with self._transaction() as db:
            row = db.execute("SELECT preempt_json FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None or row[0] is None:
                return None
            db.execute("UPDATE jobs SET preempt_json = NULL WHERE name = ?", (name,))
        result: dict[str, Any] = json.loads(row[0])
        return result

    # -- attempts -----------------------------------------------------------

    def start_attempt(
        self,
        name: str,
        *,
        master_port: int | None,
        nodes: list[dict[str, Any]] | None = None,
    ) -> AttemptRecord:
        """Record a new running attempt; ``nodes`` is each node's host and devices."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM attempts WHERE job_name = ?", (name,)
            ).fetchone()
            number = int(row[0])
            db.execute(
                "INSERT INTO attempts (job_name, number, status, started_at, master_port,"
                " nodes_json) VALUES (?, ?, ?, ?, ?, ?)",
                (name, number, AttemptStatus.RUNNING.value, time.time(), master_port,
                 _dumps(nodes)),
            )  # fmt: skip
        return self.list_attempts(name)[-1]

    def end_attempt(
        self,
        name: str,
        number: int,
        status: AttemptStatus,
        *,
        cause: FailureCause | None = None,
        exit_code: int | None = None,
        error: RootCause | None = None,
    ) -> None:
        self._db.execute(
            "UPDATE attempts SET status = ?, cause = ?, exit_code = ?, ended_at = ?,"
            " error_json = ? WHERE job_name = ? AND number = ?",
            (
                status.value,
                cause.value if cause else None,
                exit_code,
                time.time(),
                _dumps(error.to_dict()) if error else None,
                name,
                number,
            ),
        )

    def set_attempt_note(self, name: str, number: int, note: str) -> None:
        """Record what followed an attempt (retried, or why not)."""
        self._db.execute(
            "UPDATE attempts SET note = ? WHERE job_name = ? AND number = ?", (note, name, number)
        )

    def list_attempts(self, name: str) -> list[AttemptRecord]:
        rows = self._db.execute(
            "SELECT * FROM attempts WHERE job_name = ? ORDER BY number", (name,)
        ).fetchall()
        return [
            AttemptRecord(
                job_name=row["job_name"],
                number=row["number"],
                status=AttemptStatus(row["status"]),
                started_at=row["started_at"],
                ended_at=row["ended_at"],
                cause=FailureCause(row["cause"]) if row["cause"] else None,
                exit_code=row["exit_code"],
                master_port=row["master_port"],
                note=row["note"],
                nodes=tuple(json.loads(row["nodes_json"])) if row["nodes_json"] else (),
                error=RootCause.from_dict(json.loads(row["error_json"]))
                if row["error_json"]
                else None,
            )
            for row in rows
        ]
