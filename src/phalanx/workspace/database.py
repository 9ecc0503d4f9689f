"""The workspace database, through SQLAlchemy Core: SQLite by default, or PostgreSQL.

Where it is:

- ``Workspace(db=URL)`` (the server's ``--db``), else ``$PHALANX_DB``, else the
  SQLite file ``$PHALANX_HOME/phalanx.db``. Every process of a workspace (CLI,
  supervisors, the scheduler) must reach the same database, so ``PHALANX_DB``
  travels in their environment.
- ``sqlite:////abs/path.db``, or ``postgresql://user:password@host:port/dbname``
  (``postgres://`` and ``postgresql+psycopg://`` too; the driver is psycopg 3,
  ``pip install 'phalanx[postgresql]'``). A password is never shown: messages
  carry the URL with ``***`` in its place.

How it is used: statements are SQL text with named parameters (``:name``),
written once for both backends; rows are read by column name (``row["name"]``).

Writes that belong together are one serialised transaction
(:meth:`Database.transaction`): SQLite's ``BEGIN IMMEDIATE`` takes the write
lock up front; on PostgreSQL the first statement takes a transaction-scoped
advisory lock (:data:`WRITE_LOCK`) that every phalanx write transaction takes,
so a read-then-write (a job's claim, the scheduler's decision, the next version
number) never interleaves with another. Reads take no lock. Both wait up to
30 s for the lock (SQLite's busy timeout, PostgreSQL's ``lock_timeout``).

A database that cannot be reached (stopped, restarting, the network gone, or
locked past that wait) raises :class:`~phalanx.errors.DatabaseUnavailable`, a
one-line error, instead of the driver's. How long a process waits for it
first is its *patience* (``Database(patience_s=…)``, or for a block of code
:meth:`Database.patience`): reads, the start of a write transaction and
:meth:`Database.retrying` calls are repeated with backoff (0.2 s doubling to
5 s) until the database answers or it has been unavailable that long. A
command or a server request has none (it answers at once); a supervisor waits
(see :mod:`phalanx.workspace.leases`). A transaction that fails half-way is
rolled back and raises; only its caller can run it again (``retrying``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    CursorResult,
    Engine,
    RowMapping,
    TextClause,
    create_engine,
    event,
)
from sqlalchemy import text as sql_text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from phalanx.errors import DatabaseUnavailable, PhalanxError

log = logging.getLogger(__name__)
T = TypeVar("T")

DB_ENV = "PHALANX_DB"
WRITE_LOCK = 0x70_68_61_6C_61_6E_78  # "phalanx": the advisory lock of write transactions
LOCK_WAIT_S = 30
_POSTGRES_SCHEMES = ("postgresql", "postgres")
_FIRST_DELAY_S = 0.2
_MOST_DELAY_S = 5.0
# PostgreSQL's answers that mean "not now" rather than "never": the server shutting
# down, starting up or out of connections, a lock not granted within lock_timeout.
# (Class 08, connection exceptions, counts too; so does no answer at all.)
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "55P03"})
_PASSING_REFUSALS = ("the database system is", "too many", "due to administrator command")


@functools.lru_cache(maxsize=1024)
def _statement(sql: str) -> TextClause:
    return sql_text(sql)


class Tx:
    """The statements of one transaction (or of one read, outside any)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> CursorResult[Any]:
        """Run ``sql`` with ``:name`` parameters; the result has ``rowcount`` for writes."""
        return self.connection.execute(_statement(sql), dict(params or {}))

    def all(self, sql: str, params: Mapping[str, Any] | None = None) -> list[RowMapping]:
        return list(self.execute(sql, params).mappings())

    def first(self, sql: str, params: Mapping[str, Any] | None = None) -> RowMapping | None:
        return self.execute(sql, params).mappings().first()


