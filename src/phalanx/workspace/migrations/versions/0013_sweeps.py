"""Schema 13: sweep jobs. A trial is a job with a parent (``jobs.parent_name``);
a sweep's search state is its ``sweeps`` row and one ``sweep_trials`` row per
trial, so a sweep whose controller was killed resumes without losing or
repeating a trial.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("parent_name", sa.Text))
    op.create_index("jobs_parent", "jobs", ["parent_name"])
    op.create_table(
        "sweeps",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("best_trial", sa.Integer),
        sa.Column("best_value", sa.Double),
        sa.Column("ended_reason", sa.Text),
        sa.Column("study_json", sa.Text),
        sa.PrimaryKeyConstraint("name", name="pk_sweeps"),
    )
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_name", sa.Text, nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("job_name", sa.Text, nullable=False),
        sa.Column("params_json", sa.Text, nullable=False),
        sa.Column("internal_json", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("value", sa.Double),
        sa.Column("reason", sa.Text),
        sa.Column("attrs_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("curve_json", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("ended_at", sa.Double),
        sa.PrimaryKeyConstraint("sweep_name", "number", name="pk_sweep_trials"),
    )


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
