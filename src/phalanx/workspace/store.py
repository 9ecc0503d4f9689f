"""The workspace: a folder per job plus a database of jobs and attempts.

The database is SQLite in the workspace folder unless ``PHALANX_DB`` (or
``db``) names another, e.g. a team's PostgreSQL: :mod:`phalanx.workspace.database`
holds the engine and its serialised write transactions,
:mod:`phalanx.workspace.schema` the tables, and :mod:`phalanx.workspace.migrate`
brings an older database up to date when it is opened. SQLAlchemy is imported
only when a workspace is opened, so importing this package stays light.

A supervisor holds its job's lease (:mod:`phalanx.workspace.leases`): once it
claimed the job, every write of this workspace about that job is fenced by the
generation it holds. The writes a supervisor makes are repeated whole while the
database is unavailable, within the workspace's patience.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from phalanx.errors import DatabaseUnavailable, JobNotFoundError, PhalanxError
from phalanx.workspace import leases
from phalanx.workspace.joblist import tag_rows
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

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

    from phalanx.workspace.database import Database, Tx
    from phalanx.workspace.joblist import JobPage, JobQuery


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


P = ParamSpec("P")
R = TypeVar("R")


def _retried(
    method: Callable[Concatenate[Workspace, P], R],
) -> Callable[Concatenate[Workspace, P], R]:
    """A write repeated whole while the database is unavailable, within the patience.

    Each is one transaction, so a repeat never applies half of one; all of them
    may be repeated after a commit whose answer was lost (``start_attempt`` finds
    the attempt it already started).
    """

    @functools.wraps(method)
    def retried(self: Workspace, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.database.retrying(lambda: method(self, *args, **kwargs))

    return retried


@dataclass(frozen=True)
class Requests:
    """What a running job's supervisor reads every half second."""

    cancel: bool
    preempt: bool
    generation: int
    """The job's lease generation now (another than the supervisor's: it was taken)."""


