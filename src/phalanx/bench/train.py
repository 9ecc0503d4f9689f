"""Run each point of a training benchmark as a real phalanx job, one after another.

Each point becomes a job spec, written to ``<out>/jobs/<n>x<p>.yml`` (so
``phalanx run`` can repeat it alone), then loaded, checked and submitted the
way ``phalanx run`` does it: ``resources.instance_count`` is the number of
nodes, ``distribution.process_count_per_instance`` the processes per node and
the command ``python -m phalanx.bench.workload …``. The job runs in the
workspace like any other (``phalanx job list`` shows it, experiment
``phalanx-bench``); its result JSON is copied next to the spec.

On local compute every node is a launcher on this machine. Each process then
gets the same number of threads at every point, ``cores / the grid's largest
number of processes`` (at least one), as each process of a GPU job gets one
GPU whatever the number of processes: the efficiency of a CPU run then says
what adding processes costs (all-reduce, memory bandwidth), not how many cores
a lone process could use. Points run one at a time; Ctrl-C cancels the running
job.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from phalanx.bench.grid import GridPoint, PointResult, TrainBenchConfig, with_efficiency
from phalanx.bench.host import usable_cores
from phalanx.bench.workload import RESULT_FILE
from phalanx.errors import PhalanxError, SpecError
from phalanx.jobs.control import cancel, refresh, submit
from phalanx.jobs.prepare import check
from phalanx.spec import JobSpec, load_spec
from phalanx.workspace import JobRecord, JobStatus, Workspace

EXPERIMENT = "phalanx-bench"
JOB_TIMEOUT = "2h"
"""A point that runs longer than this is stopped (and the benchmark with it)."""
STALL_TIMEOUT = "15m"
"""No heartbeat or log line from any rank for this long is a hang."""
POLL_S = 0.5


class BenchJobFailed(PhalanxError):
    """A point's job did not complete; the benchmark stops there."""

    exit_code = 1


def threads_per_process(config: TrainBenchConfig) -> int:
    """CPU threads of every process of every point on local compute (see above)."""
    return max(1, usable_cores() // max(p.processes for p in config.points()))


def job_yaml(config: TrainBenchConfig, point: GridPoint) -> str:
    """The job spec of one point, as YAML text."""
    command = [
        "python", "-m", "phalanx.bench.workload",
        "--model", config.model, "--batch-size", str(config.batch_size),
        "--image-size", str(config.image_size), "--steps", str(config.steps),
        "--warmup", str(config.warmup), "--precision", config.precision,
    ]  # fmt: skip
    doc: dict[str, Any] = {
        "type": "command",
        "experiment_name": EXPERIMENT,
        "display_name": f"bench {config.model} {point.slug}",
        "command": shlex.join(command),
        "compute": config.compute,
        "resources": {"instance_count": point.nodes},
        "distribution": {"type": "pytorch", "process_count_per_instance": point.procs},
        "limits": {"timeout": JOB_TIMEOUT, "stall_timeout": STALL_TIMEOUT},
    }
    if config.compute == "local":
        doc["environment_variables"] = {"OMP_NUM_THREADS": str(threads_per_process(config))}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def write_specs(config: TrainBenchConfig) -> list[tuple[GridPoint, JobSpec]]:
    """Write and validate every point's spec before any job starts.

    Raises:
        PhalanxError: a spec does not validate or cannot run here (e.g. ``--compute``).
    """
    folder = config.out / "jobs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PhalanxError(
            f"--out {config.out}: cannot create {folder} ({exc.strerror}); choose another folder"
        ) from exc
    specs = []
    for point in config.points():
        path = folder / f"{point.slug}.yml"
        path.write_text(job_yaml(config, point))
        try:
            spec = load_spec(path)
        except SpecError as exc:
            if exc.field != "compute":
                raise
            raise PhalanxError(f"--compute {config.compute!r}: {exc.message}") from None
        spec.check_supported()
        specs.append((point, spec))
    ws = Workspace()
    try:
        for _, spec in specs:
            check(spec, ws)
    finally:
        ws.close()
    return specs


def wait(ws: Workspace, name: str) -> JobRecord:
    """The job once it has ended; Ctrl-C cancels it and propagates."""
    try:
        while True:
            job = refresh(ws, ws.get_job(name))  # a supervisor gone marks it Failed
            if job.status.is_terminal:
                return job
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        cancel(ws, name)
        raise


def run_point(
    ws: Workspace, point: GridPoint, spec: JobSpec, out: Path
) -> tuple[str, dict[str, Any]]:
    """Submit one point's job, wait for it, and return its name and result JSON.

    Raises:
        BenchJobFailed: the job failed or was canceled, or wrote no result.
    """
    job = wait(ws, submit(ws, spec, spec.text or "").name)
    where = f"job {job.name} ({point.nodes} node(s) × {point.procs} process(es))"
    more = f"`phalanx job show {job.name}` and `phalanx job stream {job.name} --all-ranks`"
    if job.status is not JobStatus.COMPLETED:
        cause = f": {job.error.message}" if job.error is not None else ""
        raise BenchJobFailed(f"{where} {job.status}{cause}; {more} tell more")
    result = Path(job.job_dir) / "outputs" / RESULT_FILE
    if not result.is_file():
        raise BenchJobFailed(f"{where} completed but wrote no {RESULT_FILE}; {more} tell more")
    text = result.read_text()
    (out / "jobs" / f"{point.slug}.json").write_text(text)
    return job.name, json.loads(text)


def run_grid(
    config: TrainBenchConfig, progress: Callable[[str], None] = lambda _: None
) -> list[PointResult]:
    """Run every point (the baseline first) and return their figures with efficiency.

    Args:
        config: What to run and where to write it.
        progress: Called with a line as each point starts and ends.

    Raises:
        PhalanxError: a spec is invalid (before any job runs).
        BenchJobFailed: a point's job did not complete.
    """
    specs = write_specs(config)
    progress(f"{len(specs)} configuration(s), one job each; results in {config.out}")
    runs: list[tuple[GridPoint, str, dict[str, Any]]] = []
    ws = Workspace()
    try:
        for i, (point, spec) in enumerate(specs, 1):
            what = f"[{i}/{len(specs)}] {point.nodes} node(s) × {point.procs} process(es)"
            progress(f"{what}: running …")
            name, raw = run_point(ws, point, spec, config.out)
            runs.append((point, name, raw))
            progress(
                f"{what}: {raw['img_per_sec_total']:.1f} img/s total, "
                f"{raw['img_per_sec_per_process']:.1f} per process (job {name})"
            )
    finally:
        ws.close()
    return with_efficiency(runs, config)
