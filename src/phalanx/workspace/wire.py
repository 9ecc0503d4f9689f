"""Job records as JSON and back: what the server sends and its clients rebuild.

The round trip is exact (``job_from_wire(job_to_wire(j)) == j``), so a client
renders a job read over HTTP with the same code as one read from its own
workspace.
"""

from __future__ import annotations

from typing import Any

from phalanx.workspace.joblist import JobPage
from phalanx.workspace.records import (
    AttemptRecord,
    AttemptStatus,
    FailureCause,
    JobRecord,
    JobStatus,
    RootCause,
)


def _error(data: dict[str, Any] | None) -> RootCause | None:
    return None if data is None else RootCause.from_dict(data)


def attempt_to_wire(a: AttemptRecord) -> dict[str, Any]:
    return {
        "number": a.number,
        "status": a.status.value,
        "started_at": a.started_at,
        "ended_at": a.ended_at,
        "cause": a.cause.value if a.cause else None,
        "exit_code": a.exit_code,
        "master_port": a.master_port,
        "note": a.note,
        "error": a.error.to_dict() if a.error else None,
        "nodes": list(a.nodes),
    }


def job_to_wire(job: JobRecord, logs: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The whole record; ``logs`` lists the job's log files (``JobPaths.log_files``)."""
    return {
        "name": job.name,
        "status": job.status.value,
        "experiment_name": job.experiment_name,
        "created_at": job.created_at,
        "spec": job.spec,
        "job_dir": job.job_dir or None,  # none: kept from a caller who may not read it
        "display_name": job.display_name,
        "description": job.description,
        "tags": job.tags,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "supervisor_pid": job.supervisor_pid,
        "supervisor_started": job.supervisor_started,
        "cancel_requested": job.cancel_requested,
        "error": job.error.to_dict() if job.error else None,
        "attempts": [attempt_to_wire(a) for a in job.attempts],
        "target": job.target,
        "queue": job.queue,
        "created_by": job.created_by,
        "logs": logs if logs is not None else job.logs,
        "params": job.params,
        "run_tags": job.run_tags,
        "parent": job.parent,
    }


def job_from_wire(data: dict[str, Any]) -> JobRecord:
    """The record a server sent.

    Raises:
        KeyError, ValueError: not a job record (a server of another version).
    """
    return JobRecord(
        name=data["name"],
        status=JobStatus(data["status"]),
        experiment_name=data["experiment_name"],
        created_at=data["created_at"],
        spec=data["spec"],
        job_dir=data.get("job_dir") or "",
        display_name=data.get("display_name"),
        description=data.get("description"),
        tags=data.get("tags") or {},
        started_at=data.get("started_at"),
        ended_at=data.get("ended_at"),
        supervisor_pid=data.get("supervisor_pid"),
        supervisor_started=data.get("supervisor_started"),
        cancel_requested=bool(data.get("cancel_requested")),
        error=_error(data.get("error")),
        attempts=tuple(
            AttemptRecord(
                job_name=data["name"],
                number=a["number"],
                status=AttemptStatus(a["status"]),
                started_at=a["started_at"],
                ended_at=a.get("ended_at"),
                cause=FailureCause(a["cause"]) if a.get("cause") else None,
                exit_code=a.get("exit_code"),
                master_port=a.get("master_port"),
                note=a.get("note"),
                error=_error(a.get("error")),
                nodes=tuple(a.get("nodes") or ()),
            )
            for a in data.get("attempts") or ()
        ),
        target=data.get("target") or "local",
        queue=data.get("queue"),
        created_by=data.get("created_by"),
        parent=data.get("parent"),
        logs=data.get("logs"),
        params=data.get("params"),
        run_tags=data.get("run_tags"),
    )


def page_to_wire(page: JobPage) -> dict[str, Any]:
    """A page of the job list (:class:`phalanx.workspace.joblist.JobPage`)."""
    return {
        "jobs": [job_to_wire(j) for j in page.jobs],
        "total": page.total,
        "start": page.start,
        "next": page.next,
        "prev": page.prev,
        "last": page.last,
    }


def page_from_wire(data: dict[str, Any]) -> JobPage:
    """The page a server sent (one from before pages: its jobs, as one page)."""
    jobs = [job_from_wire(item) for item in data["jobs"]]
    return JobPage(
        jobs=jobs,
        total=int(data.get("total", len(jobs))),
        start=int(data.get("start", 0)),
        next=data.get("next"),
        prev=data.get("prev"),
        last=data.get("last"),
    )
