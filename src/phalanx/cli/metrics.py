"""``phalanx job metrics NAME`` and ``phalanx tensorboard NAME…``: a job's metrics."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from phalanx.errors import PhalanxError
from phalanx.workspace import Workspace

console = Console()
METRICS_FILE = "metrics.jsonl"  # phalanx.train.metrics.METRICS_FILE; cli never imports train
_BARS = "▁▂▃▄▅▆▇█"


def read_metrics(job_dir: Path) -> dict[str, list[tuple[int | None, float | None]]]:
    """Each metric's ``(step, value)`` history in step order; a step logged again (by
    the attempt that resumed) keeps its last value. A torn last line is skipped."""
    latest: dict[str, dict[Any, tuple[int, float | None]]] = {}
    try:
        lines = (job_dir / METRICS_FILE).read_text().splitlines()
    except FileNotFoundError:
        return {}
    for order, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        step = record.get("step")
        key = step if step is not None else ("t", order)
        latest.setdefault(str(record["name"]), {})[key] = (order, record.get("value"))
    history: dict[str, list[tuple[int | None, float | None]]] = {}
    for name, points in latest.items():
        stepped = sorted((k, v) for k, (_, v) in points.items() if not isinstance(k, tuple))
        unstepped = sorted((o, v) for k, (o, v) in points.items() if isinstance(k, tuple))
        history[name] = [*stepped, *((None, v) for _, v in unstepped)]
    return history


def sparkline(values: list[float | None], width: int = 24) -> str:
    """The last ``width`` values as bars (gaps for missing ones)."""
    tail = values[-width:]
    finite = [v for v in tail if v is not None]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(
        " " if v is None else _BARS[int((v - low) / span * (len(_BARS) - 1))] for v in tail
    )


def metrics_cmd(name: str, as_json: bool) -> int:
    """Latest value of each metric the job logged, with a compact history."""
    ws = Workspace()
    job = ws.get_job(name)
    history = read_metrics(Path(job.job_dir))
    if as_json:
        click.echo(
            json.dumps(
                {m: [{"step": s, "value": v} for s, v in points] for m, points in history.items()},
                indent=2,
            )
        )
        return 0
    if not history:
        console.print(
            f"job {name} has logged no metrics yet (phalanx.train.log_metric writes them)"
        )
        return 0
    table = Table(box=None, header_style="bold")
    for column in ("METRIC", "STEP", "LATEST", "MIN", "MAX", "HISTORY"):
        table.add_column(column)
    for metric, points in sorted(history.items()):
        values = [v for _, v in points]
        finite = [v for v in values if v is not None]
        step, latest = points[-1]
        table.add_row(
            metric,
            "" if step is None else str(step),
            "nan/inf" if latest is None else f"{latest:.6g}",
            f"{min(finite):.4g}" if finite else "",
            f"{max(finite):.4g}" if finite else "",
            sparkline(values),
        )
    console.print(table)
    return 0


@click.command("tensorboard")
@click.argument("names", nargs=-1, required=True)
@click.option("--port", type=int, default=6006, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
def tensorboard_cmd(names: tuple[str, ...], port: int, host: str) -> int:
    """Start TensorBoard over the event files of one or several jobs (one run per job)."""
    ws = Workspace()
    specs = []
    for name in names:
        folder = Path(ws.get_job(name).job_dir) / "outputs" / "tensorboard"
        if not folder.is_dir():
            raise PhalanxError(
                f"job {name} has no TensorBoard files ({folder}); phalanx.train.log_metric "
                "writes them when the tensorboard package is installed"
            )
        specs.append(f"{name}:{folder}")
    exe = shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or shutil.which(
        "tensorboard"
    )
    if exe is None:
        raise PhalanxError("tensorboard is not installed: pip install 'phalanx[tensorboard]'")
    argv = [exe, "--logdir_spec", ",".join(specs), "--port", str(port), "--host", host]
    console.print(f"TensorBoard on http://{host}:{port} for {', '.join(names)} (Ctrl-C stops it)")
    os.execv(exe, argv)
    return 0  # not reached
