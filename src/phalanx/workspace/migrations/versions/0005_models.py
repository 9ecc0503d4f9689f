"""Schema 5: the model registry.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("job_name", sa.Text),
        sa.Column("files_json", sa.Text, nullable=False),
        sa.Column("metrics_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("description", sa.Text),
        sa.Column("tags_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_models"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
