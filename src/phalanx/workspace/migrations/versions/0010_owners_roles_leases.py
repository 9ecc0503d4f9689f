"""Schema 10: a team's server: who owns each record, each token's role, and job leases.

- ``owner`` on datastores, data assets, models, environments and compute targets:
  the server's user who made it (``NULL`` for records made before, or on this
  machine: only an admin acts on those). A job's owner is its ``created_by``.
- ``tokens.role``: ``admin``, ``member`` or ``viewer``; tokens made before are
  admins, so a single user's server keeps working as it did.
- A job's lease (``lease_generation``, ``lease_holder``, ``lease_renewed_at``)
  and the generation each attempt ran under: a supervisor's state writes are
  checked against the generation it holds, so a job never has two.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"

OWNED = ("datastores", "data_assets", "models", "environments", "computes")


def upgrade() -> None:
    for table in OWNED:
        op.add_column(table, sa.Column("owner", sa.Text))
    op.add_column("tokens", sa.Column("role", sa.Text, nullable=False, server_default="admin"))
    op.add_column(
        "jobs",
        sa.Column("lease_generation", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.add_column("jobs", sa.Column("lease_holder", sa.Text))
    op.add_column("jobs", sa.Column("lease_renewed_at", sa.Double))
    op.add_column("attempts", sa.Column("generation", sa.Integer))


def downgrade() -> None:
    raise NotImplementedError("workspaces only move forward; restore a backup to go back")
