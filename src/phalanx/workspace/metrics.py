"""Reading a job's metrics back: ``metrics.jsonl`` (from ``phalanx.train.log_metric``)
and the system metrics: ``system_metrics.jsonl`` (sampled by the supervisor, where
the nodes are its machine) and one file per attempt and node sampled by each Ray
node (:func:`node_metrics_file`), read together by :func:`read_system_metrics`.

``phalanx.train.metrics`` writes the first file from inside the ranks; this
module is the reader's side, for the CLI and the model registry.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from phalanx.nofollow import open_file

METRICS_FILE = "metrics.jsonl"  # phalanx.train.metrics.METRICS_FILE; workspace never imports train
SYSTEM_METRICS_FILE = "system_metrics.jsonl"
X = TypeVar("X")  # a point's place on its axis: a step, or seconds
_NODE_FILE = re.compile(r"system_metrics_attempt(\d{1,6})_node(\d{1,6})\.jsonl")

# A job's ranks write the first file, so its reader (a server's thread, the registry)
# reads it in bounded memory and time: at most MAX_BYTES of it (a job logging more
# than that should log less often), a line longer than MAX_LINE is skipped, and a
# link is never followed.
MAX_BYTES = 32 << 20
MAX_LINE = 64 << 10
_CHUNK = 1 << 20

History = dict[str, list[tuple[int | None, float | None]]]


def read_metrics(job_dir: Path, file: str = METRICS_FILE) -> History:
    """Each metric's ``(step, value)`` history in step order; a step logged again (by
    the attempt that resumed) keeps its last value. A torn last line is skipped."""
    latest: dict[str, dict[Any, tuple[int, float | None]]] = {}
    for order, name, step, value in _records(job_dir / file):
        key = step if step is not None else ("t", order)
        latest.setdefault(name, {})[key] = (order, value)
    history: History = {}
    for name, points in latest.items():
        stepped = sorted((k, v) for k, (_, v) in points.items() if not isinstance(k, tuple))
        unstepped = sorted((o, v) for k, (o, v) in points.items() if isinstance(k, tuple))
        history[name] = [*stepped, *((None, v) for _, v in unstepped)]
    return history


def curve(job_dir: Path, name: str) -> list[tuple[int, float]]:
    """Metric ``name``'s finite ``(step, value)`` points in step order, a point logged
    without a step numbered by its place (what a sweep judges a trial by)."""
    return [
        (step if step is not None else index, float(value))
        for index, (step, value) in enumerate(read_metrics(job_dir).get(name, []))
        if value is not None and math.isfinite(value)
    ]


def node_metrics_file(attempt: int, node: int) -> str:
    """The file a Ray node samples its machine into during one attempt."""
    return f"system_metrics_attempt{attempt}_node{node}.jsonl"


def _node_files(job_dir: Path) -> list[tuple[int, str]]:
    """``(node, file)`` of each Ray node's samples, by node then attempt."""
    found = []
    with contextlib.suppress(OSError), os.scandir(job_dir) as entries:
        for entry in entries:
            if match := _NODE_FILE.fullmatch(entry.name):
                found.append((int(match[2]), int(match[1]), entry.name))
    return [(node, file) for node, _attempt, file in sorted(found)]


def read_system_metrics(job_dir: Path) -> History:
    """The system metrics of every machine the job ran on. The supervisor's samples keep
    their names (``system/cpu_percent``); node K's are ``system/node<K>/…``, numbered
    on across the attempts (each attempt's agent counts from 0)."""
    history = read_metrics(job_dir, SYSTEM_METRICS_FILE)
    for node, file in _node_files(job_dir):
        for name, points in read_metrics(job_dir, file).items():
            series = history.setdefault(name.replace("system/", f"system/node{node}/", 1), [])
            start = len(series)
            series.extend((start + i, value) for i, (_, value) in enumerate(points))
    return history


Timeline = dict[str, list[tuple[float, float | None]]]


def read_system_timeline(job_dir: Path, since: float | None = None) -> Timeline:
    """The system metrics named as :func:`read_system_metrics` names them, each against
    the seconds since ``since`` (the job's start; its first sample when ``None``), in
    time order: what a chart draws them against (a sample's number says nothing of
    when it was taken, and the sampler slows down after the first minute)."""
    series: dict[str, list[tuple[float, float | None]]] = {}
    files: list[tuple[int | None, str]] = [(None, SYSTEM_METRICS_FILE), *_node_files(job_dir)]
    for node, file in files:
        for p in points(job_dir, file):
            if p.time is None:
                continue
            name = p.name if node is None else p.name.replace("system/", f"system/node{node}/", 1)
            series.setdefault(name, []).append((p.time, p.value))
    if since is None:
        since = min((t for s in series.values() for t, _ in s), default=0.0)
    return {
        name: [(round(t - since, 3), v) for t, v in sorted(s, key=lambda p: p[0])]
        for name, s in series.items()
    }


