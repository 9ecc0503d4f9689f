"""Schema 9: registered environments (named, versioned images, builds and package files).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("tags_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_environments"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