class Workspace:
    """A ``PHALANX_HOME`` folder: its database and job folders.

    Args:
        home: The workspace folder; ``$PHALANX_HOME`` or ``~/.phalanx`` when ``None``.
        db: The database URL (``postgresql://USER:PASSWORD@HOST:PORT/DBNAME``);
            ``$PHALANX_DB``, else ``home/phalanx.db``, when ``None``.
        patience_s: How long its calls (its opening included) wait for a database that
            is unavailable (:mod:`phalanx.workspace.database`); 0: not at all.

    Raises:
        PhalanxError: the folder cannot be made, or the database cannot be reached,
            read or brought to this phalanx's schema (``DatabaseUnavailable`` when it
            cannot be reached now).
    """

    def __init__(
        self, home: Path | None = None, db: str | None = None, *, patience_s: float = 0.0
    ) -> None:
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
        self._db = _open(self.home, db, patience_s)
        self.leases: dict[str, int] = {}
        """The lease generation this process holds, per job it supervises."""

    def close(self) -> None:
        self._db.close()

    @property
    def database(self) -> Database:
        """Where the records are (its engine, URL and the environment children need)."""
        return self._db

    def child_env(self) -> dict[str, str]:
        """What a process started for this workspace needs to find it again."""
        return {"PHALANX_HOME": str(self.home), **self._db.child_env()}

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One serialised write transaction: committed on success, else rolled back.

        It yields a :class:`~phalanx.workspace.database.Tx`: ``execute(sql, params)``
        (SQL with ``:name`` parameters), ``all(…)`` and ``first(…)`` (rows by column
        name). A transaction opened inside another on the same thread joins it.
        """
        with self._db.transaction() as tx:
            yield tx

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[RowMapping]:
        """Rows of one read-only statement (``:name`` parameters)."""
        return self._db.query(sql, params)

    def ping(self) -> None:
        """Reach the database with one trivial read (waiting within the patience).

        Raises:
            DatabaseUnavailable: it cannot be reached.
        """
        self.query("SELECT 1 AS up")

    def patience(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Within the block, this thread waits at most ``seconds`` for the database."""
        return self._db.patience(seconds)

    # -- leases -------------------------------------------------------------

    def fence(self, tx: Tx, name: str) -> None:
        """In a write transaction about job ``name``: go on only while this process
        still holds its lease, when it holds one.

        Raises:
            LeaseLost: another took the lease; nothing of the transaction is written.
        """
        generation = self.leases.get(name)
        if generation is not None:
            leases.fence(tx, name, generation)

    def check_lease(self, name: str) -> None:
        """Raise :class:`~phalanx.workspace.leases.LeaseLost` unless this process still
        holds the job's lease (or holds none)."""
        if name in self.leases:
            self.database.retrying(lambda: self._fenced_nothing(name))

    def _fenced_nothing(self, name: str) -> None:
        with self.transaction() as tx:
            self.fence(tx, name)

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
        running: bool = False,
        parent: str | None = None,
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
            running: Record it Running (started now) instead: a run no supervisor runs,
                which MLflow logs to from outside (``phalanx.tracking``).
            parent: The sweep it is a trial of.

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
            with self.transaction() as tx:
                final_name = self._insert_job(
                    tx,
                    spec,
                    name,
                    queue or QueueEntry(),
                    created_by,
                    running=running,
                    parent=parent,
                )
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

    def names_with_prefix(self, prefix: str) -> list[str]:
        """The job names that begin with ``prefix`` (compared as text: no wildcards)."""
        rows = self.query(
            "SELECT name FROM jobs WHERE substr(name, 1, :n) = :prefix",
            {"n": len(prefix), "prefix": prefix},
        )
        return [row["name"] for row in rows]

    def _exists(self, name: str) -> bool:
        return bool(self.query("SELECT 1 AS found FROM jobs WHERE name = :name", {"name": name}))

    def _insert_job(
        self,
        tx: Tx,
        spec: dict[str, Any],
        name: str | None,
        queue: QueueEntry,
        created_by: str | None,
        *,
        running: bool = False,
        parent: str | None = None,
    ) -> str:
        # Under the write lock nobody else inserts: a name not there now is free. (A failed
        # INSERT would end the whole transaction on PostgreSQL, so it is never tried.)
        now = time.time()
        for _ in range(20):
            candidate = name or generate_name()
            if tx.first("SELECT 1 AS found FROM jobs WHERE name = :name", {"name": candidate}):
                if name is not None:
                    raise PhalanxError(
                        f"job name {name!r} already exists; choose another name or omit `name`"
                    )
                continue
            tx.execute(
                "INSERT INTO jobs (name, display_name, experiment_name, description, tags_json,"
                " status, created_at, started_at, spec_json, target, request_json, priority,"
                " tier, timeout, created_by, parent_name) VALUES (:name, :display_name,"
                " :experiment_name, :description, :tags_json, :status, :created_at, :started_at,"
                " :spec_json, :target, :request_json, :priority, :tier, :timeout, :created_by,"
                " :parent)",
                {
                    "name": candidate,
                    "display_name": spec.get("display_name"),
                    "experiment_name": spec.get("experiment_name") or "Default",
                    "description": spec.get("description"),
                    "tags_json": json.dumps(spec.get("tags") or {}),
                    "status": (JobStatus.RUNNING if running else JobStatus.QUEUED).value,
                    "created_at": now,
                    "started_at": now if running else None,
                    "spec_json": json.dumps(spec, sort_keys=True),
                    "target": queue.target,
                    "request_json": _dumps(queue.request),
                    "priority": queue.priority,
                    "tier": queue.tier,
                    "timeout": queue.timeout,
                    "created_by": created_by,
                    "parent": parent,
                },
            )
            for key, value in tag_rows(spec.get("tags") or {}):
                tx.execute(
                    "INSERT INTO job_tags (job_name, key, value) VALUES (:name, :key, :value)",
                    {"name": candidate, "key": key, "value": value},
                )
            return candidate
        raise RuntimeError("could not generate a unique job name in 20 tries")

    def get_job(self, name: str) -> JobRecord:
        rows = self.query("SELECT * FROM jobs WHERE name = :name", {"name": name})
        if not rows:
            raise JobNotFoundError(name)
        return self.job_from_row(rows[0], self.list_attempts(name))

    def list_jobs(
        self,
        *,
        limit: int = 50,
        status: JobStatus | None = None,
        experiment: str | None = None,
        parent: str | None = None,
        top_level: bool = False,
    ) -> list[JobRecord]:
        """The newest jobs first; with ``parent``, only the trials of that sweep; with
        ``top_level``, only the jobs no sweep made."""
        sql = "SELECT * FROM jobs"
        where: list[str] = []
        args: dict[str, Any] = {"limit": limit}
        if parent is not None:
            where.append("parent_name = :parent")
            args["parent"] = parent
        elif top_level:
            where.append("parent_name IS NULL")
        if status is not None:
            where.append("status = :status")
            args["status"] = status.value
        if experiment is not None:
            where.append("experiment_name = :experiment")
            args["experiment"] = experiment
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC LIMIT :limit"
        return [self.job_from_row(row, ()) for row in self.query(sql, args)]

    def page_jobs(self, query: JobQuery) -> JobPage:
        """A page of the job list: filtered, sorted, after or before a cursor
        (:mod:`phalanx.workspace.joblist`); each job with its latest attempt."""
        from phalanx.workspace.joblist import read_page

        return read_page(self, query)

    def experiments(self) -> list[tuple[str, float, float]]:
        """Each experiment: the names jobs carry and those made before any job named them,
        with when it began (its first job, or its making) and its latest job."""
        found = {
            r["experiment_name"]: (r["first"], r["last"])
            for r in self.query(
                "SELECT experiment_name, MIN(created_at) AS first, MAX(created_at) AS last "
                "FROM jobs GROUP BY experiment_name"
            )
        }
        for r in self.query("SELECT name, created_at FROM experiments"):
            first, last = found.get(r["name"], (r["created_at"], r["created_at"]))
            found[r["name"]] = (min(first, r["created_at"]), last)
        return [(name, first, last) for name, (first, last) in found.items()]

    @_retried
    def create_experiment(self, name: str, created_by: str | None) -> bool:
        """Record experiment ``name`` (no job names it yet); whether it was new."""
        with self.transaction() as tx:
            if tx.first("SELECT 1 AS found FROM experiments WHERE name = :name", {"name": name}):
                return False
            tx.execute(
                "INSERT INTO experiments (name, created_at, created_by) VALUES (:name, :now, :by)",
                {"name": name, "now": time.time(), "by": created_by},
            )
            return True

    def any_job_not_over(self) -> bool:
        """Whether any job is not yet in a terminal status (one cheap read)."""
        live = {f"s{k}": s.value for k, s in enumerate(JobStatus) if not s.is_terminal}
        marks = ",".join(f":{key}" for key in live)
        return bool(self.query(f"SELECT 1 FROM jobs WHERE status IN ({marks}) LIMIT 1", live))

    def job_from_row(self, row: RowMapping, attempts: Any) -> JobRecord:
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
            lease_generation=row["lease_generation"],
            lease_holder=row["lease_holder"],
            lease_renewed_at=row["lease_renewed_at"],
            parent=row["parent_name"],
        )

    @_retried
    def set_waiting(self, name: str, reason: str) -> None:
        """Show a job that holds its grant but waits for its nodes (a pending Ray
        placement group) as Queued, with ``reason``; its next attempt makes it Running."""
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE jobs SET status = :queued, queue_json = :queue WHERE name = :name"
                " AND status IN (:preparing, :running)",
                {
                    "queued": JobStatus.QUEUED.value,
                    "queue": json.dumps({"position": None, "reason": reason}),
                    "name": name,
                    "preparing": JobStatus.PREPARING.value,
                    "running": JobStatus.RUNNING.value,
                },
            )

    @_retried
    def set_preparing(self, name: str, note: dict[str, Any] | None) -> None:
        """Show what a Preparing job is doing (``JobRecord.queue``, where a Queued job's
        place and reason are); ``None``: nothing now."""
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE jobs SET queue_json = :note WHERE name = :name AND status = :preparing",
                {
                    "note": None if note is None else json.dumps(note),
                    "name": name,
                    "preparing": JobStatus.PREPARING.value,
                },
            )

    @_retried
    def clear_supervisor(self, name: str) -> None:
        """Forget a supervisor that died (the scheduler starts another when it is needed)."""
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE jobs SET supervisor_pid = NULL, supervisor_started = NULL"
                " WHERE name = :name",
                {"name": name},
            )

    @_retried
    def claim_supervisor(
        self, name: str, pid: int, alive: Callable[[int], bool], *, host: str | None = None
    ) -> int | None:
        """Take the job's lease for the supervisor ``pid`` of ``host`` (this machine);
        the generation it holds from now, or ``None`` when another live one holds it.

        Args:
            alive: Whether a pid of this machine is a live supervisor of the job.
        """
        generation = leases.claim(self, name, pid, alive, host)
        if generation is not None:
            self.leases[name] = generation
        return generation

    @_retried
    def set_status(self, name: str, status: JobStatus, *, error: RootCause | None = None) -> bool:
        """Move a job to ``status``; a terminal job never moves again.

        Returns:
            Whether the job moved (False when it had already ended).
        """
        now = time.time()
        with self.transaction() as tx:
            row = tx.first("SELECT status, started_at FROM jobs WHERE name = :name", {"name": name})
            if row is None:
                raise JobNotFoundError(name)
            self.fence(tx, name)
            if JobStatus(row["status"]).is_terminal:
                return False
            started = row["started_at"]
            if started is None and status is not JobStatus.QUEUED:
                started = now
            if status is not JobStatus.QUEUED:
                # Its place in the queue and why it waited are history now.
                tx.execute("UPDATE jobs SET queue_json = NULL WHERE name = :name", {"name": name})
            error_json = _dumps(error.to_dict()) if error else None
            tx.execute(
                "UPDATE jobs SET status = :status, started_at = :started, ended_at = :ended,"
                " error_json = :error WHERE name = :name",
                {
                    "status": status.value,
                    "started": started,
                    "ended": now if status.is_terminal else None,
                    "error": error_json,
                    "name": name,
                },
            )
            if status.is_terminal:
                # Its devices are free the moment it ends, whoever ends it.
                tx.execute("DELETE FROM allocations WHERE job_name = :name", {"name": name})
                # An attempt cut short with its job (supervisor lost, cancel) ends with it.
                ended = {
                    JobStatus.COMPLETED: AttemptStatus.SUCCEEDED,
                    JobStatus.FAILED: AttemptStatus.FAILED,
                    JobStatus.CANCELED: AttemptStatus.CANCELED,
                }[status]
                tx.execute(
                    "UPDATE attempts SET status = :ended, ended_at = :now,"
                    " error_json = COALESCE(error_json, :error)"
                    " WHERE job_name = :name AND status = :running",
                    {
                        "ended": ended.value,
                        "now": now,
                        "error": error_json,
                        "name": name,
                        "running": AttemptStatus.RUNNING.value,
                    },
                )
        return True

    @_retried
    def set_end_reason(self, name: str, error: RootCause) -> None:
        """Give a job that ended without a root cause one (why its sweep stopped it)."""
        with self.transaction() as tx:
            tx.execute(
                "UPDATE jobs SET error_json = :error WHERE name = :name AND error_json IS NULL"
                " AND ended_at IS NOT NULL",
                {"error": _dumps(error.to_dict()), "name": name},
            )

    @_retried
    def request_cancel(self, name: str) -> None:
        with self.transaction() as tx:
            tx.execute("UPDATE jobs SET cancel_requested = 1 WHERE name = :name", {"name": name})

    def requests(self, name: str) -> tuple[bool, bool]:
        """Whether a cancel, and whether a preemption, is pending for the job (one cheap read)."""
        polled = self.poll_requests(name)
        return polled.cancel, polled.preempt

    def poll_requests(self, name: str) -> Requests:
        """The requests pending for the job and its lease generation (one cheap read)."""
        rows = self.query(
            "SELECT cancel_requested, preempt_json, lease_generation FROM jobs WHERE name = :name",
            {"name": name},
        )
        if not rows:
            return Requests(False, False, 0)
        row = rows[0]
        return Requests(
            bool(row["cancel_requested"]), row["preempt_json"] is not None, row["lease_generation"]
        )

    @_retried
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
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE jobs SET preempt_json = :request WHERE name = :name",
                {"request": json.dumps(request), "name": name},
            )

    @_retried
    def take_preemption_request(self, name: str) -> dict[str, Any] | None:
        """The pending preemption request, cleared as it is read."""
        with self.transaction() as tx:
            self.fence(tx, name)
            row = tx.first("SELECT preempt_json FROM jobs WHERE name = :name", {"name": name})
            if row is None or row["preempt_json"] is None:
                return None
            tx.execute("UPDATE jobs SET preempt_json = NULL WHERE name = :name", {"name": name})
        result: dict[str, Any] = json.loads(row["preempt_json"])
        return result

    # -- attempts -----------------------------------------------------------

    @_retried
    def start_attempt(
        self,
        name: str,
        *,
        master_port: int | None,
        nodes: list[dict[str, Any]] | None = None,
    ) -> AttemptRecord:
        """Record a new running attempt; ``nodes`` is each node's host and devices.

        A lease holder's attempt records the generation it runs under; a holder never
        has two running, so one found running under its generation is the one it
        started (a repeat after a commit whose answer was lost).
        """
        generation = self.leases.get(name)
        with self.transaction() as tx:
            self.fence(tx, name)
            if generation is not None:
                started = tx.first(
                    "SELECT number FROM attempts WHERE job_name = :name AND status = :running"
                    " AND generation = :gen",
                    {"name": name, "running": AttemptStatus.RUNNING.value, "gen": generation},
                )
                if started is not None:
                    return self._attempt(name, int(started["number"]))
            row = tx.first(
                "SELECT COALESCE(MAX(number), 0) + 1 AS next FROM attempts WHERE job_name = :name",
                {"name": name},
            )
            number = int(row["next"]) if row else 1
            tx.execute(
                "INSERT INTO attempts (job_name, number, status, started_at, master_port,"
                " nodes_json, generation) VALUES (:name, :number, :status, :now, :port, :nodes,"
                " :gen)",
                {
                    "name": name,
                    "number": number,
                    "status": AttemptStatus.RUNNING.value,
                    "now": time.time(),
                    "port": master_port,
                    "nodes": _dumps(nodes),
                    "gen": generation,
                },
            )
        return self._attempt(name, number)

    def _attempt(self, name: str, number: int) -> AttemptRecord:
        return next(a for a in self.list_attempts(name) if a.number == number)

    @_retried
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
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE attempts SET status = :status, cause = :cause, exit_code = :exit_code,"
                " ended_at = :now, error_json = :error WHERE job_name = :name AND number = :number",
                {
                    "status": status.value,
                    "cause": cause.value if cause else None,
                    "exit_code": exit_code,
                    "now": time.time(),
                    "error": _dumps(error.to_dict()) if error else None,
                    "name": name,
                    "number": number,
                },
            )

    @_retried
    def set_attempt_note(self, name: str, number: int, note: str) -> None:
        """Record what followed an attempt (retried, or why not)."""
        with self.transaction() as tx:
            self.fence(tx, name)
            tx.execute(
                "UPDATE attempts SET note = :note WHERE job_name = :name AND number = :number",
                {"note": note, "name": name, "number": number},
            )

    def list_attempts(self, name: str) -> list[AttemptRecord]:
        rows = self.query(
            "SELECT * FROM attempts WHERE job_name = :name ORDER BY number", {"name": name}
        )
        return self.attempts_from_rows(rows)

    def attempts_from_rows(self, rows: list[RowMapping]) -> list[AttemptRecord]:
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
                generation=row["generation"],
                error=RootCause.from_dict(json.loads(row["error_json"]))
                if row["error_json"]
                else None,
            )
            for row in rows
        ]


