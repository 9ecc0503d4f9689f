"""The job verbs: the interface every front end calls, and its workspace side.

:class:`Jobs` is what the CLI's ``phalanx job …`` commands and the SDK's
``ml_client.jobs`` call; :class:`LocalJobs` answers it from this machine's
workspace (``PHALANX_HOME``) and :class:`phalanx.client.jobs.RemoteJobs` from a
server, so every verb is written once. :func:`phalanx.client.backends.jobs_backend`
picks one.

A job is created from :class:`SpecText`: the YAML text, the name its errors
carry, and the folder its relative paths resolve against. The CLI reads it
from ``-f job.yml``; the SDK dumps what ``command(...)`` built.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.jobs.logs import LogFollower
from phalanx.workspace import JobRecord, JobStatus, Workspace
from phalanx.workspace.metrics import History

if TYPE_CHECKING:
    from phalanx.spec import JobSpec


@dataclass(frozen=True)
class SpecText:
    """A job spec as YAML text, with where it came from."""

    text: str
    """The YAML document."""
    source: str
    """What errors name: the spec file, or ``command()`` for the SDK."""
    base_dir: Path
    """The folder relative paths (``code``, local inputs) resolve against."""

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> SpecText:
        """The spec file at ``path``; its relative paths resolve against its folder.

        Raises:
            PhalanxError: The file does not exist or cannot be read.
        """
        from phalanx.spec.loader import read_spec_file

        text = read_spec_file(path)
        return cls(text, str(path), Path(path).absolute().parent)

    def load(self, overrides: Sequence[str] = ()) -> JobSpec:
        """Validate it (``--set`` items applied) and refuse what phalanx cannot run.

        Raises:
            SpecError: The spec is invalid.
        """
        from phalanx.spec import load_spec_text

        spec = load_spec_text(
            self.text, source=self.source, base_dir=self.base_dir, overrides=overrides
        )
        spec.check_supported()
        return spec


@dataclass
class Submission:
    """What :meth:`Jobs.create` answers."""

    job: JobRecord | None = None
    """The job created (Queued); ``None`` when only validating."""
    validation: dict[str, Any] | None = None
    """With ``validate_only``: ``valid``, ``nodes``, ``processes_per_node``, ``compute``."""
    notes: list[str] = field(default_factory=list)
    """What the job will not get here (e.g. a recorded environment), one sentence each;
    the front end shows them (the CLI as ``note:`` lines)."""

    def created(self) -> JobRecord:
        """The job; a bug to ask for when only validating."""
        if self.job is None:
            raise ValueError("validate_only submission has no job")
        return self.job


class Jobs(Protocol):
    """The job verbs, on this machine's workspace or a server's."""

    where: str
    """What the jobs live in (a folder or a URL), for messages."""

    def create(
        self, spec: SpecText, overrides: Sequence[str] = (), *, validate_only: bool = False
    ) -> Submission: ...
    def get(self, name: str) -> JobRecord: ...
    def list_jobs(
        self, *, limit: int, status: JobStatus | None, experiment: str | None
    ) -> list[JobRecord]: ...
    def cancel(self, name: str) -> tuple[bool, JobRecord]: ...
    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord: ...
    def metrics(self, name: str) -> tuple[History, History]: ...
    def follower(self, name: str, *, all_ranks: bool) -> LogFollower: ...
    def download(self, name: str, rel: str, dest: Path) -> Path | None: ...


def validation_of(spec: JobSpec) -> dict[str, Any]:
    """What ``job validate`` reports of a valid spec."""
    return {
        "valid": True,
        "nodes": spec.instance_count,
        "processes_per_node": spec.process_count_per_instance,
        "compute": spec.compute,
    }


def load_for_run(
    spec_text: SpecText, overrides: Sequence[str], ws: Workspace
) -> tuple[JobSpec, str, list[str]]:
    """Load, validate and check that this workspace can run the spec.

    Returns:
        The spec, the YAML text to keep in the job folder (``--set`` items
        appended as comments) and the notes to show the user.
    """
    from phalanx.jobs.prepare import check, with_registered_environment
    from phalanx.launch.environment import environment_notes

    spec = spec_text.load(overrides)
    check(spec, ws)
    environment = with_registered_environment(spec, ws).environment
    text = spec.text or ""
    if overrides:
        text += "".join(f"\n# --set {item}" for item in overrides) + "\n"
    return spec, text, environment_notes(environment)


class LocalJobs:
    """Jobs in this machine's workspace (``PHALANX_HOME``)."""

    def __init__(self, ws: Workspace | None = None) -> None:
        self.ws = ws if ws is not None else Workspace()
        self.where = str(self.ws.home)

    def create(
        self, spec: SpecText, overrides: Sequence[str] = (), *, validate_only: bool = False
    ) -> Submission:
        from phalanx.jobs.control import submit

        loaded, text, notes = load_for_run(spec, overrides, self.ws)
        if validate_only:
            return Submission(validation=validation_of(loaded), notes=notes)
        return Submission(job=submit(self.ws, loaded, text), notes=notes)

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

    def download(self, name: str, rel: str, dest: Path) -> Path | None:
        """Copy ``rel`` of job ``name``'s folder into the folder ``dest`` (links left out,
        as a server sends it); where it landed, or ``None`` when the job has nothing there.

        Raises:
            PhalanxError: an unknown job, or an unsafe path.
        """
        from phalanx.service.jobfiles import NoSuchPath, job_path

        try:
            source = job_path(self.ws, name, rel)
        except NoSuchPath:
            return None
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / source.name
        if source.is_file():
            shutil.copy2(source, target)
        else:
            shutil.copytree(source, target, ignore=_links, dirs_exist_ok=True)
        return target


def _links(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if os.path.islink(os.path.join(folder, n))}
