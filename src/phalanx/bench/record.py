"""A benchmark's results kept in the workspace, for the studio's ``/bench`` page.

Every ``phalanx bench train`` (and ``phalanx bench data``) run also writes
``$PHALANX_HOME/bench/<run>/results.json`` beside what it writes to ``--out``:
the machine, the command, and the figures as :mod:`phalanx.bench.grid` and
:mod:`phalanx.bench.report` computed them (no sum redone here), with the
published anchors the run is read against. Files, not database rows: a run is
written once and only read after, and the workspace's schema stays as it is.
:mod:`phalanx.service.bench` lists and reads them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from phalanx.bench.anchors import ANCHORS
from phalanx.bench.grid import BASELINE, PointResult, TrainBenchConfig
from phalanx.bench.host import machine
from phalanx.bench.report import title
from phalanx.service.bench import RESULTS
from phalanx.workspace.layout import phalanx_home


def bench_dir(home: Path | None = None) -> Path:
    """Where runs are kept: ``<workspace>/bench``."""
    return (home or phalanx_home()) / "bench"


def _write(kind: str, doc: dict[str, Any], home: Path | None) -> Path:
    now = time.time()
    stamp = dt.datetime.fromtimestamp(now).strftime("%Y%m%d-%H%M%S")
    run = f"{stamp}-{kind}-{secrets.token_hex(3)}"  # service.bench.RUN_PATTERN
    folder = bench_dir(home) / run
    folder.mkdir(parents=True, exist_ok=True)
    body = {"run": run, "kind": kind, "created_at": now, **doc}
    tmp = folder / f".{RESULTS}.tmp"
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    os.replace(tmp, folder / RESULTS)  # a reader never sees half a file
    return folder / RESULTS


def record_train(
    results: list[PointResult],
    config: TrainBenchConfig,
    command: str,
    home: Path | None = None,
) -> Path:
    """Keep a training benchmark's points (img/s total and per process, efficiency,
    the ideal of each), its set-up and the anchors; the path written."""
    base = next(r for r in results if r.point == BASELINE).img_per_sec_total
    points = [
        {
            "label": r.point.label,
            "nodes": r.point.nodes,
            "procs_per_node": r.point.procs,
            "processes": r.point.processes,
            "job": r.job,
            "img_per_sec_total": r.img_per_sec_total,
            "img_per_sec_per_process": r.img_per_sec_per_process,
            "ideal_img_per_sec": base * r.point.processes,
            "efficiency": r.efficiency,
            "in_grid": r.in_grid,
            "raw": r.raw,
        }
        for r in results
    ]
    setup = asdict(config)
    setup["out"] = str(config.out.resolve())
    doc = {
        "title": title(results),
        "command": command,
        "machine": machine(),
        "config": setup,
        "baseline_img_per_sec": base,
        "points": points,
        "anchors": [asdict(a) for a in ANCHORS],
    }
    return _write("train", doc, home)


def record_data(result: dict[str, Any], home: Path | None = None) -> Path:
    """Keep a data-loading benchmark's summary (:func:`phalanx.bench.data.summarise`)."""
    return _write("data", {"title": "data loading", **result}, home)
