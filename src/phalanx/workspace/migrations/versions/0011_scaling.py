"""Schema 11: elastic compute: what the queue wants of each elastic Ray target's
cluster, what was asked of its autoscaler, and what the autoscaler reported.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "scaling",
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("wanted", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("wanted_at", sa.Double),
        sa.Column("requested", sa.Integer),
        sa.Column("requested_at", sa.Double),
        sa.Column("report_json", sa.Text),
        sa.Column("reported_at", sa.Double),
        sa.PrimaryKeyConstraint("target", name="pk_scaling"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
