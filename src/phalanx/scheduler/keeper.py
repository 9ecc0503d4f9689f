"""What the scheduler asks of the layer that runs jobs.

The scheduler decides who runs where; it does not know how a job is run. Each
round it needs four things done to jobs, and the jobs layer does them
(:mod:`phalanx.jobs.control` is the keeper the scheduler's process is given,
:mod:`phalanx.jobs.schedulerd`). So the scheduler imports nothing of
:mod:`phalanx.jobs`, and a test may give it a keeper of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from phalanx.workspace import JobRecord, Workspace


class JobKeeper(Protocol):
    """The jobs layer's side of a scheduling round."""

    def supervisor_alive(self, job: JobRecord) -> bool:
        """Whether the job's supervisor still runs, as far as this machine can tell."""
        ...

    def recover_lost(self, ws: Workspace, job: JobRecord, *, expired: bool = False) -> None:
        """End what a lost supervisor left (processes, mounts, attempt), then retry or fail.

        ``expired``: the supervisor is of another machine and its lease went
        unrenewed, rather than its process being gone from this one.
        """
        ...

    def fill_queue_entry(self, ws: Workspace, name: str) -> None:
        """Record what a job that has no queue entry yet asks for (its spec read again)."""
        ...

    def spawn_supervisor(
        self, ws: Workspace, name: str, env: Mapping[str, str] | None = None
    ) -> int:
        """Start the job's supervisor, detached, in ``env`` (the one its submitter handed
        over; this process's when ``None``); the pid of the process started."""
        ...
