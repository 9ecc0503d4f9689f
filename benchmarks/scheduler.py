"""The scheduler's own costs: queue latency, and a long queue's effect on the commands.

Two parts, each in a fresh workspace whose built-in ``local`` target is given
one (declared) GPU, so jobs run one at a time:

* **Queue latency.** A job holds the GPU until the benchmark releases it; a
  second job waits in the queue. Measured: from the moment the first job ended
  (its ``ended_at``, when its devices were freed) to the second job's rank 0
  printing its first line. Compared, in the same run, with the same job's
  start-up on an idle queue (from ``job create`` returning to rank 0's first
  line), so the queue's own share is the difference. Goal: ≤ 1 s beyond the
  job's own start-up. ``--rounds`` pairs.
* **A long queue.** ``--queued`` jobs (500) are created with ``phalanx job
  create`` behind one that holds the GPU. Then timed: ``phalanx job list``,
  ``phalanx job list --limit N``, ``phalanx job show`` of a queued job and
  ``phalanx queue`` (each the median of 5 runs, the CLI's start-up included),
  one scheduling round over that queue in this process (the database reads,
  the decision and its transaction), and the decision alone. Goals: the
  commands ≤ 0.5 s, a decision ≤ 50 ms. Also reported: the memory of a job
  waiting in the queue (its supervisor, asleep).

Usage::

    .venv/bin/python benchmarks/scheduler.py [--rounds 5] [--queued 500]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")

HOLD = """
command: >-
  python -c "import os, time, pathlib;
  print('FIRST', time.time(), flush=True);
  gate = pathlib.Path(os.environ['GATES'], os.environ['PHALANX_JOB_NAME']);
  [time.sleep(0.05) for _ in range(100000) if not gate.exists()]"
