"""The job verbs against a server: what ``phalanx job …`` calls with ``PHALANX_SERVER`` set."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from phalanx.client.bundle import bundle_spec
from phalanx.client.config import ServerConfig
from phalanx.client.http import ServerClient
from phalanx.client.logs import RemoteLogFollower
from phalanx.service.jobfiles import Landed
from phalanx.service.jobs import SpecText, Submission
from phalanx.workspace import JobRecord, JobStatus
from phalanx.workspace.joblist import JobPage, JobQuery
from phalanx.workspace.metrics import History
from phalanx.workspace.trials import SweepView, view_from_wire
from phalanx.workspace.wire import job_from_wire, page_from_wire

# Cancel waits for the job's processes to end (up to 30 s on the server).
CANCEL_TIMEOUT_S = 90.0


class RemoteJobs:
    """Jobs in a server's workspace."""

    def __init__(self, config: ServerConfig) -> None:
        self.client = ServerClient(config)
        self.where = config.url
        self.remote = True

    def create(
        self, spec: SpecText, overrides: Sequence[str] = (), *, validate_only: bool = False
    ) -> Submission:
        """Validate here (errors name the file's lines), then send the spec and its files."""
        loaded = spec.load(overrides)
        with tempfile.TemporaryDirectory(prefix="phalanx-upload-") as tmp:
            bundle = bundle_spec(loaded, Path(tmp))
            upload = None
            if bundle.archive is not None:
                with open(bundle.archive, "rb") as f:
                    upload = self.client.request(
                        "PUT",
                        "/uploads",
                        content=f,
                        headers={"content-type": "application/x-tar"},
                        idempotent=False,
                        timeout=3600.0,
                    )["upload"]
        body = {
            "spec": spec.text,
            "source": spec.source,
            "overrides": list(overrides),
            "upload": upload,
            "places": bundle.places,
            "validate_only": validate_only,
        }
        answer = self.client.request("POST", "/jobs", json=body, idempotent=False)
        notes = [str(n) for n in answer.pop("notes", None) or []]
        if validate_only:
            return Submission(validation=answer, notes=notes)
        return Submission(job=job_from_wire(answer), notes=notes)

    def get(self, name: str) -> JobRecord:
        return job_from_wire(self.client.request("GET", f"/jobs/{name}"))

    def list_jobs(
        self,
        *,
        limit: int,
        status: JobStatus | None,
        experiment: str | None,
        parent: str | None = None,
    ) -> list[JobRecord]:
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status.value
        if experiment is not None:
            params["experiment"] = experiment
        if parent is not None:
            params["parent"] = parent
        answer = self.client.request("GET", "/jobs", params=params)
        return [job_from_wire(item) for item in answer["jobs"]]

    def page(self, query: JobQuery) -> JobPage:
        params: dict[str, Any] = {"limit": query.limit, "sort": query.sort}
        params["order"] = "desc" if query.descending else "asc"
        params["status"] = [s.value for s in query.statuses]
        params["tag"] = [key if value is None else f"{key}={value}" for key, value in query.tags]
        for key in ("experiment", "user", "text", "parent", "cursor"):
            if getattr(query, key) is not None:
                params[key] = getattr(query, key)
        if query.trials:
            params["trials"] = "true"
        return page_from_wire(self.client.request("GET", "/jobs", params=params))

    def sweep(self, name: str) -> SweepView:
        return view_from_wire(self.client.request("GET", f"/jobs/{name}/sweep"))

    def cancel(self, name: str) -> tuple[bool, JobRecord]:
        answer = self.client.request("POST", f"/jobs/{name}/cancel", timeout=CANCEL_TIMEOUT_S)
        return bool(answer["already_ended"]), job_from_wire(answer["job"])

    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord:
        return job_from_wire(
            self.client.request("POST", f"/jobs/{name}/preempt", json={"nodes": nodes})
        )

    def metrics(self, name: str) -> tuple[History, History]:
        answer = self.client.request("GET", f"/jobs/{name}/metrics")

        def history(raw: dict[str, list[list[Any]]]) -> History:
            return {k: [(s, v) for s, v in points] for k, points in raw.items()}

        return history(answer["metrics"]), history(answer["system"])

    def follower(self, name: str, *, all_ranks: bool, timed: bool = False) -> RemoteLogFollower:
        return RemoteLogFollower.of(self.client, name, all_ranks=all_ranks, timed=timed)

    def download(self, name: str, rel: str, dest: Path) -> Landed | None:
        """Download ``rel`` of job ``name``'s folder into ``dest`` (see :func:`fetch`)."""
        from phalanx.client.jobfiles import fetch

        self.get(name)  # an unknown job is an error, not "nothing there"
        return fetch(self.client, name, rel, dest)
