"""The job verbs: the interface every front end calls, and its workspace side.

:class:`Jobs` is what the CLI's ``phalanx job …`` commands and the SDK's
``ml_client.jobs`` call; :class:`LocalJobs` answers it from this machine's
workspace (``PHALANX_HOME``) and :class:`phalanx.client.jobs.RemoteJobs` from a
server, so every verb is written once. :func:`phalanx.client.backends.jobs_backend`
picks one.

A job is created from :class:`SpecText`: the YAML text, the name its errors
carry, and the folder its relative paths resolve against. The CLI reads it
from ``-f job.yml``; the SDK dumps what ``command(...)`` built; the server
adds where it unpacked the files the client uploaded with it.

:class:`LocalJobs` answers a :class:`~phalanx.service.access.Caller`: on this
machine the workspace's own user; on a server, the request's user and role.
Every caller reads every job (the team's work is visible to the team), as
:mod:`phalanx.service.masks` shows it: the values of a spec's environment
variables to its owner and admins only, the server's paths to admins only; a
viewer changes nothing; a member creates jobs and cancels or preempts its
own; an admin acts on anyone's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from phalanx.jobs.logs import LogFollower
from phalanx.service.access import LOCAL, Caller
from phalanx.service.masks import ServerPlaces, job_for, sees_values, spec_for
from phalanx.workspace import JobRecord, JobStatus, Workspace
from phalanx.workspace.joblist import JobPage, JobQuery
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.metrics import History, Timeline
from phalanx.workspace.trials import SweepView

if TYPE_CHECKING:
    from phalanx.service.jobfiles import Landed
    from phalanx.spec import JobSpec, SweepSpec


@dataclass(frozen=True)
class SpecText:
    """A job spec as YAML text, with where it came from."""

    text: str
    """The YAML document."""
    source: str
    """What errors name: the spec file, or ``command()`` for the SDK."""
    base_dir: Path
    """The folder relative paths (``code``, local inputs) resolve against."""
    placed: tuple[str, ...] = ()
    """``field=path`` items that point the spec at files uploaded with it (a server
    sets them): applied like ``--set`` items, but not recorded as the user's."""
    _loaded: dict[tuple[str, ...], JobSpec | SweepSpec] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    """What :meth:`load` gave, by overrides: a front end that validates and then
    creates the same text parses it once."""

    @property
    def placed_fields(self) -> frozenset[str]:
        """The spec fields :attr:`placed` points at uploaded files."""
        return frozenset(item.partition("=")[0] for item in self.placed)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> SpecText:
        """The spec file at ``path``; its relative paths resolve against its folder.

        Raises:
            PhalanxError: The file does not exist or cannot be read.
        """
        from phalanx.spec.loader import read_spec_file

        text = read_spec_file(path)
        return cls(text, str(path), Path(path).absolute().parent)

    def load(self, overrides: Sequence[str] = ()) -> JobSpec | SweepSpec:
        """Validate it (``--set`` items applied) and refuse what phalanx cannot run.

        Raises:
            SpecError: The spec is invalid.
        """
        from phalanx.spec import load_any_text

        key = tuple(overrides)
        if key not in self._loaded:
            spec = load_any_text(
                self.text,
                source=self.source,
                base_dir=self.base_dir,
                overrides=[*overrides, *self.placed],
            )
            spec.check_supported()
            self._loaded[key] = spec
        return self._loaded[key].model_copy(deep=True)  # a caller may change its copy


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
    remote: bool
    """Whether they live on a server: its disk's paths mean nothing to this machine, so
    a job's files are named by URI and fetched with ``phalanx job download``."""

    def create(
        self, spec: SpecText, overrides: Sequence[str] = (), *, validate_only: bool = False
    ) -> Submission: ...
    def get(self, name: str) -> JobRecord: ...
    def list_jobs(
        self,
        *,
        limit: int,
        status: JobStatus | None,
        experiment: str | None,
        parent: str | None = None,
    ) -> list[JobRecord]: ...
    def page(self, query: JobQuery) -> JobPage: ...
    def sweep(self, name: str) -> SweepView: ...
    def cancel(self, name: str) -> tuple[bool, JobRecord]: ...
    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord: ...
    def metrics(self, name: str) -> tuple[History, History]: ...
    def follower(self, name: str, *, all_ranks: bool, timed: bool = False) -> LogFollower: ...
    def download(self, name: str, rel: str, dest: Path) -> Landed | None: ...


