"""Alembic's environment for the workspace database: online, on phalanx's connection.

phalanx runs the migrations itself (:mod:`phalanx.workspace.migrate`), on a
connection that already holds the write lock, handed over in
``config.attributes["connection"]``; there is no ``alembic.ini``.

A new schema version is a new file in ``versions/``: revision ``NNNN`` (the
next number), ``down_revision`` the one before, the same change made to
:mod:`phalanx.workspace.schema`, and ``SCHEMA_VERSION`` raised. Write the
revision to run on SQLite and PostgreSQL alike; ``tests/unit/workspace/test_migrations.py``
checks that the revisions build exactly the tables of ``schema.py`` on both.
"""

from __future__ import annotations

from alembic import context

from phalanx.workspace.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "phalanx's migrations run on a connection phalanx gives them; open the workspace "
        "(phalanx.workspace.Workspace) to upgrade it"
    )
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
