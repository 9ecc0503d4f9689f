"""An MLflow run's data in its job's folder, beside what ``phalanx.train`` writes.

- Metrics go to the job's ``metrics.jsonl``, one line each in
  ``phalanx.train.log_metric``'s shape plus ``"source": "mlflow"``, so every
  reader of the job's metrics (``job metrics``, the studio, the registry,
  TensorBoard export) sees them with no second store.
- Params, tags and dataset inputs go to ``mlflow_run.jsonl``: one event a line
  (``{"kind": "param" | "tag" | "untag" | "input" | "lifecycle", ...}``), read back by
  folding
  them in order (a later tag replaces an earlier one).

Both files only grow and are written a whole line at a time with one append, so
the ranks' own lines never interleave with these, and a Ray node's copy is
shipped to the workspace as a log (new bytes appended to what earlier attempts
left).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from phalanx.workspace.metrics import METRICS_FILE, Point, bounded_lines, points

RUN_FILE = "mlflow_run.jsonl"
# MLflow's own limits (mlflow.utils.validation): the endpoints refuse more; a line the job
# wrote itself past them is skipped when read, so what one job's file holds stays small
# in every answer that shows its run (a search, job show).
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
MOST_KEYS = 1000
"""Params, and tags, a run shows at most (MLflow logs at most 100 in a batch)."""
TENSORBOARD = "tensorboard"  # phalanx.train.metrics.TENSORBOARD_DIR, below the outputs


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    timestamp: int
    """Milliseconds since the epoch, as MLflow counts."""
    step: int = 0


@dataclass
class RunData:
    """What a run's events add up to."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False
    """MLflow's soft delete (``delete_run``): hidden from searches, kept, restorable."""


def append_metrics(job_dir: Path, metrics: Sequence[Metric], *, attempt: int, rank: int) -> None:
    """Add ``metrics`` to the job's ``metrics.jsonl`` (one append of whole lines)."""
    lines = []
    for m in metrics:
        record: dict[str, Any] = {
            "name": m.key,
            "value": m.value if math.isfinite(m.value) else None,
            "step": m.step,
            "time": round(m.timestamp / 1000, 3),
            "rank": rank,
            "attempt": attempt,
            "source": "mlflow",
        }
        if not math.isfinite(m.value):
            record["text"] = str(m.value)
        lines.append(json.dumps(record))
    _append(job_dir / METRICS_FILE, lines)


def append_events(job_dir: Path, events: Iterable[dict[str, Any]]) -> None:
    """Add events (``{"kind": ..., ...}``) to the run's file."""
    _append(job_dir / RUN_FILE, [json.dumps(e, ensure_ascii=False) for e in events])


def read_run_data(job_dir: Path) -> RunData:
    """The params, tags and inputs the run's events add up to (bounded like the metrics:
    a torn or overlong line is skipped, a link never followed)."""
    data = RunData()
    for line in bounded_lines(job_dir / RUN_FILE):
        try:
            event = json.loads(line)
            kind = event["kind"]
        except (ValueError, KeyError, TypeError):
            continue
        key, value = event.get("key"), event.get("value")
        if isinstance(key, str) and len(key) > MAX_KEY:
            continue
        if kind == "param" and _fits(data.params, key, value, MAX_PARAM_VALUE):
            data.params[key] = value
        elif kind == "tag" and _fits(data.tags, key, value, MAX_TAG_VALUE):
            data.tags[key] = value
        elif kind == "untag" and isinstance(key, str):
            data.tags.pop(key, None)
        elif kind == "input" and valid_input(event) and len(data.inputs) < MOST_KEYS:
            data.inputs.append(event)
        elif kind == "lifecycle" and event.get("stage") in ("active", "deleted"):
            data.deleted = event["stage"] == "deleted"
    return data


def valid_input(item: Any) -> bool:
    """Whether ``item`` is MLflow's dataset input: ``{"dataset": {field: text}, "tags":
    [{"key": text, "value": text}]}`` with a named dataset (the client parses each run of
    a search strictly: one input of another shape would fail the whole search)."""
    if not isinstance(item, dict):
        return False
    dataset, tags = item.get("dataset"), item.get("tags") or []
    return (
        isinstance(dataset, dict)
        and isinstance(dataset.get("name"), str)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in dataset.items())
        and isinstance(tags, list)
        and all(
            isinstance(t, dict)
            and set(t) <= {"key", "value"}
            and all(isinstance(v, str) for v in t.values())
            for t in tags
        )
    )


def _fits(known: dict[str, str], key: object, value: object, most: int) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, str)
        and len(value) <= most
        and (key in known or len(known) < MOST_KEYS)
    )


def _mlflow_metric(p: Point) -> Metric:
    ms = (p.time or 0.0) * 1000
    return Metric(
        p.name,
        p.value if p.value is not None else math.nan,
        # A time the job wrote past int64's milliseconds (1e306 s) is none, not a 500.
        round(ms) if abs(ms) < 2**63 else 0,
        p.step if p.step is not None else 0,
    )


def _run_points(job_dir: Path) -> list[Point]:
    """The job's points that are the run's: rank 0's (a line of another rank is there
    only because its script logged with ``all_ranks``)."""
    return list(points(job_dir, ranks=(0,)))


def latest_metrics(job_dir: Path) -> dict[str, Metric]:
    """Each metric's latest point, as MLflow picks it: the highest step, then the latest
    time.

    Every run of a search needs this, and a job's file may hold 32 MiB: the answer is
    kept per file while the file is unchanged (its inode, size and modification time),
    for the :data:`LATEST_KEPT` files read last. An ended job's file never changes.
    """
    path = job_dir / METRICS_FILE
    try:
        st = os.stat(path, follow_symlinks=False)
        mark = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        mark = None
    with _latest_lock:
        kept = _latest.get(path)
        if mark is not None and kept is not None and kept[0] == mark:
            _latest.move_to_end(path)
            return dict(kept[1])
    latest: dict[str, Metric] = {}
    for p in _run_points(job_dir):
        m = _mlflow_metric(p)
        seen = latest.get(m.key)
        if seen is None or (m.step, m.timestamp) >= (seen.step, seen.timestamp):
            latest[m.key] = m
    if mark is not None:
        with _latest_lock:
            _latest[path] = (mark, dict(latest))
            while len(_latest) > LATEST_KEPT:
                _latest.popitem(last=False)
    return latest


LATEST_KEPT = 20_000
"""Files whose latest metrics are kept (a few hundred bytes each for a few metrics)."""
_latest: OrderedDict[Path, tuple[tuple[int, int, int], dict[str, Metric]]] = OrderedDict()
_latest_lock = threading.Lock()


def metric_history(job_dir: Path, key: str) -> list[Metric]:
    """Every point of metric ``key`` in step order, points of one step in the order
    logged (a step logged again by a resumed attempt appears twice, as MLflow keeps it).

    A point written twice (the same step, time and value: a batch the client sent again
    when the endpoint died before it answered) is one, as in MLflow's own stores, whose
    key is that tuple.
    """
    found = dict.fromkeys(_mlflow_metric(p) for p in _run_points(job_dir) if p.name == key)
    return sorted(found, key=lambda m: m.step)


def _append(path: Path, lines: list[str]) -> None:
    if not lines:
        return
    payload = "".join(line + "\n" for line in lines).encode()
    # O_APPEND and one write: a line lands whole, after whatever the ranks wrote.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
