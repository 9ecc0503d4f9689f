"""What the workspace stores about a job and its attempts."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class JobStatus(str, enum.Enum):
    """A job's lifecycle, with Azure ML's state names."""

    QUEUED = "Queued"
    PREPARING = "Preparing"
    RUNNING = "Running"
    FINALIZING = "Finalizing"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    def __str__(self) -> str:
        return self.value


_TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED})


class AttemptStatus(str, enum.Enum):
    """One try at running the whole gang of processes."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELED = "Canceled"

    def __str__(self) -> str:
        return self.value


class FailureCause(str, enum.Enum):
    """Why an attempt ended without success."""

    USER_ERROR = "user_error"
    INFRASTRUCTURE = "infrastructure"
    PREEMPTION = "preemption"
    HANG = "hang"
    TIMEOUT = "timeout"
    CANCELED = "canceled"
    SYSTEM_ERROR = "system_error"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RootCause:
    """The first process failure of an attempt, which the others followed.

    ``rank`` is ``None`` when no worker started (the node launcher itself failed).
    """

    message: str
    rank: int | None = None
    node_rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    traceback: str | None = None
    log_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RootCause:
        known: dict[str, Any] = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class AttemptRecord:
    job_name: str
    number: int
    status: AttemptStatus
    started_at: float
    ended_at: float | None = None
    cause: FailureCause | None = None
    exit_code: int | None = None
    master_port: int | None = None
    note: str | None = None
    """What followed: retried, or why not (the retry policy's reason)."""
    error: RootCause | None = None
    nodes: tuple[dict[str, Any], ...] = ()
    """Each node's host and devices (``{"host", "gpus", "cpus"}``), in node order."""
    generation: int | None = None
    """The job's lease generation its supervisor held (``None`` before leases)."""


@dataclass(frozen=True)
class QueueEntry:
    """What the scheduler keeps of a job: its target and what it asks for."""

    target: str = "local"
    request: dict[str, Any] | None = None
    """``{"nodes", "gpus", "cpus"}`` per node (see :mod:`phalanx.scheduler.request`)."""
    priority: int = 2
    tier: int = 3
    timeout: float | None = None
    """``limits.timeout``: the longest the job runs, which backfilling counts on."""


@dataclass(frozen=True)
class JobRecord:
    name: str
    status: JobStatus
    experiment_name: str
    created_at: float
    spec: dict[str, Any]
    job_dir: str
    """The job's folder; empty in a record a server sent to a caller who may not read
    its paths (:mod:`phalanx.service.masks`)."""
    display_name: str | None = None
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    supervisor_pid: int | None = None
    supervisor_started: float | None = None
    cancel_requested: bool = False
    error: RootCause | None = None
    attempts: tuple[AttemptRecord, ...] = ()
    target: str = "local"
    """The compute target whose queue it is in."""
    queue: dict[str, Any] | None = None
    """Where the job stands, as the front ends show it. While Queued: ``{"position",
    "reason", "start"}`` as the scheduler last saw it. While Preparing, what its
    supervisor is doing (a build, a pull, a wait for another job's build):
    ``{"reason", "since", "progress", "log"}``: the step's sentence, when it began, its
    output's last line and its log in the job's folder (:mod:`phalanx.jobs.preparing`)."""
    created_by: str | None = None
    """The server user who submitted it; ``None`` when submitted on this machine."""
    logs: dict[str, list[str]] | None = None
    """Read over the API only: the server's ``user_logs``/``system_logs`` file lists
    (a client cannot look into the job folder)."""
    params: dict[str, str] | None = None
    """Read from the job's folder (not the database): the params its MLflow run logged."""
    run_tags: dict[str, str] | None = None
    """Likewise, the tags its MLflow run set (shown over the spec's ``tags``)."""
    lease_generation: int = 0
    """Raised by one each time a supervisor takes the job (:mod:`phalanx.workspace.leases`)."""
    lease_holder: str | None = None
    """``HOST:PID`` of the supervisor holding the lease; ``None`` when free."""
    lease_renewed_at: float | None = None
    """When the holder last renewed it (its clock)."""
    parent: str | None = None
    """The sweep job this job is a trial of (:mod:`phalanx.sweep`)."""

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        import time

        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)
