"""Schema 14: the job list at scale. Each job's tags get rows of their own
(``job_tags``, filled here from ``jobs.tags_json`` for the jobs already there),
and the list's filters (experiment, user, status) indexes that end with the
default order, so a filtered first page reads a few rows.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    op.create_index("jobs_experiment", "jobs", ["experiment_name", "created_at"])
    op.create_index("jobs_user", "jobs", ["created_by", "created_at"])
    op.create_index("jobs_status_created", "jobs", ["status", "created_at"])
    job_tags = op.create_table(
        "job_tags",
        sa.Column("job_name", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("job_name", "key", name="pk_job_tags"),
        sa.ForeignKeyConstraint(
            ["job_name"], ["jobs.name"], name="fk_job_tags_job_name", ondelete="CASCADE"
        ),
    )
    op.create_index("job_tags_key_value", "job_tags", ["key", "value"])
    rows = []
    for name, tags_json in op.get_bind().execute(sa.text("SELECT name, tags_json FROM jobs")):
        tags = json.loads(tags_json or "{}")
        # The same rows phalanx.workspace.joblist.tag_rows writes for a new job.
        rows += [
            {"job_name": name, "key": str(k), "value": v if isinstance(v, str) else json.dumps(v)}
            for k, v in (tags.items() if isinstance(tags, dict) else ())
        ]
    if rows:
        op.bulk_insert(job_tags, rows)


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
