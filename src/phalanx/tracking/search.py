"""MLflow's own search grammar (``metrics.loss < 0.3 and params.lr = '0.1'``) over
phalanx's runs: the views become MLflow entities, MLflow's ``SearchUtils`` filter
and sort them. Imported only for a search with a filter or an ordering; needs the
``mlflow`` (or ``mlflow-skinny``) package, phalanx's ``mlflow`` extra.
"""

from __future__ import annotations

from mlflow.entities import Experiment, Metric, Param, Run, RunData, RunInfo, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.search_utils import SearchExperimentsUtils, SearchUtils

from phalanx.tracking.protocol import ExperimentView, RunView, invalid

__all__ = ["experiment", "run", "search_experiments", "search_runs"]


def search_runs(runs: list[Run], filter_string: str, order_by: list[str]) -> list[Run]:
    """The runs that pass ``filter_string``, in ``order_by``'s order.

    Raises:
        TrackingError: a filter or ordering MLflow's parser refuses (a typo is the
            caller's, a 400, never a 500 that the client would retry for minutes).
    """
    try:
        return SearchUtils.sort(SearchUtils.filter(runs, filter_string), order_by)
    except MlflowException as exc:
        raise invalid(exc.message) from None


def search_experiments(
    experiments: list[Experiment], filter_string: str, order_by: list[str]
) -> list[Experiment]:
    """As :func:`search_runs`, for experiments."""
    try:
        found = SearchExperimentsUtils.filter(experiments, filter_string)
        return SearchExperimentsUtils.sort(found, order_by)
    except MlflowException as exc:
        raise invalid(exc.message) from None


def run(view: RunView) -> Run:
    info = view.info()
    tags = {**view.tags, "mlflow.runName": view.run_name, "mlflow.user": view.user_id}
    return Run(
        RunInfo(
            run_id=view.run_id,
            experiment_id=info["experiment_id"],
            user_id=view.user_id,
            status=view.status,
            start_time=view.start_ms,
            end_time=view.end_ms,
            lifecycle_stage=view.lifecycle_stage,
            artifact_uri=view.artifact_uri,
            run_name=view.run_name,
        ),
        RunData(
            metrics=[Metric(m.key, m.value, m.timestamp, m.step) for m in view.metrics.values()],
            params=[Param(k, v) for k, v in view.params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        ),
    )


def experiment(view: ExperimentView) -> Experiment:
    wire = view.wire()
    return Experiment(
        experiment_id=view.experiment_id,
        name=view.name,
        artifact_location=wire["artifact_location"],
        lifecycle_stage="active",
        creation_time=view.created_ms,
        last_update_time=view.updated_ms,
    )
