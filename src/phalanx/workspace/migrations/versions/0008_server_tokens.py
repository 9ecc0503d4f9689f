"""Schema 8: the server: who created each job, and the API tokens (hashes only).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("created_by", sa.Text))
    op.create_table(
        "tokens",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("hash", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("last_used_at", sa.Double),
        sa.PrimaryKeyConstraint("name", name="pk_tokens"),
        sa.UniqueConstraint("hash", name="uq_tokens_hash"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
