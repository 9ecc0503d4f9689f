"""Schema 1: jobs and their attempts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("display_name", sa.Text),
        sa.Column("experiment_name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("tags_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("started_at", sa.Double),
        sa.Column("ended_at", sa.Double),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("supervisor_pid", sa.Integer),
        sa.Column("supervisor_started", sa.Double),
        sa.Column("cancel_requested", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("error_json", sa.Text),
        sa.PrimaryKeyConstraint("name", name="pk_jobs"),
    )
    op.create_index("jobs_created", "jobs", ["created_at"])
    op.create_table(
        "attempts",
        sa.Column("job_name", sa.Text, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("cause", sa.Text),
        sa.Column("exit_code", sa.Integer),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("ended_at", sa.Double),
        sa.Column("master_port", sa.Integer),
        sa.Column("error_json", sa.Text),
        sa.PrimaryKeyConstraint("job_name", "number", name="pk_attempts"),
        sa.ForeignKeyConstraint(
            ["job_name"], ["jobs.name"], name="fk_attempts_job_name", ondelete="CASCADE"
        ),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
