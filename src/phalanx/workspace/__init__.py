"""The workspace: ``PHALANX_HOME``, its database (SQLite, or PostgreSQL) and one folder per job."""

from phalanx.workspace.layout import JobPaths, phalanx_home
from phalanx.workspace.records import (
    AttemptRecord,
    AttemptStatus,
    FailureCause,
    JobRecord,
    JobStatus,
    QueueEntry,
    RootCause,
)
from phalanx.workspace.store import Workspace

__all__ = [
    "AttemptRecord",
    "AttemptStatus",
    "FailureCause",
    "JobPaths",
    "JobRecord",
    "JobStatus",
    "QueueEntry",
    "RootCause",
    "Workspace",
    "phalanx_home",
]
