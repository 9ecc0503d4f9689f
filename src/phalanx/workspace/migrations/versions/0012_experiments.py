"""Schema 12: experiments made before any job names them (MLflow's
``create_experiment``, ``mlflow.set_experiment`` from a notebook).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    op.create_table(
        "experiments",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("created_by", sa.Text),
        sa.PrimaryKeyConstraint("name", name="pk_experiments"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