def _open(home: Path, db: str | None, patience_s: float) -> Database:
    """The workspace's database, reached and at this phalanx's schema.

    Raises:
        PhalanxError: a bad URL, an unreadable database or a newer schema;
            ``DatabaseUnavailable`` when it cannot be reached within ``patience_s``.
    """
    from sqlalchemy.exc import DBAPIError

    from phalanx.workspace.database import Database, resolve_url
    from phalanx.workspace.migrate import ensure_schema

    url, setting = resolve_url(home, db)
    database = Database(url, setting, patience_s)
    where = str(home) if setting is None else database.describe()
    try:
        database.retrying(lambda: ensure_schema(database, where))
    except (DBAPIError, DatabaseUnavailable) as exc:
        database.close()
        if isinstance(exc, DatabaseUnavailable):
            reason = exc.reason
        else:
            text = str(exc.orig).strip() if exc.orig else str(exc)
            reason = database.redact(text.splitlines()[0] if text else type(exc).__name__)
        if setting is None:
            fix = "restore it or point PHALANX_HOME at another folder"
        elif database.is_sqlite:
            fix = f"restore it or point {setting} at another file"
        else:
            fix = (
                f"check that the server runs, the user, password and database in {setting}, "
                f"or unset {setting} to use the SQLite file in PHALANX_HOME"
            )
        message = f"cannot open the workspace database {database.describe()}: {reason}; {fix}"
        if isinstance(exc, DatabaseUnavailable):
            raise DatabaseUnavailable(message, reason=reason) from None
        raise PhalanxError(message) from None
    except BaseException:
        database.close()
        raise
    return database
