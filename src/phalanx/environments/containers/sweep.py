"""A job's containers, found by label and removed.

Killing the engine's CLI (``podman run``) does not stop its container, so every
path that ends an attempt or a job (the runner's sweep after an attempt, the
supervisor's last sweep, the recovery of a job whose supervisor died) removes the
job's containers by the ``phalanx.job_dir`` (and ``phalanx.attempt``) label.

A job that started a container has a marker file, ``system_logs/containers``,
naming the engine: the sweep of a job without one asks no engine anything.
"""

from __future__ import annotations

import logging
from pathlib import Path

from phalanx.environments.containers.engine import Engine
from phalanx.errors import PhalanxError

log = logging.getLogger(__name__)

MARKER = "containers"


def mark(job_dir: Path, engine: Engine) -> None:
    """Note that the job starts containers with ``engine``."""
    marker = job_dir / "system_logs" / MARKER
    line = f"{engine.name} {engine.path}\n"
    if not marker.is_file() or marker.read_text() != line:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(line)


def marked_engine(job_dir: Path) -> Engine | None:
    """The engine the job started containers with; ``None`` if it started none."""
    try:
        name, _, path = (job_dir / "system_logs" / MARKER).read_text().strip().partition(" ")
    except OSError:
        return None
    return Engine(name, path) if name and path else None


def job_containers(engine: Engine, job_dir: Path, attempt: int | None = None) -> list[str]:
    """IDs of the job's (or one attempt's) containers, running or not."""
    args = ["ps", "-aq", "--no-trunc", "--filter", f"label=phalanx.job_dir={job_dir}"]
    if attempt is not None:
        args += ["--filter", f"label=phalanx.attempt={attempt}"]
    proc = engine.run(args, timeout=60)
    if proc.returncode != 0:
        log.warning("%s ps: %s", engine.name, proc.stderr.strip()[-300:])
        return []
    return proc.stdout.split()


def remove(job_dir: Path, attempt: int | None, grace_s: float) -> int:
    """Stop (SIGTERM, then SIGKILL after ``grace_s``) and remove the job's containers,
    and remove the attempt's environment files.

    Returns:
        How many containers there were.
    """
    engine = marked_engine(job_dir)
    if engine is None:
        return 0
    pattern = f".container_a{attempt if attempt is not None else '*'}_n*.env"
    for env_file in (job_dir / "system_logs").glob(pattern):
        env_file.unlink(missing_ok=True)
    try:
        ids = job_containers(engine, job_dir, attempt)
        if ids:
            engine.run(["stop", "--time", str(max(0, round(grace_s))), *ids], timeout=60 + grace_s)
            engine.run(["rm", "-f", *ids], timeout=60)  # a --rm container may be gone by now
    except PhalanxError as exc:  # an engine that hangs must not hang the sweep
        log.warning("removing the job's containers: %s", exc)
        return 0
    return len(ids)
