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
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
from sqlalchemy.exc import ArgumentError

from phalanx.errors import PhalanxError

DB_ENV = "PHALANX_DB"
WRITE_LOCK = 0x70_68_61_6C_61_6E_78  # "phalanx": the advisory lock of write transactions
LOCK_WAIT_S = 30
_POSTGRES_SCHEMES = ("postgresql", "postgres")


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

    Raises:
        PhalanxError: a URL phalanx cannot use, or psycopg missing for PostgreSQL.
    """

    def __init__(self, url: URL, setting: str | None) -> None:
        self.url = url
        self.setting = setting
        self.is_sqlite = url.get_backend_name() == "sqlite"
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
        """
        outer: Tx | None = getattr(self._local, "tx", None)
        if outer is not None:
            yield outer
            return
        with self.engine.connect() as connection:
            if self.is_sqlite:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK})")
            tx = Tx(connection)
            self._local.tx = tx
            try:
                yield tx
            except BaseException:
                connection.rollback()
                raise
            else:
                connection.commit()
            finally:
                self._local.tx = None

    def query(self, sql: str, params: Mapping[str, Any] | None = None) -> list[RowMapping]:
        """Rows of one read (inside this thread's transaction when there is one)."""
        tx: Tx | None = getattr(self._local, "tx", None)
        if tx is not None:
            return tx.all(sql, params)
        with self.engine.connect() as connection:
            return Tx(connection).all(sql, params)

    def close(self) -> None:
        self.engine.dispose()


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