def latest_metrics(job_dir: Path, file: str = METRICS_FILE) -> dict[str, float | None]:
    """The value each metric was last logged with (in the order the lines were written)."""
    return {name: value for _, name, _, value in _records(job_dir / file)}


class Point(NamedTuple):
    """One logged value as written: ``time`` in seconds (``None`` when the line has none)."""

    name: str
    step: int | None
    value: float | None
    time: float | None


def points(
    job_dir: Path, file: str = METRICS_FILE, *, ranks: tuple[int, ...] | None = None
) -> Iterator[Point]:
    """Every readable line of the file in the order written, none collapsed: what an
    MLflow metric history returns (the same step may appear more than once).

    Args:
        ranks: Only the lines of these ranks (a line naming none is rank 0's).
    """
    for line in bounded_lines(job_dir / file):
        try:
            record = json.loads(line)
            name = str(record["name"])
        except (ValueError, KeyError, TypeError):
            continue
        if ranks is not None and record.get("rank", 0) not in ranks:
            continue
        step, value, when = record.get("step"), record.get("value"), record.get("time")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            continue
        if step is not None and not -(2**63) <= step < 2**63:
            continue  # no reader (MLflow's int64, the studio's numbers) takes it
        if value is None and isinstance(record.get("text"), str):
            value = _special(record["text"])
        # The file is the job's to write: a time of NaN or 400 digits is no time.
        yield Point(name, step, _float(value), _float(when, finite=True))


def _float(value: object, *, finite: bool = False) -> float | None:
    """``value`` as a float; ``None`` for anything else (an int too big for a float,
    with ``finite`` also NaN and the infinities)."""
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if not finite or math.isfinite(number) else None


def _special(text: str) -> float | None:
    """NaN and the infinities, which a line holds as text (JSON has no such numbers)."""
    try:
        number = float(text)
    except ValueError:
        return None
    return None if math.isfinite(number) else number


def _records(path: Path) -> Iterator[tuple[int, str, int | None, float | None]]:
    """``(line number, name, step, value)`` of each readable line, as log_metric writes
    them: lines that do not parse (a torn last one) or whose step is not a whole
    number are skipped."""
    for order, line in enumerate(bounded_lines(path)):
        try:
            record = json.loads(line)
            name = str(record["name"])
        except (ValueError, KeyError, TypeError):
            continue
        step = record.get("step")
        if step is None or (isinstance(step, int) and not isinstance(step, bool)):
            yield order, name, step, record.get("value")


def bounded_lines(path: Path) -> Iterator[bytes]:
    """The file's lines within the bounds above (none when it is missing, a link or not
    a regular file); the last one too if it ends without a newline."""
    try:
        fd = open_file(path)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        left, pending, skipping = MAX_BYTES, b"", False
        while left > 0 and (chunk := f.read(min(_CHUNK, left))):
            left -= len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if skipping:  # the end of a line too long to keep
                    skipping = False
                elif len(line) <= MAX_LINE:
                    yield line
            if len(pending) > MAX_LINE:
                pending, skipping = b"", True
        if pending and not skipping:
            yield pending


def downsample(points: list[tuple[X, float | None]], most: int) -> list[tuple[X, float | None]]:
    """At most about ``most`` points that draw the same curve: the series cut into
    ``most // 2`` buckets, each kept as its lowest and highest point in step order
    (a spike survives, unlike with every n-th point). First and last points are kept."""
    if len(points) <= most:
        return points
    buckets = max(1, most // 2)
    size = len(points) / buckets
    out: list[tuple[X, float | None]] = [points[0]]
    for b in range(buckets):
        chunk = points[int(b * size) : int((b + 1) * size)]
        valued = [p for p in chunk if p[1] is not None]
        if not valued:
            continue
        low = min(valued, key=lambda p: p[1])  # type: ignore[arg-type,return-value]
        high = max(valued, key=lambda p: p[1])  # type: ignore[arg-type,return-value]
        pair = (low, high) if chunk.index(low) <= chunk.index(high) else (high, low)
        out.extend(p for p in pair if p is not out[-1])
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out
