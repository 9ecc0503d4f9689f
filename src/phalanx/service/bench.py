"""The benchmark runs a workspace keeps (``phalanx bench``'s ``bench/<run>/results.json``,
written by :mod:`phalanx.bench.record`): a list of them, and one of them whole.

Reads files only, so the server answers without torch; a run's folder name is
checked against :data:`~phalanx.bench.record.RUN_PATTERN` before any path is made.
"""

from __future__ import annotations

import json
import re
from typing import Any

from phalanx.errors import PhalanxError
from phalanx.workspace import Workspace

RESULTS = "results.json"
RUN_PATTERN = re.compile(r"^[0-9]{8}-[0-9]{6}-(train|data)-[0-9a-f]{6}$")
SUMMARY = ("run", "kind", "created_at", "title", "command")


class NoSuchRun(PhalanxError):
    """The workspace keeps no benchmark run of that name (the server answers 404)."""


def _read(ws: Workspace, run: str) -> dict[str, Any]:
    path = ws.home / "bench" / run / RESULTS
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise NoSuchRun(f"no benchmark run {run!r}; `GET /api/v1/bench` lists them") from None
    except (OSError, ValueError) as exc:
        raise PhalanxError(f"benchmark run {run}: {path} cannot be read ({exc})") from None
    if not isinstance(doc, dict):
        raise PhalanxError(f"benchmark run {run}: {path} holds no object")
    return doc


def list_runs(ws: Workspace) -> list[dict[str, Any]]:
    """Every kept run, newest first: its name, kind, time, title, command, and for a
    training run its points' labels with img/s total and efficiency."""
    folder = ws.home / "bench"
    names = sorted((p.name for p in folder.iterdir()), reverse=True) if folder.is_dir() else []
    runs = []
    for name in names:
        if not RUN_PATTERN.match(name):
            continue
        try:
            doc = _read(ws, name)
        except PhalanxError:
            continue  # being written, or not a run: left out of the list
        summary = {key: doc.get(key) for key in SUMMARY}
        summary["points"] = [
            {k: p.get(k) for k in ("label", "img_per_sec_total", "efficiency")}
            for p in doc.get("points", [])
        ]
        runs.append(summary)
    return runs


def show_run(ws: Workspace, run: str) -> dict[str, Any]:
    """One run's results as ``phalanx bench`` kept them.

    Raises:
        PhalanxError: not a run's name.
        NoSuchRun: the workspace keeps no such run.
    """
    if not RUN_PATTERN.match(run):
        raise PhalanxError(
            f"{run!r} is not a benchmark run's name (e.g. 20261125-041500-train-1a2b3c)"
        )
    return _read(ws, run)
