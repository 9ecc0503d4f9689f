"""``phalanx job metrics NAME`` and ``phalanx tensorboard NAME…``: a job's metrics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console

from phalanx.errors import PhalanxError
from phalanx.terminal.columns import print_table
from phalanx.workspace.metrics import History

console = Console()
TB_FOLDER = "outputs/tensorboard"
_BARS = "▁▂▃▄▅▆▇█"


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
    """Latest value of each metric the job logged (and of the system metrics sampled
    during it), with a compact history."""
    from phalanx.client.backends import jobs_backend

    history, system = jobs_backend().metrics(name)
    if as_json:
        both = {**history, **system}
        click.echo(
            json.dumps(
                {m: [{"step": s, "value": v} for s, v in points] for m, points in both.items()},
                indent=2,
            )
        )
        return 0
    if history:
        _print_metrics(history, "STEP")
    else:
        console.print(
            f"job {name} has logged no metrics yet (phalanx.train.log_metric writes them)"
        )
    if system:
        console.print()
        _print_metrics(system, "SAMPLE")
    return 0


def _print_metrics(history: History, step_label: str) -> None:
    rows = []
    for metric, points in sorted(history.items()):
        values = [v for _, v in points]
        finite = [v for v in values if v is not None]
        step, latest = points[-1]
        rows.append((metric,  # a rank named it: print_table prints it as plain text
                     "-" if step is None else str(step),
                     "nan/inf" if latest is None else f"{latest:.6g}",
                     f"{min(finite):.4g}" if finite else "-",
                     f"{max(finite):.4g}" if finite else "-",
                     sparkline(values)))  # fmt: skip
    headers = ("METRIC", step_label, "LATEST", "MIN", "MAX", "HISTORY")
    print_table(console, headers, rows, optional=("HISTORY", "MIN", "MAX", step_label))


@click.command("tensorboard")
@click.argument("names", nargs=-1, required=True)
@click.option("--port", type=int, default=6006, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
def tensorboard_cmd(names: tuple[str, ...], port: int, host: str) -> int:
    """Start TensorBoard over the event files of one or several jobs (one run per job).

    With PHALANX_SERVER set, each job's event files are downloaded first (a copy as
    of now, removed when TensorBoard stops) and TensorBoard runs on this machine.
    """
    exe = shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or shutil.which(
        "tensorboard"
    )
    with event_folders(names) as folders:
        if exe is None:
            raise PhalanxError("tensorboard is not installed: pip install 'phalanx[tensorboard]'")
        specs = ",".join(f"{name}:{folder}" for name, folder in folders.items())
        argv = [exe, "--logdir_spec", specs, "--port", str(port), "--host", host]
        console.print(
            f"TensorBoard on http://{host}:{port} for {', '.join(names)} (Ctrl-C stops it)"
        )
        child = subprocess.Popen(argv)
        # Stopped either way, TensorBoard ends first, then the downloaded copy is removed.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.terminate()
            child.wait()
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def event_folders(names: tuple[str, ...]) -> Iterator[dict[str, Path]]:
    """Each job's ``outputs/tensorboard`` folder: its own, or a downloaded copy of the
    server's (removed afterwards).

    Raises:
        PhalanxError: an unknown job, or one without event files.
    """
    from phalanx.client.backends import jobs_backend, remote

    jobs = jobs_backend()
    config = remote()
    tmp = Path(tempfile.mkdtemp(prefix="phalanx-tensorboard-")) if config else None
    try:
        folders = {}
        for name in names:
            folder: Path | None = Path(jobs.get(name).job_dir) / TB_FOLDER
            where = str(folder)
            if tmp is not None:
                from phalanx.client.jobfiles import fetch
                from phalanx.client.jobs import RemoteJobs

                assert isinstance(jobs, RemoteJobs)
                where = (
                    f"{TB_FOLDER} of the job on the server"  # its disk's path means nothing here
                )
                landed = fetch(jobs.client, name, TB_FOLDER, tmp / name)
                folder = None if landed is None else landed.path
            if folder is None or not folder.is_dir():
                raise PhalanxError(
                    f"job {name} has no TensorBoard files ({where}): it has logged no metric "
                    "yet (phalanx.train.log_metric writes them)"
                )
            folders[name] = folder
        yield folders
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
