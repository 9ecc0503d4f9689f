"""The workspace's jobs as MLflow runs, as a caller may see and change them.

This is the :class:`phalanx.tracking.protocol.Store` the team server answers
``/api/2.0/mlflow/`` from (and ``phalanx studio`` on this machine), so the plain
MLflow client searches, reads and compares runs with
``MLFLOW_TRACKING_URI=<server>`` and ``MLFLOW_TRACKING_TOKEN=<token>``:

- every caller (viewers too) reads every run, as it reads every job;
- a job's run is written from inside the job (the node's endpoint,
  :mod:`phalanx.tracking.sidecar`); from outside, the job's owner (or an admin)
  may set and delete its tags once the job has ended;
- a job's run's status is the job's: ``Queued``/``Preparing`` → ``SCHEDULED``,
  ``Running``/``Finalizing`` → ``RUNNING``, ``Completed`` → ``FINISHED``, ``Failed``
  → ``FAILED``, ``Canceled`` → ``KILLED``. It changes through ``phalanx job``,
  never through ``update_run``;
- a member may also make a run from outside any job (a notebook's
  ``mlflow.start_run()``): a job record on the target ``mlflow`` that nothing
  runs, Running until the client ends it (``FINISHED`` → ``Completed``, ``FAILED``
  → ``Failed``, ``KILLED`` → ``Canceled``), which its maker logs to like any
  MLflow run, artifacts included (into its outputs). ``phalanx job list`` and
  the studio show it with the rest; ``job cancel`` ends it;
- ``create_experiment`` (``mlflow.set_experiment`` of a new name) records the
  name for the jobs and runs that will carry it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.errors import Forbidden, JobNotFoundError, PhalanxError
from phalanx.limits import MAX_NAME, text_problem
from phalanx.service.access import Caller
from phalanx.tracking.protocol import (
    DEFAULT_EXPERIMENT,
    OUTSIDE_TARGET,
    ExperimentView,
    RunView,
    TrackingError,
    invalid,
    not_found,
    run_changes,
)
from phalanx.tracking.runfiles import (
    Metric,
    append_events,
    append_metrics,
    latest_metrics,
    metric_history,
    read_run_data,
)
from phalanx.workspace import JobRecord, JobStatus, Workspace
from phalanx.workspace.records import QueueEntry

MOST_RUNS = 5000
"""The newest runs of an experiment a search looks at."""
OUTSIDE_COMMAND = "an MLflow run logged from outside a job (nothing to run)"

_ENDED = {"FINISHED": JobStatus.COMPLETED, "FAILED": JobStatus.FAILED, "KILLED": JobStatus.CANCELED}

_STATUS = {
    JobStatus.QUEUED: "SCHEDULED",
    JobStatus.PREPARING: "SCHEDULED",
    JobStatus.RUNNING: "RUNNING",
    JobStatus.FINALIZING: "RUNNING",
    JobStatus.COMPLETED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELED: "KILLED",
}


def run_view(job: JobRecord) -> RunView:
    """Job ``job`` as an MLflow run: its latest metrics, its params, its spec's tags with
    the tags its run set over them."""
    job_dir = Path(job.job_dir)
    data = read_run_data(job_dir)
    started = job.started_at if job.started_at is not None else job.created_at
    return RunView(
        run_id=job.name,
        run_name=job.display_name or job.name,
        experiment=job.experiment_name,
        user_id=job.created_by or "local",
        status=_STATUS[job.status],
        start_ms=int(started * 1000),
        end_ms=int(job.ended_at * 1000) if job.ended_at is not None else None,
        metrics=latest_metrics(job_dir),
        params=data.params,
        # A sweep's trial nests under its sweep's run, as MLflow's UI shows child runs.
        tags={
            **job.tags,
            **data.tags,
            **({"mlflow.parentRunId": job.parent} if job.parent else {}),
        },
        inputs=data.inputs,
        lifecycle_stage="deleted" if data.deleted else "active",
    )


class WorkspaceRuns:
    """Every job of ``ws`` as a run, for ``caller``."""

    def __init__(self, ws: Workspace, caller: Caller) -> None:
        self.ws, self.caller = ws, caller

    def experiments(self) -> list[ExperimentView]:
        found = {
            name: ExperimentView(name, int(first * 1000), int(last * 1000))
            for name, first, last in self.ws.experiments()
        }
        found.setdefault(DEFAULT_EXPERIMENT, ExperimentView(DEFAULT_EXPERIMENT))
        return list(found.values())

    def create_experiment(self, name: str) -> ExperimentView:
        self._member("mlflow create-experiment")
        problem = text_problem(name, MAX_NAME) if name.strip() else "is empty"
        if problem is not None:
            raise invalid(f"experiment name: {problem}")
        self.ws.create_experiment(name, self.caller.user)
        return next(e for e in self.experiments() if e.name == name)

    def runs(self, experiment_names: list[str]) -> list[RunView]:
        views = []
        for name in experiment_names:
            for job in self.ws.list_jobs(limit=MOST_RUNS, experiment=name):
                views.append(run_view(job))
        return views

    def run(self, run_id: str) -> RunView:
        return run_view(self._job(run_id))

    def create_run(self, experiment: str, name: str | None, tags: dict[str, str]) -> RunView:
        """A run from outside any job, the caller's (see the module)."""
        from phalanx.spec import JobSpec

        self._member("mlflow create-run")
        try:
            spec = JobSpec(
                command=OUTSIDE_COMMAND, experiment_name=experiment, display_name=name or None
            )
        except ValueError as exc:
            raise invalid(f"run_name: {exc}") from None
        job = self.ws.create_job(
            spec.to_record(),
            spec_text=f"# {OUTSIDE_COMMAND}\n",
            queue=QueueEntry(target=OUTSIDE_TARGET),
            created_by=self.caller.user,
            running=True,
        )
        append_events(Path(job.job_dir), [{"kind": "tag", "key": k, "value": v}
                                          for k, v in tags.items()])  # fmt: skip
        return run_view(job)

    def update_run(self, run_id: str, status: str | None, name: str | None) -> RunView:
        job = self._job(run_id)
        if job.target == OUTSIDE_TARGET and status in _ENDED:
            self._owner(job, "mlflow update-run")
            self.ws.set_status(job.name, _ENDED[status])
            return run_view(self._job(run_id))
        if status is not None and status != _STATUS[job.status]:
            raise TrackingError(
                "INVALID_STATE",
                f"run {run_id} is job {run_id}, {job.status.value}: its status changes with "
                f"the job (phalanx job cancel {run_id}), not through MLflow",
            )
        return run_view(job)

    def set_lifecycle(self, run_id: str, stage: str) -> None:
        """MLflow's soft delete and restore: the run leaves (or comes back to) MLflow's
        searches; the job and its records stay, as ``phalanx job`` shows them."""
        job = self._job(run_id)
        if job.target == OUTSIDE_TARGET:
            self._owner(job, f"mlflow {'delete' if stage == 'deleted' else 'restore'}-run")
        else:
            self._may_change(job, "mlflow delete-run")
        append_events(Path(job.job_dir), [{"kind": "lifecycle", "stage": stage}])

    def log(
        self, run_id: str, metrics: list[Metric], params: dict[str, str], tags: dict[str, str]
    ) -> None:
        job = self._job(run_id)
        if job.target != OUTSIDE_TARGET:
            if metrics or params:
                raise TrackingError(
                    "INVALID_STATE",
                    f"metrics and params of run {run_id} are logged from inside its job; "
                    "from outside, only tags may be set once it has ended",
                )
            self._may_change(job, "mlflow set-tag")
            append_events(Path(job.job_dir), [{"kind": "tag", "key": k, "value": v}
                                              for k, v in tags.items()])  # fmt: skip
            return
        self._owner(job, "mlflow log")
        job_dir = Path(job.job_dir)
        known = read_run_data(job_dir).params
        append_events(job_dir, run_changes(run_id, known, params, tags))
        append_metrics(job_dir, metrics, attempt=1, rank=0)

    def delete_tag(self, run_id: str, key: str) -> None:
        job = self._job(run_id)
        if job.target == OUTSIDE_TARGET:
            self._owner(job, "mlflow delete-tag")
        else:
            self._may_change(job, "mlflow delete-tag")
        if key not in read_run_data(Path(job.job_dir)).tags:
            raise not_found(f"No tag with name: {key} in run with id {run_id}")
        append_events(Path(job.job_dir), [{"kind": "untag", "key": key}])

    def log_inputs(self, run_id: str, inputs: list[dict[str, Any]]) -> None:
        job = self._job(run_id)
        if job.target != OUTSIDE_TARGET:
            raise TrackingError(
                "INVALID_STATE", f"inputs of run {run_id} are logged from inside its job"
            )
        self._owner(job, "mlflow log-inputs")
        append_events(Path(job.job_dir), [{"kind": "input", **i} for i in inputs])

    def history(self, run_id: str, key: str) -> list[Metric]:
        return metric_history(Path(self._job(run_id).job_dir), key)

    def artifact_folder(self, run_id: str) -> Path:
        """Where the caller may store artifacts of run ``run_id``: the job folder of a run
        made from outside a job, its own (a job's run stores its artifacts from inside).

        Raises:
            TrackingError: a job's run, or another's run.
        """
        job = self._job(run_id)
        if job.target != OUTSIDE_TARGET:
            raise TrackingError(
                "INVALID_STATE",
                f"artifacts of run {run_id} are logged from inside its job (they are its outputs)",
            )
        self._owner(job, "mlflow log-artifact")
        return Path(job.job_dir)

    def _job(self, run_id: str) -> JobRecord:
        try:
            return self.ws.get_job(run_id)
        except JobNotFoundError:
            raise not_found(f"Run '{run_id}' not found") from None

    def _member(self, action: str) -> None:
        try:
            self.caller.require_member(action)
        except Forbidden as exc:
            raise TrackingError("PERMISSION_DENIED", str(exc), 403) from None

    def _owner(self, job: JobRecord, action: str) -> None:
        self._member(action)
        try:
            self.caller.require_owner(action, f"run {job.name!r}", job.created_by)
        except Forbidden as exc:
            raise TrackingError("PERMISSION_DENIED", str(exc), 403) from None

    def _may_change(self, job: JobRecord, action: str) -> None:
        """A job's run changed from outside: by its owner, once the job has ended."""
        self._owner(job, action)
        if not job.status.is_terminal:
            raise TrackingError(
                "INVALID_STATE",
                f"run {job.name} is still {job.status.value}: it is its job's to change "
                "until it ends",
            )


def as_tracking_error(exc: PhalanxError) -> TrackingError:
    """A phalanx refusal in MLflow's words."""
    if isinstance(exc, Forbidden):
        return TrackingError("PERMISSION_DENIED", str(exc), 403)
    if isinstance(exc, JobNotFoundError):
        return not_found(str(exc))
    return TrackingError("INVALID_PARAMETER_VALUE", str(exc), 400)
