"""Schema 7: the scheduler: what each job asks for, its place in the queue, what it holds.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("target", sa.Text))
    op.add_column("jobs", sa.Column("request_json", sa.Text))
    op.add_column("jobs", sa.Column("priority", sa.Integer))
    op.add_column("jobs", sa.Column("tier", sa.Integer))
    op.add_column("jobs", sa.Column("timeout", sa.Double))
    op.add_column("jobs", sa.Column("queue_json", sa.Text))
    op.add_column("attempts", sa.Column("nodes_json", sa.Text))
    op.create_index("jobs_status", "jobs", ["status"], if_not_exists=True)
    op.create_table(
        "allocations",
        sa.Column("job_name", sa.Text, nullable=False),
        sa.Column("node", sa.Integer, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("gpus_json", sa.Text, nullable=False),
        sa.Column("cpus", sa.Double, nullable=False),
        sa.Column("memory", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("granted_at", sa.Double, nullable=False),
        sa.Column("releasing_at", sa.Double),
        sa.PrimaryKeyConstraint("job_name", "node", name="pk_allocations"),
        sa.ForeignKeyConstraint(
            ["job_name"], ["jobs.name"], name="fk_allocations_job_name", ondelete="CASCADE"
        ),
    )
    op.create_table(
        "capacities",
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("hosts_json", sa.Text, nullable=False),
        sa.Column("read_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("target", name="pk_capacities"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