def validation_of(spec: JobSpec | SweepSpec) -> dict[str, Any]:
    """What ``job validate`` reports of a valid spec (of a sweep: of each trial, and
    how many)."""
    from phalanx.spec import SweepSpec

    if isinstance(spec, SweepSpec):
        trial = spec.template()
        return {
            "valid": True,
            "type": "sweep",
            "nodes": trial.instance_count,
            "processes_per_node": trial.process_count_per_instance,
            "compute": spec.compute,
            "max_total_trials": spec.max_total_trials,
            "max_concurrent_trials": spec.max_concurrent_trials,
        }
    return {
        "valid": True,
        "nodes": spec.instance_count,
        "processes_per_node": spec.process_count_per_instance,
        "compute": spec.compute,
    }


def load_for_run(
    spec_text: SpecText, overrides: Sequence[str], ws: Workspace, caller: Caller = LOCAL
) -> tuple[JobSpec | SweepSpec, str, list[str]]:
    """Load, validate and check that this workspace can run the spec for ``caller``.

    A sweep is checked as its trials will be: its trial with every value at a
    representative point (:meth:`~phalanx.spec.SweepSpec.template`).

    Returns:
        The spec, the YAML text to keep in the job folder (``--set`` items
        appended as comments) and the notes to show the user.

    Raises:
        SpecError: the spec is invalid.
        Forbidden: it names what the caller may not make the server read or write
            (:mod:`phalanx.service.reach`), or registers under another's name.
    """
    from phalanx.environments.pythonenv import environment_notes
    from phalanx.errors import Forbidden, SpecError
    from phalanx.jobs.prepare import check, with_registered_environment
    from phalanx.service.reach import check_spec
    from phalanx.spec import SweepSpec

    spec = spec_text.load(overrides)
    job = spec.template() if isinstance(spec, SweepSpec) else spec
    placed = spec_text.placed_fields
    if isinstance(spec, SweepSpec):  # uploaded files are placed at the sweep's fields
        placed = frozenset(f.removeprefix("trial.") for f in placed)
    try:
        check_spec(caller, job, placed)  # before anything on the server is read
        _check_registered_names(caller, job, ws)
        _check_secrets(caller, job, ws)
        check(job, ws)
    except SpecError as exc:
        if not isinstance(spec, SweepSpec) or exc.field is None:
            raise
        raise spec.error(spec.template_field(exc.field), exc.message) from None
    except Forbidden as exc:
        if not isinstance(spec, SweepSpec):
            raise
        raise Forbidden(_sweep_fields(str(exc))) from None
    environment = with_registered_environment(job, ws).environment
    text = spec.text or ""
    if overrides:
        text += "".join(f"\n# --set {item}" for item in overrides) + "\n"
    return spec, text, environment_notes(environment)


def _points(ws: Workspace, name: str, metric: str) -> list[tuple[int, float]]:
    """A running trial's points of its sweep's primary metric."""
    from phalanx.workspace.metrics import curve

    return curve(Path(ws.get_job(name).job_dir), metric)


def _sweep_fields(message: str) -> str:
    """A message about a sweep's trial naming the sweep's field (``trial.code``)."""
    head, sep, rest = message.partition(":")
    if sep and " " not in head:
        from phalanx.spec import SweepSpec

        return SweepSpec.template_field(head) + sep + rest
    return message


def _check_secrets(caller: Caller, spec: JobSpec, ws: Workspace) -> None:
    """Refuse a reference to a secret the caller has not stored (the job would fail as
    it starts).

    Raises:
        SpecError: naming the variable and the command that stores the secret.
    """
    from phalanx.storage.datastore_records import secrets_of
    from phalanx.storage.usersecrets import UserSecrets, missing_message

    missing = UserSecrets(secrets_of(ws), caller.user).missing(spec.environment_variables)
    if missing:
        key, name = missing[0]
        raise spec.error(f"environment_variables.{key}", missing_message(caller.user, name))


def _check_registered_names(caller: Caller, spec: JobSpec, ws: Workspace) -> None:
    """Refuse outputs registered (``outputs.<o>.name``) under a name another owns.

    Raises:
        Forbidden: naming the output.
    """
    from phalanx.errors import Forbidden
    from phalanx.workspace.owners import check_name_owner

    for key, out in spec.outputs.items():
        if out.name is None:
            continue
        table = "models" if out.type == "custom_model" else "data_assets"
        try:
            check_name_owner(ws.query, table, out.name, caller.user, caller.is_admin)
        except Forbidden as exc:
            raise Forbidden(f"outputs.{key}.name: {exc}") from None


