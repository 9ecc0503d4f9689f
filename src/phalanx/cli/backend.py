"""Where the job verbs go: this machine's workspace, or a phalanx server.

:class:`LocalJobs` and :class:`~phalanx.client.jobs.RemoteJobs` offer the same
calls, so every ``phalanx job`` command is written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from phalanx.jobs.logs import LogFollower
from phalanx.workspace import JobRecord, JobStatus, Workspace
from phalanx.workspace.metrics import History


class Jobs(Protocol):
    where: str
    """What the jobs live in (a folder or a URL), for messages."""

    def create(
        self, spec_file: Path, overrides: tuple[str, ...], *, validate_only: bool = False
    ) -> JobRecord | dict[str, Any]: ...
    def get(self, name: str) -> JobRecord: ...
    def list_jobs(
        self, *, limit: int, status: JobStatus | None, experiment: str | None
    ) -> list[JobRecord]: ...
    def cancel(self, name: str) -> tuple[bool, JobRecord]: ...
    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord: ...
    def metrics(self, name: str) -> tuple[History, History]: ...
    def follower(self, name: str, *, all_ranks: bool) -> LogFollower: ...


class LocalJobs:
    """Jobs in this machine's workspace (``PHALANX_HOME``)."""

    def __init__(self) -> None:
        self.ws = Workspace()
        self.where = str(self.ws.home)

    def create(
        self, spec_file: Path, overrides: tuple[str, ...], *, validate_only: bool = False
    ) -> JobRecord | dict[str, Any]:
        from phalanx.cli.job import load_for_run
        from phalanx.jobs.control import submit

        spec, text = load_for_run(spec_file, overrides)
        if validate_only:
            return {
                "valid": True,
                "nodes": spec.instance_count,
                "processes_per_node": spec.process_count_per_instance,
                "compute": spec.compute,
            }
        return submit(self.ws, spec, text)

    def get(self, name: str) -> JobRecord:
        from phalanx.jobs.control import refresh

        return refresh(self.ws, self.ws.get_job(name))

    def list_jobs(
        self, *, limit: int, status: JobStatus | None, experiment: str | None
    ) -> list[JobRecord]:
        from phalanx.jobs.control import refresh

        jobs = self.ws.list_jobs(limit=limit, status=status, experiment=experiment)
        return [refresh(self.ws, j) for j in jobs]

    def cancel(self, name: str) -> tuple[bool, JobRecord]:
        from phalanx.jobs.control import cancel

        before = self.ws.get_job(name).status
        return before.is_terminal, cancel(self.ws, name)

    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord:
        from phalanx.jobs.control import preempt

        return preempt(self.ws, name, nodes)

    def metrics(self, name: str) -> tuple[History, History]:
        from phalanx.workspace.metrics import SYSTEM_METRICS_FILE, read_metrics

        job_dir = Path(self.ws.get_job(name).job_dir)
        return read_metrics(job_dir), read_metrics(job_dir, SYSTEM_METRICS_FILE)

    def follower(self, name: str, *, all_ranks: bool) -> LogFollower:
        return LogFollower(self.ws.paths(name), all_ranks=all_ranks)


def jobs_backend() -> Jobs:
    """The server's jobs when ``PHALANX_SERVER`` (or ``phalanx login``) names one, else local."""
    from phalanx.client.config import server_config

    config = server_config()
    if config is None:
        return LocalJobs()
    from phalanx.client.jobs import RemoteJobs

    return RemoteJobs(config)
