"""Schema 4: datastores and data assets.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "datastores",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_datastores"),
    )
    op.create_table(
        "data_assets",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("tags_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_data_assets"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