class LocalJobs:
    """Jobs in this machine's workspace (``PHALANX_HOME``), as ``caller`` may use them."""

    def __init__(self, ws: Workspace | None = None, caller: Caller = LOCAL) -> None:
        self.ws = ws if ws is not None else Workspace()
        self.caller = caller
        self.where = str(self.ws.home)
        self.remote = False
        self._places: ServerPlaces | None = None

    def _shown(self, job: JobRecord, *, logs: bool = False) -> JobRecord:
        """``job`` as the caller may read it (through a server; with ``logs``, its log
        files listed)."""
        if not self.caller.through_server:
            return job
        if self._places is None:
            assert self.caller.server is not None  # a caller through a server has its limits
            self._places = ServerPlaces.of(self.ws, self.caller.server.datastore_roots)
        return job_for(self.caller, job, self._places, logs=logs)

    def create(
        self, spec: SpecText, overrides: Sequence[str] = (), *, validate_only: bool = False
    ) -> Submission:
        """Check the spec and, unless ``validate_only``, queue the job as the caller's.

        Raises:
            SpecError: the spec is invalid.
            Forbidden: a viewer, or a spec reaching where the caller may not.
            QueueFull: the caller has as many jobs waiting as the server takes.
        """
        from phalanx.jobs.control import submit, submit_sweep
        from phalanx.spec import SweepSpec

        self.caller.require_member("job create")
        if not validate_only:
            self._check_room()
        loaded, text, notes = load_for_run(spec, overrides, self.ws, self.caller)
        if validate_only:
            return Submission(validation=validation_of(loaded), notes=notes)
        if isinstance(loaded, SweepSpec):
            job = submit_sweep(self.ws, loaded, text, created_by=self.caller.user)
        else:
            job = submit(self.ws, loaded, text, created_by=self.caller.user)
        return Submission(job=self._shown(job, logs=True), notes=notes)

    def _check_room(self) -> None:
        """Refuse a job past the server's bound on what one user has waiting.

        A soft bound: two creates at the same moment may both pass it by one.

        Raises:
            QueueFull: in one line, naming the bound and what the caller has waiting.
        """
        from phalanx.errors import QueueFull
        from phalanx.scheduler.ledger import waits_of

        bound = self.caller.server.max_queued if self.caller.server is not None else None
        if bound is None:
            return
        waits = waits_of(self.ws, self.caller.user)
        if waits.total < bound:
            return
        who = f"user {self.caller.user!r}" if self.caller.user else "this caller"
        what = f"{waits.queued} job(s) queued" + (
            f" and {waits.sweeps} sweep(s) running" if waits.sweeps else ""
        )
        raise QueueFull(
            f"job create: {who} has {what}, the most this server takes from one user "
            f"(--max-queued-per-user {bound}); wait for some to start, or cancel some"
        )

    def get(self, name: str) -> JobRecord:
        """The job's record, with what its MLflow run logged (params, tags)."""
        from phalanx.jobs.control import refresh
        from phalanx.tracking.runfiles import read_run_data

        job = refresh(self.ws, self.ws.get_job(name))
        run = read_run_data(Path(job.job_dir))
        job = replace(job, params=run.params or None, run_tags=run.tags or None)
        return self._shown(job, logs=True)

    def paths(self, name: str) -> JobPaths:
        """The folder of job ``name`` (its logs, outputs, spec), for reading.

        Raises:
            JobNotFoundError: no such job.
        """
        self.ws.get_job(name)
        return self.ws.paths(name)

    def submitted(self, name: str) -> tuple[str | None, dict[str, Any]]:
        """The spec as submitted (the YAML text, ``--set`` items noted; ``None`` when the
        file is gone, or for a caller other than its owner or an admin: its text holds
        the values of its environment variables) and as resolved, as the caller may read
        it (:mod:`phalanx.service.masks`)."""
        job = self.ws.get_job(name)
        text: str | None = None
        if sees_values(self.caller, job.created_by):
            with contextlib.suppress(FileNotFoundError):
                text = self.ws.paths(name).spec_yaml.read_text()
        return text, spec_for(self.caller, job.created_by, job.spec)

    def _owned(self, action: str, name: str) -> JobRecord:
        job = self.ws.get_job(name)
        self.caller.require_owner(action, f"job {name!r}", job.created_by)
        return job

    def list_jobs(
        self,
        *,
        limit: int,
        status: JobStatus | None,
        experiment: str | None,
        parent: str | None = None,
    ) -> list[JobRecord]:
        """The newest jobs first; with ``parent``, the trials of that sweep, else only the
        jobs no sweep made (as Azure ML's ``jobs.list()``)."""
        from phalanx.jobs.control import refresh

        jobs = self.ws.list_jobs(
            limit=limit, status=status, experiment=experiment, parent=parent, top_level=True
        )
        return [self._shown(refresh(self.ws, j)) for j in jobs]

    def page(self, query: JobQuery) -> JobPage:
        """A page of the job list (:meth:`Workspace.page_jobs`)."""
        from phalanx.jobs.control import refresh

        found = self.ws.page_jobs(query)
        return replace(found, jobs=[self._shown(refresh(self.ws, j)) for j in found.jobs])

    def sweep(self, name: str) -> SweepView:
        """Sweep ``name``'s state and trials, running trials with their points so far.

        Raises:
            PhalanxError: the job is not a sweep.
        """
        from phalanx.errors import PhalanxError
        from phalanx.workspace.trials import (
            SWEEP_TARGET,
            SweepState,
            register_command,
            state_of,
            trials_of,
        )

        job = self.ws.get_job(name)
        if job.target != SWEEP_TARGET:
            raise PhalanxError(f"job {name!r} is a command job, not a sweep")
        objective = job.spec.get("objective") or {}
        trials = trials_of(self.ws, name)
        statuses = {j.name: j.status.value for j in self.ws.list_jobs(parent=name, limit=10_000)}
        metric = str(objective.get("primary_metric", ""))
        live = []
        for trial in trials:
            if trial.curve is None and trial.job_name in statuses:
                trial = replace(trial, curve=_points(self.ws, trial.job_name, metric))
            live.append(trial)
        state = state_of(self.ws, name) or SweepState()
        best = next((t for t in live if t.number == state.best_trial), None)
        return SweepView(
            metric=metric,
            goal=str(objective.get("goal", "maximize")),
            state=state,
            trials=live,
            statuses=statuses,
            register=register_command(self.ws, name, job.spec.get("outputs") or {}, best),
        )

    def cancel(self, name: str) -> tuple[bool, JobRecord]:
        """Stop the job; whether it had ended already, and its record.

        Raises:
            Forbidden: the job is another's and the caller no admin.
        """
        from phalanx.jobs.control import cancel

        before = self._owned("job cancel", name).status
        return before.is_terminal, self._shown(cancel(self.ws, name), logs=True)

    def preempt(self, name: str, nodes: list[int] | None) -> JobRecord:
        """Evict ``nodes`` (all when ``None``) of the running job, as a spot reclaim would.

        Raises:
            Forbidden: the job is another's and the caller no admin.
        """
        from phalanx.jobs.control import preempt

        self._owned("job preempt", name)
        return self._shown(preempt(self.ws, name, nodes), logs=True)

    def metrics(self, name: str) -> tuple[History, History]:
        from phalanx.workspace.metrics import read_metrics, read_system_metrics

        job_dir = Path(self.ws.get_job(name).job_dir)
        return read_metrics(job_dir), read_system_metrics(job_dir)

    def system_timeline(self, name: str) -> Timeline:
        """The system metrics against the seconds since the job started (the studio's
        charts)."""
        from phalanx.workspace.metrics import read_system_timeline

        job = self.ws.get_job(name)
        return read_system_timeline(Path(job.job_dir), job.started_at)

    def follower(self, name: str, *, all_ranks: bool, timed: bool = False) -> LogFollower:
        return LogFollower(self.ws.paths(name), all_ranks=all_ranks, timed=timed)

    def download(self, name: str, rel: str, dest: Path) -> Landed | None:
        """Copy ``rel`` of job ``name``'s folder into the folder ``dest`` (links left out,
        as a server sends it: packed without following a link, then received with the
        checks of an upload and each file's sha256); what landed, or ``None`` when the
        job has nothing there.

        Raises:
            PhalanxError: an unknown job, an unsafe path, or a file altered on the way.
        """
        import tempfile

        from phalanx.service.jobfiles import NoSuchPath, pack, receive

        with tempfile.TemporaryDirectory(prefix="phalanx-download-") as tmp:
            archive = Path(tmp) / "files.tar"
            try:
                pack(self.ws, name, rel, archive)
            except NoSuchPath:
                return None
            return receive(archive, rel, dest)
