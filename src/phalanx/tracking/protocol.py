"""The MLflow tracking REST API (``/api/2.0/mlflow/…``) over a :class:`Store`.

One route table for the two places that serve it: the endpoint beside a job's
ranks (:mod:`phalanx.tracking.sidecar`, one run: the job's) and the team server
(:mod:`phalanx.server.mlflow_api`, every job its caller may read). Each hands
:func:`dispatch` the method, the path below ``/api/2.0/mlflow/``, the query and
the JSON body, and returns what it answers; a refusal is a :class:`TrackingError`,
sent as MLflow's ``{"error_code", "message"}`` so the client raises it as
``MlflowException``.

The calls are those the official client makes for tracking: experiments (get,
by name, search, create), runs (create, get, update, delete, restore, search),
log-metric, log-parameter, set-tag, delete-tag, log-batch, log-inputs, metric
history. Search filters and ordering use MLflow's own parser
(``mlflow.utils.search_utils``), imported when a search has one.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.limits import bounded
from phalanx.tracking.runfiles import (
    MAX_KEY,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    Metric,
    valid_input,
)

DEFAULT_EXPERIMENT = "Default"
OUTSIDE_TARGET = "mlflow"
"""The compute target a run made from outside any job records (``runs/create`` from a
notebook): a job that nothing runs, which the scheduler never sees queued."""

# MLflow's own limits (mlflow.utils.validation), so a script that logs within them
# here logs within them on any MLflow server.
MAX_BATCH_METRICS = 1000
MAX_BATCH_PARAMS = 100
MAX_BATCH_TAGS = 100
MAX_BATCH_TOTAL = 1000
MAX_RESULTS = 50_000
_KEY = re.compile(r"^[\w\-. /:]+$")
_RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")
_INT64 = (-(2**63), 2**63 - 1)


class TrackingError(Exception):
    """A refusal, as MLflow words it: an error code, a message, an HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status

    def wire(self) -> dict[str, str]:
        return {"error_code": self.code, "message": bounded(self.message)}


def not_found(what: str) -> TrackingError:
    return TrackingError("RESOURCE_DOES_NOT_EXIST", what, 404)


def invalid(message: str) -> TrackingError:
    return TrackingError("INVALID_PARAMETER_VALUE", message, 400)


def experiment_id(name: str) -> str:
    """An experiment's id, made from its name (phalanx keeps experiments as the names
    jobs carry): ``"0"`` for ``Default``, as in MLflow, else 18 decimal digits of the
    name's SHA-256, the same on every server and in every job."""
    if name == DEFAULT_EXPERIMENT:
        return "0"
    return str(int(hashlib.sha256(name.encode()).hexdigest()[:15], 16))


@dataclass(frozen=True)
class ExperimentView:
    name: str
    created_ms: int = 0
    updated_ms: int = 0

    @property
    def experiment_id(self) -> str:
        return experiment_id(self.name)

    def wire(self) -> dict[str, Any]:
        return {
            "experiment_id": self.experiment_id,
            "name": self.name,
            "artifact_location": f"mlflow-artifacts:/experiments/{self.experiment_id}",
            "lifecycle_stage": "active",
            "creation_time": self.created_ms,
            "last_update_time": self.updated_ms,
            "tags": [],
        }


