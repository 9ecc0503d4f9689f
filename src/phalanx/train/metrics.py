"""Metrics from a training script: one JSON line each, plus TensorBoard event files.

::

    from phalanx.train import log_metric, log_metrics

    log_metrics({"loss": loss, "lr": lr}, step)      # rank 0 only, by default
    log_metric("val/top1", top1, step)

Inside a phalanx job the lines go to ``<job>/metrics.jsonl`` (``phalanx job
metrics NAME`` reads it) and the event files to ``<job>/outputs/tensorboard``
(``phalanx tensorboard NAME`` serves them). Outside one, both go under
``$PHALANX_OUTPUTS_DIR`` when it is set, and nowhere otherwise. A line is
``{"name", "value", "step", "time", "rank", "attempt"}``; after a resume, steps
between the last checkpoint and the failure are logged again by the next attempt
(readers keep the last). Every rank that logs writes an event file of its own,
in ``rank_<r>/``, buffered and written every 10 s, by :func:`flush_metrics` and at
exit. The event files are written by :mod:`phalanx.tbevents`, not by
``torch.utils.tensorboard``, so logging a metric never imports TensorFlow; NaN
and infinities reach TensorBoard as they are.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from phalanx.tbevents import EventFileWriter

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
FLUSH_SECS = 10.0  # how long an event may wait in memory

_lock = threading.Lock()
_writer: EventFileWriter | None = None


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _paths() -> tuple[Path, Path] | None:
    """Where the lines and the event files go; ``None`` outside a job and any outputs dir."""
    job_dir = os.environ.get("PHALANX_JOB_DIR")
    if job_dir:
        return Path(job_dir) / METRICS_FILE, Path(job_dir) / "outputs" / TENSORBOARD_DIR
    outputs = os.environ.get("PHALANX_OUTPUTS_DIR")
    if not outputs:
        return None
    return Path(outputs) / METRICS_FILE, Path(outputs) / TENSORBOARD_DIR


def _tensorboard(folder: Path) -> EventFileWriter:
    global _writer
    # A forked child that logs gets a file of its own (the name carries the pid).
    if _writer is None or _writer.pid != os.getpid():
        # One event file per rank that logs, so ranks never share a file.
        _writer = EventFileWriter(folder / f"rank_{_rank()}", flush_secs=FLUSH_SECS)
        atexit.register(_writer.close)
    return _writer


def log_metrics(
    values: Mapping[str, float], step: int | None = None, *, all_ranks: bool = False
) -> None:
    """Record several metrics at ``step`` (rank 0 only unless ``all_ranks``).

    Args:
        values: Name → number (a tensor with one element is fine).
        step: The training step; ``None`` records the time only.
        all_ranks: Record on every rank (each line names its rank).
    """
    rank = _rank()
    paths = _paths()
    if paths is None or (rank != 0 and not all_ranks):
        return
    now = time.time()
    attempt = int(os.environ.get("PHALANX_ATTEMPT", "1"))
    lines = []
    numbers: dict[str, float] = {}
    for name, value in values.items():
        number = float(value.item() if hasattr(value, "item") else value)
        numbers[name] = number
        record = {
            "name": name,
            # JSON has no NaN or infinity: a diverged loss is logged, as null plus its text.
            "value": number if math.isfinite(number) else None,
            "step": step,
            "time": round(now, 3),
            "rank": rank,
            "attempt": attempt,
        }
        if not math.isfinite(number):
            record["text"] = str(number)
        lines.append(json.dumps(record))
    jsonl, tb_dir = paths
    with _lock:
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        # One write of whole lines to a file opened for appending: lines from
        # several ranks never interleave.
        with open(jsonl, "a") as f:
            f.write("".join(line + "\n" for line in lines))
        _tensorboard(tb_dir).add_scalars(numbers, step, wall_time=now)


def log_metric(
    name: str, value: float, step: int | None = None, *, all_ranks: bool = False
) -> None:
    """Record one metric at ``step``; see :func:`log_metrics`."""
    log_metrics({name: value}, step, all_ranks=all_ranks)


def flush_metrics() -> None:
    """Write buffered TensorBoard events now (they are also written every 10 s and at exit)."""
    with _lock:
        if _writer is not None:
            _writer.flush()