class Database:
    """An engine and its write transactions, for one workspace.

    Args:
        url: Where the database is (see the module docstring).
        setting: Where ``url`` came from (``--db``, ``PHALANX_DB``), named in messages;
            ``None`` for the default SQLite file.
        patience_s: How long a call waits for a database that is unavailable, counted
            from its first failure (see the module docstring); 0: not at all.

    Raises:
        PhalanxError: a URL phalanx cannot use, or psycopg missing for PostgreSQL.
    """

    def __init__(self, url: URL, setting: str | None, patience_s: float = 0.0) -> None:
        self.url = url
        self.setting = setting
        self.is_sqlite = url.get_backend_name() == "sqlite"
        self.patience_s = patience_s
        self.outages = 0
        """How many times the database became unavailable (a watcher's clock resets)."""
        self._down_since: float | None = None
        self._down_lock = threading.Lock()
        self._local = threading.local()
        if self.is_sqlite:
            self.engine = _sqlite_engine(url)
        else:
            self.engine = _postgres_engine(url, setting or DB_ENV)
        _forget_in_forked_children(self.engine)

    def describe(self) -> str:
        """The database for a message: its file, or its URL without the password."""
        if self.is_sqlite:
            return str(self.url.database)
        return self._as_written().render_as_string(hide_password=True)

    def redact(self, message: str) -> str:
        """``message`` without the password, however a driver quoted it."""
        return redact(message, self.url.password)

    def child_env(self) -> dict[str, str]:
        """What a child process needs in its environment to reach this database."""
        if self.setting is None:
            return {}
        return {DB_ENV: self._as_written().render_as_string(hide_password=False)}

    def _as_written(self) -> URL:
        """The URL in the form users write it (the driver is phalanx's business)."""
        return self.url if self.is_sqlite else self.url.set(drivername="postgresql")

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """One serialised write transaction: committed on success, else rolled back.

        A transaction opened inside another on the same thread joins it (as one
        connection would), so helpers that write may be called from within one.
        Starting it waits for an unavailable database (the patience); a failure
        once it began raises :class:`~phalanx.errors.DatabaseUnavailable`.
        """
        outer: Tx | None = getattr(self._local, "tx", None)
        if outer is not None:
            yield outer
            return
        connection = self.retrying(self._begin)
        tx = Tx(connection)
        self._local.tx = tx
        try:
            yield tx
            connection.commit()
        except BaseException as exc:
            with contextlib.suppress(Exception):  # a connection that is gone rolls back itself
                connection.rollback()
            if isinstance(exc, DBAPIError) and unavailable(exc):
                raise self._unavailable(exc) from exc
            raise
        finally:
            self._local.tx = None
            with contextlib.suppress(Exception):
                connection.close()

    def _begin(self) -> Connection:
        """A connection holding the write lock, in its transaction."""
        connection = self.engine.connect()
        try:
            if self.is_sqlite:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
        except BaseException:
            with contextlib.suppress(Exception):
                connection.close()
            raise
        return connection

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[RowMapping]:
        """Rows of one read (inside this thread's transaction when there is one)."""
        tx: Tx | None = getattr(self._local, "tx", None)
        if tx is not None:
            return tx.all(sql, params)
        return self.retrying(lambda: self._read(sql, params))

    def _read(self, sql: str, params: Mapping[str, Any] | None) -> list[RowMapping]:
        with self.engine.connect() as connection:
            return Tx(connection).all(sql, params)

    def retrying(self, call: Callable[[], T]) -> T:
        """``call()``, repeated with backoff while the database is unavailable, until it
        has been so for the patience; inside a transaction, called once (the outermost
        caller repeats the whole).

        Raises:
            DatabaseUnavailable: still unavailable when the patience ran out.
        """
        if getattr(self._local, "tx", None) is not None:
            return call()
        delay = _FIRST_DELAY_S
        while True:
            try:
                result = call()
            except DatabaseUnavailable as exc:
                failure = exc
            except DBAPIError as exc:
                if not unavailable(exc):
                    raise
                failure = self._unavailable(exc)
            else:
                self._reachable()
                return result
            left = self._left(failure)
            if left <= 0:
                raise failure
            time.sleep(min(delay, left))
            delay = min(delay * 2, _MOST_DELAY_S)

    @contextmanager
    def patience(self, seconds: float) -> Iterator[None]:
        """Within the block, this thread waits at most ``seconds`` for the database."""
        before = getattr(self._local, "patience", None)
        self._local.patience = seconds
        try:
            yield
        finally:
            self._local.patience = before

    def _left(self, failure: DatabaseUnavailable) -> float:
        """Seconds this thread may still wait, counting from the outage's first failure."""
        patience = getattr(self._local, "patience", None)
        patience = self.patience_s if patience is None else patience
        now = time.monotonic()
        with self._down_lock:
            if self._down_since is None:
                self._down_since = now
                self.outages += 1
                if self.patience_s > 0:  # a process that waits says why, once
                    log.warning("%s; waiting for it up to %.0f s", failure, self.patience_s)
        return self._down_since + patience - now

    def _reachable(self) -> None:
        if self._down_since is None:
            return
        with self._down_lock:
            if self._down_since is not None and self.patience_s > 0:
                log.warning(
                    "the workspace database answers again (unavailable for %.0f s)",
                    time.monotonic() - self._down_since,
                )
            self._down_since = None

    def _unavailable(self, exc: DBAPIError) -> DatabaseUnavailable:
        text = str(exc.orig if exc.orig is not None else exc).strip()
        reason = self.redact(text.splitlines()[0] if text else type(exc).__name__)
        if self.is_sqlite:
            message = (
                f"the workspace database {self.describe()} stayed locked ({reason}); another "
                "process holds its write lock; run the command again"
            )
        else:
            message = (
                f"the workspace database stopped answering ({reason}); check that it runs "
                f"and that {self.setting} reaches it, then run the command again"
            )
        return DatabaseUnavailable(message, reason=reason)

    def close(self) -> None:
        self.engine.dispose()


