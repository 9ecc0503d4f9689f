"""Schema 3: what followed each attempt (retried, or why not).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.add_column("attempts", sa.Column("note", sa.Text))


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
