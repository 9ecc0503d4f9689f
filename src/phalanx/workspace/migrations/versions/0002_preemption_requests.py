"""Schema 2: a job's pending preemption request.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("preempt_json", sa.Text))


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
