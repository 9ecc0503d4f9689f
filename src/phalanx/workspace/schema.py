"""The workspace database's tables, as the newest migration leaves them.

This is the schema in one place: a new database is created from it (and
stamped with the newest revision), and a test checks that the migrations in
:mod:`phalanx.workspace.migrations` build exactly the same tables on SQLite and
PostgreSQL. Change both together: a new column here is a new revision there,
and :data:`phalanx.workspace.migrate.SCHEMA_VERSION` its number.

Values that are JSON are kept as text (``*_json``), so both backends hold the
same bytes. Times are seconds since the epoch in a double (PostgreSQL's
``REAL`` would keep only 24 bits of them).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("name", Text, nullable=False),
    Column("display_name", Text),
    Column("experiment_name", Text, nullable=False),
    Column("description", Text),
    Column("tags_json", Text, nullable=False, server_default="{}"),
    Column("status", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("started_at", Double),
    Column("ended_at", Double),
    Column("spec_json", Text, nullable=False),
    Column("supervisor_pid", Integer),
    Column("supervisor_started", Double),
    Column("cancel_requested", Integer, nullable=False, server_default=text("0")),
    Column("error_json", Text),
    Column("preempt_json", Text),  # schema 2
    # The scheduler's part (schema 7): what the job asks of which target, its queue place.
    Column("target", Text),
    Column("request_json", Text),
    Column("priority", Integer),
    Column("tier", Integer),
    Column("timeout", Double),
    Column("queue_json", Text),
    Column("created_by", Text),  # schema 8: its owner
    # Schema 10: the lease of the supervisor that runs it (fencing of its state writes).
    Column("lease_generation", Integer, nullable=False, server_default=text("0")),
    Column("lease_holder", Text),
    Column("lease_renewed_at", Double),
    Column("parent_name", Text),  # schema 13: the sweep a trial is of
    PrimaryKeyConstraint("name", name="pk_jobs"),
)
Index("jobs_created", jobs.c.created_at)
Index("jobs_status", jobs.c.status)
Index("jobs_parent", jobs.c.parent_name)
# Schema 14: the job list's filters, each with the default order after it.
Index("jobs_experiment", jobs.c.experiment_name, jobs.c.created_at)
Index("jobs_user", jobs.c.created_by, jobs.c.created_at)
Index("jobs_status_created", jobs.c.status, jobs.c.created_at)

job_tags = Table(  # schema 14: a job's tags (its spec's `tags`), one row each, to filter by
    "job_tags",
    metadata,
    Column("job_name", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("value", Text, nullable=False),
    PrimaryKeyConstraint("job_name", "key", name="pk_job_tags"),
    ForeignKeyConstraint(
        ["job_name"], ["jobs.name"], name="fk_job_tags_job_name", ondelete="CASCADE"
    ),
)
Index("job_tags_key_value", job_tags.c.key, job_tags.c.value)

attempts = Table(
    "attempts",
    metadata,
    Column("job_name", Text, nullable=False),
    Column("number", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("cause", Text),
    Column("exit_code", Integer),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double),
    Column("master_port", Integer),
    Column("error_json", Text),
    Column("note", Text),  # schema 3
    Column("nodes_json", Text),  # schema 7
    Column("generation", Integer),  # schema 10: the job's lease generation it ran under
    PrimaryKeyConstraint("job_name", "number", name="pk_attempts"),
    ForeignKeyConstraint(
        ["job_name"], ["jobs.name"], name="fk_attempts_job_name", ondelete="CASCADE"
    ),
)

datastores = Table(
    "datastores",
    metadata,
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("owner", Text),  # schema 10: the server user who made it
    PrimaryKeyConstraint("name", name="pk_datastores"),
)

data_assets = Table(
    "data_assets",
    metadata,
    Column("name", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("description", Text),
    Column("tags_json", Text, nullable=False, server_default="{}"),
    Column("created_at", Double, nullable=False),
    Column("owner", Text),  # schema 10: the server user who made it
    PrimaryKeyConstraint("name", "version", name="pk_data_assets"),
)

models = Table(
    "models",
    metadata,
    Column("name", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("source", Text, nullable=False),
    Column("job_name", Text),
    Column("files_json", Text, nullable=False),
    Column("metrics_json", Text, nullable=False, server_default="{}"),
    Column("description", Text),
    Column("tags_json", Text, nullable=False, server_default="{}"),
    Column("created_at", Double, nullable=False),
    Column("owner", Text),  # schema 10: the server user who made it
    PrimaryKeyConstraint("name", "version", name="pk_models"),
)

computes = Table(
    "computes",
    metadata,
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("config_json", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("owner", Text),  # schema 10: the server user who made it
    PrimaryKeyConstraint("name", name="pk_computes"),
)

allocations = Table(
    "allocations",
    metadata,
    Column("job_name", Text, nullable=False),
    Column("node", Integer, nullable=False),
    Column("target", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("gpus_json", Text, nullable=False),
    Column("cpus", Double, nullable=False),
    Column("memory", BigInteger, nullable=False, server_default=text("0")),  # bytes
    Column("granted_at", Double, nullable=False),
    Column("releasing_at", Double),
    PrimaryKeyConstraint("job_name", "node", name="pk_allocations"),
    ForeignKeyConstraint(
        ["job_name"], ["jobs.name"], name="fk_allocations_job_name", ondelete="CASCADE"
    ),
)

capacities = Table(
    "capacities",
    metadata,
    Column("target", Text, nullable=False),
    Column("hosts_json", Text, nullable=False),
    Column("read_at", Double, nullable=False),
    PrimaryKeyConstraint("target", name="pk_capacities"),
)

scaling = Table(
    "scaling",
    metadata,
    Column("target", Text, nullable=False),
    Column("wanted", Integer, nullable=False, server_default=text("0")),  # worker nodes
    Column("wanted_at", Double),
    Column("requested", Integer),  # worker nodes last asked of the autoscaler
    Column("requested_at", Double),  # when that request was first sent
    Column("report_json", Text),  # the autoscaler's pending and failed nodes, its trouble
    Column("reported_at", Double),
    PrimaryKeyConstraint("target", name="pk_scaling"),
)

experiments = Table(  # schema 12: made by MLflow's create_experiment before any job
    "experiments",
    metadata,
    Column("name", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("created_by", Text),
    PrimaryKeyConstraint("name", name="pk_experiments"),
)

sweeps = Table(  # schema 13: a sweep job's own state (phalanx.sweep)
    "sweeps",
    metadata,
    Column("name", Text, nullable=False),
    Column("restarts", Integer, nullable=False, server_default=text("0")),
    Column("best_trial", Integer),
    Column("best_value", Double),
    Column("ended_reason", Text),
    Column("study_json", Text),  # the sampler's own state (a Sobol sequence's place)
    PrimaryKeyConstraint("name", name="pk_sweeps"),
)

sweep_trials = Table(  # schema 13: one row per trial, written before its job is made
    "sweep_trials",
    metadata,
    Column("sweep_name", Text, nullable=False),
    Column("number", Integer, nullable=False),
    Column("job_name", Text, nullable=False),
    Column("params_json", Text, nullable=False),
    Column("internal_json", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("value", Double),
    Column("reason", Text),
    Column("attrs_json", Text, nullable=False, server_default="{}"),
    Column("curve_json", Text),
    Column("created_at", Double, nullable=False),
    Column("ended_at", Double),
    PrimaryKeyConstraint("sweep_name", "number", name="pk_sweep_trials"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("name", Text, nullable=False),
    Column("user_name", Text, nullable=False),
    Column("hash", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("last_used_at", Double),
    Column("role", Text, nullable=False, server_default="admin"),  # schema 10
    PrimaryKeyConstraint("name", name="pk_tokens"),
    UniqueConstraint("hash", name="uq_tokens_hash"),
)

environments = Table(
    "environments",
    metadata,
    Column("name", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("description", Text),
    Column("tags_json", Text, nullable=False, server_default="{}"),
    Column("created_at", Double, nullable=False),
    Column("owner", Text),  # schema 10: the server user who made it
    PrimaryKeyConstraint("name", "version", name="pk_environments"),
)

# Alembic's own record of the revision, as Alembic creates it: a new database is
# stamped by writing it here, without loading Alembic.
alembic_version = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)