environment_variables: {GATES: "%s"}
"""


def _run(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([PHALANX, *args], env=env, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def _first_line_time(home: Path, name: str, timeout: float = 120) -> float:
    log = home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith("FIRST "):
                    return float(line.split()[1])
        time.sleep(0.02)
    raise RuntimeError(f"{name}: rank 0 never started")


def _one(home: Path, sql: str, **params: object) -> dict[str, Any]:
    """One row of the workspace database (read directly: a CLI call wakes the scheduler)."""
    from phalanx.workspace import Workspace

    ws = Workspace(home)
    try:
        return dict(ws.query(sql, params)[0])
    finally:
        ws.close()


def _job_row(home: Path, name: str) -> dict[str, Any]:
    return _one(home, "SELECT * FROM jobs WHERE name = :name", name=name)


def _wait_ended(home: Path, name: str, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = _job_row(home, name)
        if row["ended_at"] is not None:
            return float(row["ended_at"])
        time.sleep(0.02)
    raise RuntimeError(f"{name} never ended")


def _workspace(root: Path, tag: str) -> tuple[Path, dict[str, str], Path]:
    home = root / tag / "home"
    gates = root / tag / "gates"
    gates.mkdir(parents=True)
    env = dict(os.environ, PHALANX_HOME=str(home), OMP_NUM_THREADS="1")
    env.pop("PHALANX_DEBUG", None)
    spec = root / tag / "job.yml"
    spec.write_text(HOLD % gates)
    _run(env, "compute", "create", "--type", "local", "--name", "local", "--gpus", "0")
    return home, env, spec


def latency(root: Path, rounds: int) -> dict[str, float]:
    home, env, spec = _workspace(root, "latency")
    gates = spec.parent / "gates"
    idle, queued, granted = [], [], []
    for _ in range(rounds):
        # Idle queue: create → rank 0's first line.
        before = time.time()
        alone = _run(env, "job", "create", "-f", str(spec))
        idle.append(_first_line_time(home, alone) - before)
        # Queued behind it: its devices freed → the next job's rank 0.
        waiting = _run(env, "job", "create", "-f", str(spec))
        time.sleep(1.0)  # well queued, its supervisor asleep
        (gates / alone).touch()
        freed = _wait_ended(home, alone)
        queued.append(_first_line_time(home, waiting) - freed)
        granted.append(_granted_at(home, waiting) - freed)
        (gates / waiting).touch()
        _wait_ended(home, waiting)
    return {
        "idle_start_s": statistics.median(idle),
        "after_free_s": statistics.median(queued),
        "queue_share_s": statistics.median(q - i for q, i in zip(queued, idle, strict=True)),
        "granted_s": statistics.median(granted),
    }


def _granted_at(home: Path, name: str) -> float:
    row = _one(home, "SELECT granted_at FROM allocations WHERE job_name = :name", name=name)
    return float(row["granted_at"])


def long_queue(root: Path, count: int) -> dict[str, float]:
    home, env, spec = _workspace(root, "long")
    holder = _run(env, "job", "create", "-f", str(spec))
    _first_line_time(home, holder)
    names = []
    start = time.monotonic()
    for _ in range(count):
        names.append(_run(env, "job", "create", "-f", str(spec)))
    create_s = (time.monotonic() - start) / count
    # Give the scheduler a round to place them all.
    time.sleep(3)

    def timed(*args: str) -> float:
        samples = []
        for _ in range(5):
            t0 = time.monotonic()
            _run(env, *args)
            samples.append(time.monotonic() - t0)
        return statistics.median(samples)

    middle = names[count // 2]
    out = {
        "create_s": create_s,
        "job_list_s": timed("job", "list"),
        "job_list_all_s": timed("job", "list", "--limit", str(count + 1)),
        "job_show_s": timed("job", "show", middle),
        "queue_s": timed("queue"),
    }
    shown = json.loads(_run(env, "job", "show", middle, "--json"))
    assert shown["queue"] and shown["queue"]["position"], shown
    # One round of the scheduler and one decision, in this process, over that queue.
    os.environ["PHALANX_HOME"] = str(home)
    from phalanx.compute.registry import kind_of
    from phalanx.compute.targets import resolve_target
    from phalanx.jobs import control
    from phalanx.scheduler import ledger
    from phalanx.scheduler.daemon import Scheduler
    from phalanx.scheduler.policy import decide
    from phalanx.workspace import Workspace

    ws = Workspace(home)
    scheduler = Scheduler(ws, control)
    rounds, decisions = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        scheduler.schedule("local")
        rounds.append(time.perf_counter() - t0)
        queued = ledger.queued(ws, "local")
        holding = ledger.holding(ws, "local")
        target = resolve_target("local", ws)
        capacity = kind_of(target).capacity(ws, target)
        assert capacity is not None  # this machine's is always known
        t0 = time.perf_counter()
        decide(capacity, holding, queued, time.time())
        decisions.append(time.perf_counter() - t0)
    out["round_s"] = statistics.median(rounds)
    out["decision_s"] = statistics.median(decisions)
    out["queued_seen"] = float(len(ledger.queued(ws, "local")))
    # Memory of a waiting job: its supervisor, asleep.
    import psutil

    row = _job_row(home, middle)
    proc = psutil.Process(int(row["supervisor_pid"]))
    info = proc.memory_full_info()
    out["waiting_rss_mb"] = info.rss / 2**20
    out["waiting_uss_mb"] = info.uss / 2**20
    for name in [holder, *names]:
        subprocess.run([PHALANX, "job", "cancel", name], env=env, capture_output=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queued", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-sched-bench-") as tmp:
        root = Path(tmp)
        lat = latency(root, args.rounds)
        big = long_queue(root, args.queued)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print()
    print(f"Queue latency (median of {args.rounds})")
    print()
    print("| measured | seconds |")
    print("|---|---|")
    print(f"| idle queue: `job create` → rank 0's first line | {lat['idle_start_s']:.2f} |")
    print(f"| queued: devices freed → rank 0's first line | {lat['after_free_s']:.2f} |")
    print(f"| queued: devices freed → given to the next job | {lat['granted_s']:.3f} |")
    print(f"| the queue's share (queued − idle, per round) | {lat['queue_share_s']:.2f} |")
    print()
    print(f"A queue of {args.queued} jobs (commands: median of 5, CLI start-up included)")
    print()
    print("| measured | value |")
    print("|---|---|")
    print(f"| `phalanx job create` (each, while the queue grows) | {big['create_s']:.2f} s |")
    print(f"| `phalanx job list` | {big['job_list_s']:.2f} s |")
    print(f"| `phalanx job list --limit {args.queued + 1}` | {big['job_list_all_s']:.2f} s |")
    print(f"| `phalanx job show` (a queued job) | {big['job_show_s']:.2f} s |")
    print(f"| `phalanx queue` | {big['queue_s']:.2f} s |")
    print(f"| one scheduling round (reads, decision, transaction) | "
          f"{big['round_s'] * 1000:.1f} ms |")  # fmt: skip
    print(f"| the decision alone ({big['queued_seen']:.0f} queued) | "
          f"{big['decision_s'] * 1000:.1f} ms |")  # fmt: skip
    print(f"| a waiting job's supervisor: RSS / USS | {big['waiting_rss_mb']:.0f} / "
          f"{big['waiting_uss_mb']:.0f} MiB |")  # fmt: skip


if __name__ == "__main__":
    main()
