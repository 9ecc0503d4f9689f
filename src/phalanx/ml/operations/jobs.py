"""``ml_client.jobs``: submit, read, list, stream, cancel and download jobs, command
jobs and sweeps (a sweep's trials are jobs whose parent is the sweep).

Every call goes through :class:`phalanx.service.jobs.Jobs`, the interface the
CLI's ``phalanx job`` commands use, on this machine's workspace or a server's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phalanx.errors import PhalanxError, SpecError
from phalanx.ml import sweepdict
from phalanx.ml.entities.job import Command
from phalanx.ml.entities.sweep_job import SweepJob
from phalanx.ml.errors import (
    COMMAND,
    SWEEP,
    JobFailed,
    MLError,
    argument_error,
    from_spec_error,
    in_python,
    surfaced_methods,
    unknown_keywords,
)
from phalanx.ml.notes import note
from phalanx.ml.records import job_from_record, sweep_from_record
from phalanx.ml.specdict import check_local_inputs, spec_text, validate
from phalanx.service.jobdownload import kept_elsewhere, output_rel
from phalanx.service.jobs import Jobs
from phalanx.studio.urls import studio_base
from phalanx.workspace import JobRecord, JobStatus
from phalanx.workspace.trials import SWEEP_TARGET

if TYPE_CHECKING:
    from phalanx.service.targets import Targets

# What `list()` reads at most, newest first, when no max_results is given.
LIST_LIMIT = 10000
# How often `stream()` of a sweep reads its trials.
SWEEP_POLL_S = 1.0

AnyJob = Command | SweepJob

_CREATE_KEYWORDS = ("description", "compute", "tags", "experiment_name", "skip_validation")
_LIST_KEYWORDS = ("parent_job_name", "list_view_type", "max_results", "experiment_name", "status")


class CancelPoller:
    """What ``begin_cancel`` returns. phalanx's cancel waits for the job's processes
    to end, so the poller is already done."""

    def __init__(self, job: AnyJob) -> None:
        self._job = job

    def result(self, timeout: float | None = None) -> None:
        """Nothing: the job is canceled (or had already ended)."""

    def wait(self, timeout: float | None = None) -> None:
        """Returns at once; the cancel is done."""

    def done(self) -> bool:
        return True

    def status(self) -> str:
        return "Succeeded"

    @property
    def job(self) -> AnyJob:
        """The job after the cancel (phalanx's own)."""
        return self._job


@surfaced_methods("jobs")
class JobOperations:
    """The job verbs of :class:`~phalanx.ml.MLClient`."""

    def __init__(
        self, backend: Jobs, server_url: str | None, targets: Callable[[], Targets]
    ) -> None:
        self._jobs = backend
        self._server_url = server_url
        self._targets = targets

    def _job(self, record: JobRecord) -> AnyJob:
        # The page is linked only where something serves it: the server, or a running
        # `phalanx studio` of this machine's workspace (whose folder `where` is).
        studio = studio_base(self._server_url, Path(self._jobs.where))
        if record.target == SWEEP_TARGET:
            name = record.name
            return sweep_from_record(record, studio, lambda: self._jobs.sweep(name))
        return job_from_record(record, studio)

    def create_or_update(
        self,
        job: AnyJob,
        *,
        description: str | None = None,
        compute: str | None = None,
        tags: dict[str, str] | None = None,
        experiment_name: str | None = None,
        skip_validation: bool = False,
        **kwargs: Any,
    ) -> AnyJob:
        """Submit ``job`` (a command job, or a sweep job from ``job.sweep(...)``); returns it
        as created (``name``, ``status`` ``Queued``, ``studio_url``).

        ``description``, ``compute``, ``tags`` and ``experiment_name`` replace the
        job's own, as in Azure ML. ``skip_validation`` is accepted; phalanx always
        validates. A job read back with ``get`` and given again with its ``name``
        is the job itself: it is returned as it is (phalanx cannot change a
        submitted job's tags, display name or description, and says so). With
        ``job.name = None`` it is a copy, submitted as a new job.

        Raises:
            MLError: the job does not validate, a compute target that does not exist,
                or an unknown keyword.
            PhalanxError: this workspace cannot run it.
        """
        where = "ml_client.jobs.create_or_update()"
        unknown_keywords(where, kwargs, _CREATE_KEYWORDS)
        if not isinstance(job, (Command, SweepJob)):
            raise argument_error(
                where, "job", "must be a job made by command(...) or a sweep job made by "
                f"job.sweep(...); got {type(job).__name__}",
            )  # fmt: skip
        for key, value in (("description", description), ("compute", compute),
                           ("experiment_name", experiment_name)):  # fmt: skip
            if value is not None:
                setattr(job, key, value)
        if tags is not None:
            job.tags = {**job.tags, **tags}
        if job.status is not None and job.name is not None:
            stored = self._stored(job.name)
            if stored is not None:
                return self._resubmitted(job, stored, where)
        if isinstance(job, SweepJob):
            check_local_inputs(job, sweepdict.validate(job), SWEEP)
            self._check_compute(job, SWEEP)
            text, renames, source = sweepdict.spec_text(job), {}, SWEEP
        else:
            check_local_inputs(job, validate(job))
            self._check_compute(job, COMMAND)
            text, renames, source = spec_text(job), job._renames, COMMAND
        try:
            submission = self._jobs.create(text)
        except SpecError as exc:
            if isinstance(exc, MLError):
                raise
            raise from_spec_error(exc, renames, source) from None
        for line in submission.notes:
            note(in_python(line))
        return self._job(submission.created())

    def _stored(self, name: str) -> AnyJob | None:
        """The job ``name`` if it exists (a job read back may be renamed to be a new one)."""
        try:
            return self._job(self._jobs.get(name))
        except PhalanxError:
            return None

    def _resubmitted(self, job: AnyJob, stored: AnyJob, where: str) -> AnyJob:
        """A job read back and given again with its name: Azure ML updates its tags,
        display name and description; phalanx keeps a submitted job as it was."""
        changed = [
            key
            for key in ("tags", "display_name", "description")
            if (getattr(job, key) or None) != (getattr(stored, key) or None)
        ]
        if changed:
            raise argument_error(
                where, changed[0], f"phalanx cannot change a submitted job's {', '.join(changed)} "
                f"(job {job.name}); to run it again with them, set job.name = None and submit it",
            )  # fmt: skip
        return stored

    def _check_compute(self, job: AnyJob, source: str = COMMAND) -> None:
        """A compute target named in the job exists, with the fix in Python if not."""
        from phalanx.compute.registry import kinds
        from phalanx.compute.targets import builtins

        given = job.compute or "local"
        compute = given.removeprefix("azureml:")
        inline = any(kind.inline(given) is not None for kind in kinds().values())
        if compute in builtins() or inline or "/" in compute:
            return  # this machine, or a target a kind names inline (a Ray address)
        known = [t["settings"]["name"] for t in self._targets().list_all()]
        if compute in known:
            return
        raise argument_error(
            source, "compute", f"compute target {compute!r} not found (known: "
            f"{', '.join(sorted({'local', *known}))}); use compute=\"local\", or create it with "
            f"ml_client.compute.begin_create_or_update(AmlCompute(name={compute!r}))",
        )  # fmt: skip

    def get(self, name: str) -> AnyJob:
        """The job ``name``, as it is now. A sweep is a
        :class:`~phalanx.ml.entities.SweepJob` whose ``properties["best_child_run_id"]``
        names its best trial's job so far, as in Azure ML (and whose ``trials`` and
        ``best_trial`` read its trials when asked).

        Raises:
            PhalanxError: no such job.
        """
        job = self._job(self._jobs.get(name))
        if isinstance(job, SweepJob):
            best = job.best_trial
            if best is not None:
                job.properties["best_child_run_id"] = best.job_name
        return job

    def list(
        self,
        parent_job_name: str | None = None,
        *,
        list_view_type: Any = None,
        max_results: int | None = None,
        experiment_name: str | None = None,
        status: str | None = None,
        **kwargs: Any,
    ) -> Iterator[AnyJob]:
        """The jobs, newest first; with ``parent_job_name``, the trials of that sweep (a
        command job has none). phalanx archives no jobs, so every ``list_view_type``
        lists them all.

        Raises:
            MLError: an unknown keyword or status.
            PhalanxError: no job ``parent_job_name``.
        """
        unknown_keywords("ml_client.jobs.list()", kwargs, _LIST_KEYWORDS)
        if parent_job_name is not None:
            self._jobs.get(parent_job_name)  # an unknown name is an error, not "no trials"
        wanted = None
        if status is not None:
            wanted = next((s for s in JobStatus if s.value.lower() == status.lower()), None)
            if wanted is None:
                known = ", ".join(s.value for s in JobStatus)
                raise argument_error(
                    "ml_client.jobs.list()", "status", f"must be one of {known}; got {status!r}"
                )
        records = self._jobs.list_jobs(
            limit=max_results or LIST_LIMIT,
            status=wanted,
            experiment=experiment_name,
            parent=parent_job_name,
        )
        return iter([self._job(r) for r in records])

    def stream(self, name: str) -> None:
        """Print rank 0's log as ``phalanx job stream`` does, until the job ends. A sweep
        has no log of its own: its trials are printed as they start and end, then its
        best trial (each trial's log: ``stream(trial_job_name)``).

        Raises:
            JobFailed: the job ended Failed or Canceled (as Azure ML's ``stream`` raises).
        """
        from rich.console import Console

        from phalanx.terminal.stream import stream_job

        first = self._jobs.get(name)
        if first.target == SWEEP_TARGET:
            from phalanx.ml.sweepstream import stream_sweep

            record = stream_sweep(self._jobs, name, SWEEP_POLL_S)
        else:
            record = stream_job(self._jobs, name, Console(), all_ranks=False)
        if record.status in (JobStatus.FAILED, JobStatus.CANCELED):
            cause = None if record.error is None else record.error.message.strip().splitlines()[-1]
            raise JobFailed(name, record.status.value, cause)

    def begin_cancel(self, name: str) -> CancelPoller:
        """Cancel the job: every process of it is stopped before this returns."""
        _, record = self._jobs.cancel(name)
        return CancelPoller(self._job(record))

    def cancel(self, name: str) -> AnyJob:
        """Cancel the job (phalanx's own shortcut for ``begin_cancel(name).job``)."""
        return self.begin_cancel(name).job

    def show_services(self, name: str, node_index: int = 0) -> dict[str, Any]:
        """The job's services; ``Studio`` is its web page."""
        return self.get(name).services

    def download(
        self,
        name: str,
        *,
        download_path: str | Path = ".",
        output_name: str | None = None,
        all: bool = False,
    ) -> None:
        """Download the job's files, laid out as Azure ML lays them out.

        ``artifacts/`` gets its logs (``user_logs/``) and its ``outputs/``
        folder; ``output_name`` downloads only that output into
        ``named-outputs/<output_name>``; ``all`` downloads both, every named
        output included. An output kept on a datastore (``path`` given) is read
        from there, not downloaded here.

        Raises:
            MLError: an output the job does not declare, or one kept on a datastore.
        """
        record = self._jobs.get(name)
        dest = Path(download_path)
        if output_name is not None:
            self._output(record, output_name, dest / "named-outputs")
            return
        artifacts = dest / "artifacts"
        for rel in ("user_logs", "outputs"):
            self._jobs.download(name, rel, artifacts)
        if all:
            elsewhere = kept_elsewhere(record)
            for key in record.spec.get("outputs") or {}:
                if key not in elsewhere:
                    self._output(record, key, dest / "named-outputs")

    def _output(self, record: JobRecord, output_name: str, dest: Path) -> None:
        """One output, as :mod:`phalanx.service.jobdownload` names and checks it."""
        try:
            rel = output_rel(record, output_name)
        except PhalanxError as exc:
            raise argument_error("ml_client.jobs.download()", "output_name", str(exc)) from None
        self._jobs.download(record.name, rel, dest)
