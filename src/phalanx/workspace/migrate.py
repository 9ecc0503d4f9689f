"""Bringing a workspace database to the schema this phalanx knows, once.

Alembic keeps the revision in ``alembic_version``; revisions are numbered as
the schema versions were (``0001`` … ``0014``), so a revision is also a
version to compare. Opening a workspace reads that one row; only a database
that is behind loads Alembic:

- an empty database is created from :mod:`phalanx.workspace.schema` and
  stamped with the newest revision;
- a SQLite workspace from before Alembic (``PRAGMA user_version`` 1…8, no
  ``alembic_version``) is stamped with the revision of its version, then
  upgraded like any other;
- one that is behind runs the missing revisions of
  :mod:`phalanx.workspace.migrations`.

This happens inside a write transaction (the write lock), so processes opening
the workspace together upgrade it once: the others wait, then find it current.
A SQLite workspace also keeps ``PRAGMA user_version`` at the schema version, so
a phalanx from before Alembic refuses a newer workspace as it always did.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, inspect
from sqlalchemy.exc import OperationalError, ProgrammingError

from phalanx.errors import PhalanxError
from phalanx.workspace.database import Database, Tx

SCHEMA_VERSION = 14
"""The newest schema, and the newest revision in ``migrations/versions`` (``0014``)."""
MIGRATIONS = Path(__file__).with_name("migrations")


def revision(version: int) -> str:
    return f"{version:04d}"


def ensure_schema(db: Database, where: str) -> None:
    """Create or upgrade the schema unless it is current (one cheap read when it is).

    Args:
        where: The workspace (its folder, or its database), as messages name it.

    Raises:
        PhalanxError: the database was written by a newer phalanx, or holds tables
            that are not a phalanx schema.
    """
    if _version(db) == SCHEMA_VERSION:
        return
    with db.transaction() as tx:
        # Read again under the write lock: another process may have done it meanwhile.
        conn = tx.connection
        found = inspect(conn).has_table("alembic_version")
        version = _version_in(tx) if found else None
        if version is None:
            legacy = _user_version(tx) if db.is_sqlite else 0
            if legacy > SCHEMA_VERSION:
                raise _newer(db, where, legacy)
            if legacy == 0:
                if inspect(conn).has_table("jobs"):
                    raise PhalanxError(
                        f"the workspace database {db.describe()} holds a jobs table but no "
                        "phalanx schema revision; point phalanx at an empty database"
                    )
                _create(tx)
            else:
                _alembic(conn, "stamp", revision(legacy))
                _alembic(conn, "upgrade", "head")
        elif version > SCHEMA_VERSION:
            raise _newer(db, where, version)
        elif version < SCHEMA_VERSION:
            _alembic(conn, "upgrade", "head")
        if db.is_sqlite:
            tx.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _version(db: Database) -> int | None:
    """The revision as a number, ``None`` without one (a read that takes no lock)."""
    with db.engine.connect() as conn:  # failing to connect is an error of its own
        try:
            return _version_in(Tx(conn))
        except (OperationalError, ProgrammingError):  # no alembic_version table yet
            return None


def _version_in(tx: Tx) -> int | None:
    row = tx.first("SELECT version_num FROM alembic_version")
    if row is None:
        return None
    value = str(row["version_num"])
    if not value.isdigit():
        raise PhalanxError(
            f"the workspace database is at schema revision {value!r}, which no phalanx "
            "release wrote; restore a backup or use another database"
        )
    return int(value)


def _user_version(tx: Tx) -> int:
    row = tx.first("PRAGMA user_version")
    return int(row["user_version"]) if row else 0


def _newer(db: Database, where: str, version: int) -> PhalanxError:
    other = "PHALANX_HOME" if db.setting is None else f"{db.setting} database"
    return PhalanxError(
        f"workspace {where} was written by a newer phalanx (schema {version}); "
        f"upgrade phalanx or use another {other}"
    )


def _create(tx: Tx) -> None:
    """A new database: the newest schema at once, stamped as Alembic would stamp it."""
    from phalanx.workspace.schema import alembic_version, metadata

    metadata.create_all(tx.connection)
    alembic_version.create(tx.connection)
    tx.execute(
        "INSERT INTO alembic_version (version_num) VALUES (:v)", {"v": revision(SCHEMA_VERSION)}
    )


def _alembic(conn: Connection, action: str, target: str) -> None:
    """Run an Alembic command on ``conn``, inside its transaction (no ``alembic.ini``)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("path_separator", "os")
    config.attributes["connection"] = conn
    getattr(command, action)(config, target)