@dataclass
class RunView:
    """One run as MLflow shows it; in phalanx, one job."""

    run_id: str
    run_name: str
    experiment: str
    user_id: str
    status: str
    """MLflow's word: ``SCHEDULED``, ``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED``."""
    start_ms: int
    end_ms: int | None = None
    lifecycle_stage: str = "active"
    metrics: dict[str, Metric] = field(default_factory=dict)
    """Each metric's latest point."""
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def artifact_uri(self) -> str:
        return f"mlflow-artifacts:/jobs/{self.run_id}"

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "run_id": self.run_id,
            "run_uuid": self.run_id,
            "run_name": self.run_name,
            "experiment_id": experiment_id(self.experiment),
            "user_id": self.user_id,
            "status": self.status,
            "start_time": self.start_ms,
            "artifact_uri": self.artifact_uri,
            "lifecycle_stage": self.lifecycle_stage,
        }
        if self.end_ms is not None:
            info["end_time"] = self.end_ms
        return info

    def wire(self) -> dict[str, Any]:
        # phalanx's names win over a client's: the user is the token's, not the laptop's.
        tags = {**self.tags, "mlflow.runName": self.run_name, "mlflow.user": self.user_id}
        return {
            "info": self.info(),
            "data": {
                "metrics": [_metric_wire(m) for m in self.metrics.values()],
                "params": [{"key": k, "value": v} for k, v in self.params.items()],
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
            "inputs": {"dataset_inputs": [_input_wire(i) for i in self.inputs]},
        }


class Store(Protocol):
    """Where the runs are: one job's folder (inside the job), or a workspace."""

    def experiments(self) -> list[ExperimentView]: ...
    def create_experiment(self, name: str) -> ExperimentView: ...
    def runs(self, experiment_names: list[str]) -> list[RunView]: ...
    def run(self, run_id: str) -> RunView: ...
    def create_run(self, experiment: str, name: str | None, tags: dict[str, str]) -> RunView: ...
    def update_run(self, run_id: str, status: str | None, name: str | None) -> RunView: ...
    def set_lifecycle(self, run_id: str, stage: str) -> None: ...
    def log(
        self, run_id: str, metrics: list[Metric], params: dict[str, str], tags: dict[str, str]
    ) -> None: ...
    def delete_tag(self, run_id: str, key: str) -> None: ...
    def log_inputs(self, run_id: str, inputs: list[dict[str, Any]]) -> None: ...
    def history(self, run_id: str, key: str) -> list[Metric]: ...


def dispatch(
    method: str, route: str, query: Mapping[str, Any], body: Mapping[str, Any], store: Store
) -> dict[str, Any]:
    """Answer one call of the tracking API.

    Args:
        route: The path below ``/api/2.0/mlflow/``, e.g. ``runs/log-batch``.
        query: A GET's parameters (MLflow sends a GET's fields there).
        body: A POST's JSON object.

    Raises:
        TrackingError: what MLflow would refuse, and what this store does not allow.
    """
    handler = _ROUTES.get((method.upper(), route.strip("/")))
    if handler is None:
        raise TrackingError(
            "ENDPOINT_NOT_FOUND", f"{method} /api/2.0/mlflow/{route} is not served here", 404
        )
    args = dict(query) if method.upper() == "GET" else dict(body)
    return handler(args, store)


# -- experiments ---------------------------------------------------------------------


def _experiment(args: dict[str, Any], store: Store) -> ExperimentView:
    wanted = _text(args, "experiment_id")
    for e in store.experiments():
        if e.experiment_id == wanted:
            return e
    raise not_found(f"No Experiment with id={wanted} exists")


def _get_experiment(args: dict[str, Any], store: Store) -> dict[str, Any]:
    return {"experiment": _experiment(args, store).wire()}


def _get_by_name(args: dict[str, Any], store: Store) -> dict[str, Any]:
    name = _text(args, "experiment_name")
    for e in store.experiments():
        if e.name == name:
            return {"experiment": e.wire()}
    raise not_found(f"Could not find experiment with name '{name}'")


def _search_experiments(args: dict[str, Any], store: Store) -> dict[str, Any]:
    experiments = sorted(store.experiments(), key=lambda e: (-e.created_ms, e.name))
    if args.get("filter") or args.get("order_by"):
        mlflow = _mlflow("an experiment search with a filter or order_by")
        entities = mlflow.search_experiments(
            [mlflow.experiment(e) for e in experiments], *_filter_and_order(args)
        )
        names = [e.name for e in entities]
        by_name = {e.name: e for e in experiments}
        experiments = [by_name[n] for n in names]
    return _paged("experiments", experiments, args, ExperimentView.wire)


def _create_experiment(args: dict[str, Any], store: Store) -> dict[str, Any]:
    name = _text(args, "name")
    if any(e.name == name for e in store.experiments()):
        raise TrackingError("RESOURCE_ALREADY_EXISTS", f"Experiment '{name}' already exists.", 400)
    return {"experiment_id": store.create_experiment(name).experiment_id}


# -- runs ------------------------------------------------------------------------------


def _run_id(args: dict[str, Any]) -> str:
    run_id = args.get("run_id") or args.get("run_uuid")
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise invalid(f"Invalid value {run_id!r} for parameter 'run_id' supplied")
    return run_id


def _get_run(args: dict[str, Any], store: Store) -> dict[str, Any]:
    return {"run": store.run(_run_id(args)).wire()}


def _create_run(args: dict[str, Any], store: Store) -> dict[str, Any]:
    wanted = str(args.get("experiment_id") or "0")
    experiment = next((e for e in store.experiments() if e.experiment_id == wanted), None)
    if experiment is None:
        if wanted != "0":
            raise not_found(f"No Experiment with id={wanted} exists")
        experiment = ExperimentView(DEFAULT_EXPERIMENT)
    tags = _pairs(args.get("tags"), "tags", MAX_TAG_VALUE)
    name = args.get("run_name") or tags.get("mlflow.runName")
    return {"run": store.create_run(experiment.name, name, tags).wire()}


_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")


def _update_run(args: dict[str, Any], store: Store) -> dict[str, Any]:
    status = args.get("status")
    if status is not None and status not in _STATUSES:
        raise invalid(f"status: {status!r} is not one of {', '.join(_STATUSES)}")
    name = args.get("run_name") or None
    return {"run_info": store.update_run(_run_id(args), status, name).info()}


def _delete_run(args: dict[str, Any], store: Store) -> dict[str, Any]:
    store.set_lifecycle(_run_id(args), "deleted")
    return {}


def _restore_run(args: dict[str, Any], store: Store) -> dict[str, Any]:
    store.set_lifecycle(_run_id(args), "active")
    return {}


def _search_runs(args: dict[str, Any], store: Store) -> dict[str, Any]:
    ids = [str(i) for i in _list(args.get("experiment_ids"))]
    names = [e.name for e in store.experiments() if e.experiment_id in ids]
    view = str(args.get("run_view_type") or "ACTIVE_ONLY")
    runs = [
        r
        for r in store.runs(names)
        if view == "ALL" or (r.lifecycle_stage == "deleted") == (view == "DELETED_ONLY")
    ]
    runs.sort(key=lambda r: (-r.start_ms, r.run_id))
    if args.get("filter") or args.get("order_by"):
        mlflow = _mlflow("a run search with a filter or order_by")
        by_id = {r.run_id: r for r in runs}
        entities = mlflow.search_runs([mlflow.run(r) for r in runs], *_filter_and_order(args))
        runs = [by_id[e.info.run_id] for e in entities]
    return _paged("runs", runs, args, RunView.wire)


# -- logging ---------------------------------------------------------------------------


def _log_metric(args: dict[str, Any], store: Store) -> dict[str, Any]:
    store.log(_run_id(args), [_metric(args)], {}, {})
    return {}


def _log_param(args: dict[str, Any], store: Store) -> dict[str, Any]:
    params = _pairs([{"key": args.get("key"), "value": args.get("value")}], "params",
                    MAX_PARAM_VALUE)  # fmt: skip
    store.log(_run_id(args), [], params, {})
    return {}


def _set_tag(args: dict[str, Any], store: Store) -> dict[str, Any]:
    tags = _pairs([{"key": args.get("key"), "value": args.get("value")}], "tags", MAX_TAG_VALUE)
    store.log(_run_id(args), [], {}, tags)
    return {}


def _delete_tag(args: dict[str, Any], store: Store) -> dict[str, Any]:
    store.delete_tag(_run_id(args), _key(args.get("key"), "key"))
    return {}


def _log_batch(args: dict[str, Any], store: Store) -> dict[str, Any]:
    raw_metrics = _list(args.get("metrics"))
    raw_params, raw_tags = _list(args.get("params")), _list(args.get("tags"))
    if (
        len(raw_metrics) > MAX_BATCH_METRICS
        or len(raw_params) > MAX_BATCH_PARAMS
        or (len(raw_tags) > MAX_BATCH_TAGS)
        or len(raw_metrics) + len(raw_params) + len(raw_tags) > MAX_BATCH_TOTAL
    ):
        raise invalid(
            f"A batch logging request can contain at most {MAX_BATCH_METRICS} metrics, "
            f"{MAX_BATCH_PARAMS} params and {MAX_BATCH_TAGS} tags, "
            f"{MAX_BATCH_TOTAL} in all"
        )
    metrics = [_metric(m) for m in raw_metrics]
    params = _pairs(raw_params, "params", MAX_PARAM_VALUE)
    tags = _pairs(raw_tags, "tags", MAX_TAG_VALUE)
    store.log(_run_id(args), metrics, params, tags)
    return {}


def _log_inputs(args: dict[str, Any], store: Store) -> dict[str, Any]:
    inputs = []
    for item in _list(args.get("datasets")):
        if not valid_input(item):
            raise invalid(
                "datasets: each is {dataset: {name, digest, source_type, source, ...: text}, "
                "tags: [{key, value}]}"
            )
        inputs.append({"dataset": item["dataset"], "tags": item.get("tags") or []})
    store.log_inputs(_run_id(args), inputs)
    return {}


def _history(args: dict[str, Any], store: Store) -> dict[str, Any]:
    key = _key(args.get("metric_key"), "metric_key")
    points = store.history(_run_id(args), key)
    return _paged("metrics", points, args, _metric_wire, most=25_000)


def run_changes(
    run_id: str, known: Mapping[str, str], params: Mapping[str, str], tags: Mapping[str, str]
) -> list[dict[str, str]]:
    """The run-file events that log ``params`` and ``tags`` on a run whose params are
    ``known``: a param logged again with its value adds nothing.

    Raises:
        TrackingError: a param given a new value (MLflow's params never change).
    """
    for key, value in params.items():
        if key in known and known[key] != value:
            raise invalid(
                f"Changing param values is not allowed. Param with key='{key}' was "
                f"already logged with value='{known[key]}' for run ID='{run_id}'. "
                f"Attempted logging new param value '{value}'."
            )
    events = [{"kind": "param", "key": k, "value": v} for k, v in params.items()
              if known.get(k) != v]  # fmt: skip
    return events + [{"kind": "tag", "key": k, "value": v} for k, v in tags.items()]


def _no_logged_models(args: dict[str, Any], store: Store) -> dict[str, Any]:
    """MLflow 3's logged models: phalanx registers a job's outputs as models instead
    (``phalanx model create``), so a search finds none (``search_runs`` asks)."""
    return {"models": []}


_ROUTES = {
    ("GET", "experiments/get"): _get_experiment,
    ("GET", "experiments/get-by-name"): _get_by_name,
    ("POST", "experiments/search"): _search_experiments,
    ("GET", "experiments/search"): _search_experiments,
    ("GET", "experiments/list"): _search_experiments,
    ("POST", "experiments/create"): _create_experiment,
    ("POST", "runs/create"): _create_run,
    ("GET", "runs/get"): _get_run,
    ("POST", "runs/update"): _update_run,
    ("POST", "runs/delete"): _delete_run,
    ("POST", "runs/restore"): _restore_run,
    ("POST", "runs/search"): _search_runs,
    ("POST", "runs/log-metric"): _log_metric,
    ("POST", "runs/log-parameter"): _log_param,
    ("POST", "runs/set-tag"): _set_tag,
    ("POST", "runs/delete-tag"): _delete_tag,
    ("POST", "runs/log-batch"): _log_batch,
    ("POST", "runs/log-inputs"): _log_inputs,
    ("GET", "metrics/get-history"): _history,
    ("POST", "logged-models/search"): _no_logged_models,
}


# -- values ----------------------------------------------------------------------------


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(f"Missing value for required parameter '{name}'")
    return value


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _key(key: Any, what: str) -> str:
    if not isinstance(key, str) or not key:
        raise invalid(f"Missing value for required parameter '{what}'")
    if len(key) > MAX_KEY or not _KEY.match(key) or key.startswith("/") or ".." in key:
        raise invalid(
            f"Invalid {what} {key[:60]!r}: names may hold letters, digits, _ - . space / : "
            f"(at most {MAX_KEY}), not start with / nor hold .."
        )
    return key


def _pairs(items: Any, what: str, most: int) -> dict[str, str]:
    """``[{"key", "value"}]`` → a mapping, keys and value lengths checked."""
    out: dict[str, str] = {}
    for item in _list(items):
        if not isinstance(item, dict):
            raise invalid(f"{what}: each item is {{key, value}}")
        key = _key(item.get("key"), f"{what[:-1]} key")
        value = item.get("value")
        value = "" if value is None else str(value)
        if len(value) > most:
            raise invalid(f"{what[:-1]} {key!r}: its value has {len(value)} characters; "
                          f"at most {most}")  # fmt: skip
        out[key] = value
    return out


def _number(value: Any) -> float:
    """A metric's value: a number, or the text protobuf's JSON gives NaN and infinities."""
    if isinstance(value, bool):
        raise invalid(f"Got invalid value {value!r} for metric")
    if isinstance(value, float):
        return value
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity", "nan", "inf", "-inf"):
        return float(value.replace("Infinity", "inf"))
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int of 400 digits
        raise invalid(f"Got invalid value {str(value)[:40]!r} for metric") from None


def _whole(value: Any, what: str, default: int) -> int:
    """A whole number within protobuf's int64, as MLflow's fields are (a step or time
    past it would reach the files and break every reader of the run)."""
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(Infinity)
        raise invalid(f"Got invalid {what} {str(value)[:40]!r}: a whole number") from None
    if not _INT64[0] <= number <= _INT64[1]:
        raise invalid(f"Got invalid {what} {str(value)[:40]!r}: beyond a 64-bit integer")
    return number


def _metric(item: Any) -> Metric:
    if not isinstance(item, dict):
        raise invalid("metrics: each item is {key, value, timestamp, step}")
    return Metric(
        key=_key(item.get("key"), "metric key"),
        value=_number(item.get("value")),
        timestamp=_whole(item.get("timestamp"), "timestamp", 0),
        step=_whole(item.get("step"), "step", 0),
    )


def _metric_wire(m: Metric) -> dict[str, Any]:
    value: Any = m.value
    if not math.isfinite(m.value):
        value = "NaN" if math.isnan(m.value) else ("Infinity" if m.value > 0 else "-Infinity")
    return {"key": m.key, "value": value, "timestamp": m.timestamp, "step": m.step}


def _input_wire(item: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": item.get("dataset", {}), "tags": item.get("tags", [])}


def _paged(
    field: str,
    items: list[Any],
    args: Mapping[str, Any],
    wire: Callable[[Any], dict[str, Any]],
    most: int = 1000,
) -> dict[str, Any]:
    """The answer holding one page of ``items`` under ``field``, each as ``wire`` gives
    it, and ``next_page_token`` while more follow."""
    page, token = _page(items, args, most)
    answer: dict[str, Any] = {field: [wire(item) for item in page]}
    if token:
        answer["next_page_token"] = token
    return answer


def _page(items: list[Any], args: Mapping[str, Any], most: int = 1000) -> tuple[list[Any], str]:
    """One page of ``items`` and the token of the next (``""`` at the end): MLflow's
    ``max_results`` (default ``most``) and ``page_token`` (here an offset)."""
    size = _whole(args.get("max_results"), "max_results", most)
    if not 1 <= size <= MAX_RESULTS:
        raise invalid(f"max_results: {size} is not within 1 … {MAX_RESULTS}")
    token = args.get("page_token") or "0"
    if not (str(token).isascii() and str(token).isdigit()):  # "²" is a digit to isdigit
        raise invalid(f"page_token: {str(token)[:40]!r} is not one this server gave")
    start = int(token)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else "")


def _filter_and_order(args: Mapping[str, Any]) -> tuple[str, list[str]]:
    """A search's ``filter`` (text) and ``order_by`` (texts), checked before MLflow's
    parser sees them."""
    text = args.get("filter") or ""
    order = _list(args.get("order_by"))
    if not isinstance(text, str):
        raise invalid(f"filter: {str(text)[:40]!r} is not a text")
    if not all(isinstance(o, str) for o in order):
        raise invalid("order_by: each item is a text such as 'metrics.loss DESC'")
    return text, order


def _mlflow(what: str) -> Any:
    """MLflow's search parser, for filters and ordering."""
    try:
        from phalanx.tracking import search
    except ImportError:
        raise TrackingError(
            "FEATURE_DISABLED",
            f"{what} needs the mlflow package where this endpoint runs: "
            "pip install 'phalanx[mlflow]'",
            501,
        ) from None
    return search