def unavailable(exc: BaseException) -> bool:
    """Whether a driver's error means the database cannot be reached now, rather than
    a statement, a setting or a password that will never work."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        return "locked" in str(orig) or "busy" in str(orig)
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        return state.startswith("08") or state in _TRANSIENT_STATES
    # No state: the connection failed or broke. The server's own refusals say FATAL
    # (a wrong password, no such database); only some of those pass with time.
    text = str(orig)
    return "FATAL:" not in text or any(words in text for words in _PASSING_REFUSALS)


def resolve_url(home: Path, db: str | None) -> tuple[URL, str | None]:
    """The database URL a workspace uses and the setting it came from.

    Raises:
        PhalanxError: a URL that cannot be parsed, names another kind of database,
            or a relative SQLite path.
    """
    setting: str | None = "--db" if db else DB_ENV
    raw = db or os.environ.get(DB_ENV, "").strip()
    if not raw:
        return URL.create("sqlite", database=str(home / "phalanx.db")), None
    try:
        url = make_url(raw)
    except (ArgumentError, ValueError) as exc:
        raise PhalanxError(
            f"{setting} {redact_url(raw)!r} is not a database URL ({exc}); write "
            "postgresql://USER:PASSWORD@HOST:PORT/DBNAME or sqlite:////ABSOLUTE/PATH.db"
        ) from None
    if url.drivername in _POSTGRES_SCHEMES or url.drivername.startswith("postgresql+"):
        return url.set(drivername="postgresql+psycopg"), setting  # psycopg 3, whatever was named
    if url.drivername in ("sqlite", "sqlite+pysqlite"):
        if not url.database or not Path(url.database).is_absolute():
            raise PhalanxError(
                f"{setting} {redact_url(raw)!r} must name a SQLite file by its absolute path "
                "(sqlite:////ABSOLUTE/PATH.db): every process of the workspace opens it"
            )
        return url.set(drivername="sqlite"), setting
    raise PhalanxError(
        f"{setting} {redact_url(raw)!r} names a {url.get_backend_name()} database; phalanx "
        "works with postgresql://USER:PASSWORD@HOST:PORT/DBNAME or sqlite:////ABSOLUTE/PATH.db"
    )


def redact(message: str, password: str | None) -> str:
    """``message`` with ``password`` (as written, or URL-quoted) replaced by ``***``."""
    if not password:
        return message
    from urllib.parse import quote, quote_plus

    for form in {password, quote(password, safe=""), quote_plus(password)}:
        message = message.replace(form, "***")
    return message


def redact_url(raw: str) -> str:
    """A URL as the user wrote it, without the password (for a URL that did not parse)."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", raw)


def _forget_in_forked_children(engine: Engine) -> None:
    """A forked child (a mount server) opens connections of its own if it needs any; it
    never uses, nor closes, the parent's."""
    ref = weakref.ref(engine)

    def after_fork() -> None:
        forked = ref()
        if forked is not None:
            forked.dispose(close=False)

    os.register_at_fork(after_in_child=after_fork)


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


def _sqlite_engine(url: URL) -> Engine:
    engine = create_engine(url, connect_args={"timeout": LOCK_WAIT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # phalanx says when a transaction begins (BEGIN IMMEDIATE); reads run in autocommit.
        dbapi_connection.isolation_level = None
        _set_wal(dbapi_connection)
        for pragma in ("foreign_keys=ON", "synchronous=NORMAL"):
            dbapi_connection.execute(f"PRAGMA {pragma}")

    return engine


def _postgres_engine(url: URL, setting: str) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PhalanxError(
            f"{setting} names a PostgreSQL database but psycopg is not installed; "
            "pip install 'phalanx[postgresql]'"
        ) from None
    connect_args: dict[str, Any] = {"application_name": "phalanx"}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = 10
    if "options" not in url.query:
        connect_args["options"] = f"-c lock_timeout={LOCK_WAIT_S * 1000}"
    # Long-lived processes (the scheduler, supervisors) outlive a server restart.
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)
