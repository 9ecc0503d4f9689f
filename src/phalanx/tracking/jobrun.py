"""The one run a job's ranks see: the job itself, kept in its folder.

Inside a job the MLflow client is pointed at an endpoint that knows one
experiment (the job's ``experiment_name``) and one run (the job, its id the
job's name, in ``MLFLOW_RUN_ID``). Rank 0's calls are the job's: its metrics go
to ``metrics.jsonl`` with ``log_metric``'s, its params and tags to
``mlflow_run.jsonl``. Every other rank's calls are answered the same way and
kept nowhere, as ``phalanx.train.log_metric`` keeps only rank 0's unless told
otherwise: a script that logs from every rank does not log each point N times.

What the job's status decides is phalanx's: the client's ``RUNNING`` at start and
``FINISHED`` at exit change nothing. A second run (``start_run(nested=True)``,
a new experiment) is refused with the reason.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.tbevents import EventFileWriter
from phalanx.tracking.protocol import (
    ExperimentView,
    RunView,
    TrackingError,
    not_found,
    run_changes,
)
from phalanx.tracking.runfiles import (
    TENSORBOARD,
    Metric,
    append_events,
    append_metrics,
    latest_metrics,
    metric_history,
    read_run_data,
)


@dataclass(frozen=True)
class JobRun:
    """What the endpoint is told of its job."""

    name: str
    experiment: str
    display_name: str
    user: str
    created_ms: int


class JobRunStore:
    """The job's run, read from and written to ``job_dir`` (the node's folder on a Ray
    node with ``files: local``, shipped to the workspace as it grows).

    Args:
        rank: The rank whose calls these are; only rank 0's are kept.
    """

    def __init__(self, job_dir: Path, run: JobRun, *, attempt: int, rank: int) -> None:
        self.job_dir, self.job, self.attempt, self.rank = job_dir, run, attempt, rank
        self._lock = threading.Lock()
        self._params: dict[str, str] | None = None
        self._events: EventFileWriter | None = None

    @property
    def keeps(self) -> bool:
        return self.rank == 0

    def _experiment(self) -> ExperimentView:
        return ExperimentView(self.job.experiment, self.job.created_ms, self.job.created_ms)

    def experiments(self) -> list[ExperimentView]:
        return [self._experiment()]

    def create_experiment(self, name: str) -> ExperimentView:
        raise self._second(f"experiment {name!r}")

    def runs(self, experiment_names: list[str]) -> list[RunView]:
        return [self._view()] if self.job.experiment in experiment_names else []

    def run(self, run_id: str) -> RunView:
        self._check(run_id)
        return self._view()

    def create_run(self, experiment: str, name: str | None, tags: dict[str, str]) -> RunView:
        raise self._second(f"run {name!r}" if name else "run")

    def update_run(self, run_id: str, status: str | None, name: str | None) -> RunView:
        self._check(run_id)  # the job's status is phalanx's; the client's word is dropped
        return self._view()

    def set_lifecycle(self, run_id: str, stage: str) -> None:
        self._check(run_id)
        raise TrackingError(
            "INVALID_STATE",
            f"run {run_id} is the running job; delete or restore it from outside the job",
        )

    def log(
        self, run_id: str, metrics: list[Metric], params: dict[str, str], tags: dict[str, str]
    ) -> None:
        self._check(run_id)
        if not self.keeps:
            return
        with self._lock:
            known = self._known_params()
            append_events(self.job_dir, run_changes(run_id, known, params, tags))
            known.update(params)
            append_metrics(self.job_dir, metrics, attempt=self.attempt, rank=0)
            self._to_tensorboard(metrics)

    def _to_tensorboard(self, metrics: list[Metric]) -> None:
        """The points as TensorBoard events too, where ``log_metric`` writes its own
        (``outputs/tensorboard/``, an ``mlflow`` folder): ``phalanx tensorboard`` shows both."""
        if not metrics:
            return
        if self._events is None:
            self._events = EventFileWriter(self.job_dir / "outputs" / TENSORBOARD / "mlflow")
        for m in metrics:
            self._events.add_scalars({m.key: m.value}, m.step, wall_time=m.timestamp / 1000)

    def close(self) -> None:
        """Write the buffered TensorBoard events (the endpoint is stopping)."""
        with self._lock:
            if self._events is not None:
                self._events.close()

    def delete_tag(self, run_id: str, key: str) -> None:
        self._check(run_id)
        if self.keeps:
            if key not in read_run_data(self.job_dir).tags:
                raise not_found(f"No tag with name: {key} in run with id {run_id}")
            append_events(self.job_dir, [{"kind": "untag", "key": key}])

    def log_inputs(self, run_id: str, inputs: list[dict[str, Any]]) -> None:
        self._check(run_id)
        if self.keeps:
            append_events(self.job_dir, [{"kind": "input", **i} for i in inputs])

    def history(self, run_id: str, key: str) -> list[Metric]:
        self._check(run_id)
        return metric_history(self.job_dir, key)

    def _known_params(self) -> dict[str, str]:
        if self._params is None:
            self._params = dict(read_run_data(self.job_dir).params)
        return self._params

    def _check(self, run_id: str) -> None:
        if run_id != self.job.name:
            raise not_found(
                f"Run '{run_id}' not found: inside job {self.job.name} only its own run is "
                "served (MLFLOW_RUN_ID); read other runs through the workspace's server"
            )

    def _second(self, what: str) -> TrackingError:
        return TrackingError(
            "INVALID_STATE",
            f"a new {what} cannot be made inside phalanx job {self.job.name}: its MLflow run "
            f"is the job (MLFLOW_RUN_ID={self.job.name}); log to it, or run a job per trial",
        )

    def _view(self) -> RunView:
        data = read_run_data(self.job_dir)
        return RunView(
            run_id=self.job.name,
            run_name=self.job.display_name,
            experiment=self.job.experiment,
            user_id=self.job.user,
            status="RUNNING",
            start_ms=self.job.created_ms,
            metrics=latest_metrics(self.job_dir),
            params=data.params,
            tags=data.tags,
            inputs=data.inputs,
        )
