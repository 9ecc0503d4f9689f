"""What logging with MLflow costs a phalanx job (issue 25).

Three measurements, each on real jobs under ``phalanx run`` in a fresh workspace,
the MLflow client talking to the node's endpoint as it does in any job:

* **rate**: one rank calls ``mlflow.log_metric`` ``--points`` times in a tight loop
  (then, again, ``mlflow.log_metrics`` with 10 metrics a call, as a script logging
  several values a step does).
  *Accepted* is calls per second of the loop (what the script's thread pays);
  *delivered* counts until ``mlflow.flush_async_logging()`` returns (every point in
  the job's ``metrics.jsonl``). The file is then counted: every point must be there.
  Goal: ≥ 10,000 points/s accepted.
* **step overhead**: the DDP workload of ``launch_overhead.py`` (1 node × 2 ranks,
  gloo), rank 0 reading the loss every step (``loss.item()``) and, alternately,
  logging nothing more, logging it with ``phalanx.train.log_metric``, or logging it
  with ``mlflow.log_metric``; ``--rounds`` rounds in a rotating order. Reported:
  median steady-state steps/s of each, the ratio of the medians and the median of
  each round's ratio (a round's runs share the machine's load). Goal: MLflow's step
  time within 1 %.
* **delay**: rank 0 logs a point every 20 ms for ``--seconds`` (its value the
  wall-clock time it was logged) while this process reads the job's
  ``metrics.jsonl`` (what ``phalanx job metrics`` reads) every 5 ms; the delay of a
  point is when it was first read minus its value. Goal: p99 ≤ 2 s.

Usage::

    .venv/bin/python benchmarks/mlflow_logging.py [--points 100000] [--rounds 5]
        [--steps 2000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

BIN = Path(sys.executable).parent

RATE = textwrap.dedent(
    """
    import sys, time, mlflow
    n, per_call = int(sys.argv[1]), int(sys.argv[2])
    names = [f"rate{k}" for k in range(per_call)]
    mlflow.log_metric("warm", 0, step=0)
    mlflow.flush_async_logging()
    start = time.perf_counter()
    if per_call == 1:
        for i in range(n):
            mlflow.log_metric("rate0", float(i), step=i)
    else:
        for i in range(n // per_call):
            mlflow.log_metrics({m: float(i) for m in names}, step=i)
    accepted = time.perf_counter() - start
    mlflow.flush_async_logging()
    delivered = time.perf_counter() - start
    print(f"ACCEPTED {n / accepted:.1f} DELIVERED {n / delivered:.1f}", flush=True)
    """
)

STEPS = textwrap.dedent(
    """
    import gc, sys, time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps, warmup, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if how == "mlflow":
        import mlflow
        log = lambda value, step: mlflow.log_metric("loss", value, step=step)
    elif how == "phalanx":
        from phalanx.train import log_metric
        log = lambda value, step: log_metric("loss", value, step)
    else:
        log = lambda value, step: None
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    rank = dist.get_rank()
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0:
            log(loss.item(), step)
        if step == warmup - 1:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"STEPS_PER_S {(steps - warmup) / elapsed:.3f}", flush=True)
    del model, opt
    gc.collect()
    dist.destroy_process_group()
    """
)

TICKS = textwrap.dedent(
    """
    import sys, time, mlflow
    end = time.time() + float(sys.argv[1])
    step = 0
    while time.time() < end:
        mlflow.log_metric("now", time.time(), step=step)
        step += 1
        time.sleep(0.02)
    print(f"TICKS {step}", flush=True)
    """
)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PHALANX_"))}
    env.update(PHALANX_HOME=str(home), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    return env


def _job(folder: Path, script: str, command: str, procs: int = 1) -> Path:
    code = folder / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "bench.py").write_text(script)
    spec = folder / "job.yml"
    spec.write_text(
        f"command: {command}\ncode: code\n"
        f"distribution: {{type: pytorch, process_count_per_instance: {procs}}}\n"
    )
    return spec


def _run(spec: Path, home: Path) -> tuple[str, Path]:
    """``phalanx run``; rank 0's log and the job's folder."""
    out = subprocess.run([str(BIN / "phalanx"), "run", str(spec)], env=_env(home),
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    jobs = sorted((home / "jobs").iterdir(), key=lambda p: p.stat().st_mtime)
    job_dir = jobs[-1]
    log = (job_dir / "user_logs" / "std_log_process_0.txt").read_text()
    if out.returncode != 0:
        raise RuntimeError(f"the job failed:\n{out.stderr[-2000:]}\n{log[-3000:]}")
    return log, job_dir


def _points(job_dir: Path, name: str) -> int:
    text = (job_dir / "metrics.jsonl").read_text()
    return sum(1 for line in text.splitlines() if json.loads(line)["name"] == name)


def _ratios(seen: dict[str, list[float]], how: str) -> float:
    """The median of each round's ratio to no logging (a round's runs share the load)."""
    return statistics.median(a / b for a, b in zip(seen[how], seen["none"], strict=True))


def rate(work: Path, points: int, per_call: int) -> dict[str, float]:
    spec = _job(work / f"rate{per_call}", RATE, f"python bench.py {points} {per_call}")
    log, job_dir = _run(spec, work / "home-rate")
    found = re.search(r"ACCEPTED ([0-9.]+) DELIVERED ([0-9.]+)", log)
    if found is None:
        raise RuntimeError(log[-3000:])
    kept = sum(_points(job_dir, f"rate{k}") for k in range(per_call))
    return {"accepted": float(found[1]), "delivered": float(found[2]), "kept": kept,
            "points": points}  # fmt: skip


def steps(work: Path, rounds: int, count: int) -> dict[str, list[float]]:
    ways = ["none", "phalanx", "mlflow"]
    seen: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(rounds):
        order = ways[r % 3 :] + ways[: r % 3]
        for how in order:
            spec = _job(work / f"steps-{how}", STEPS, f"python bench.py {count} 100 {how}", 2)
            log, _ = _run(spec, work / "home-steps")
            found = re.search(r"STEPS_PER_S ([0-9.]+)", log)
            if found is None:
                raise RuntimeError(log[-3000:])
            seen[how].append(float(found[1]))
            print(f"  round {r + 1} {how}: {found[1]} steps/s", flush=True)
    return seen


def delay(work: Path, seconds: float) -> list[float]:
    home = work / "home-delay"
    spec = _job(work / "delay", TICKS, f"python bench.py {seconds}")
    made = subprocess.run([str(BIN / "phalanx"), "job", "create", "-f", str(spec)],
                          env=_env(home), capture_output=True, text=True, check=True)  # fmt: skip
    metrics = home / "jobs" / made.stdout.strip() / "metrics.jsonl"
    delays: list[float] = []
    offset = 0
    pending = b""
    ended: float | None = None
    deadline = time.time() + seconds + 120
    while time.time() < deadline:
        if metrics.exists():
            with open(metrics, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            now = time.time()
            offset += len(chunk)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                record = json.loads(line)
                if record["name"] == "now":
                    delays.append(now - record["value"])
        rank0 = metrics.parent / "user_logs" / "std_log_process_0.txt"
        if ended is None and rank0.exists() and "TICKS" in rank0.read_text():
            ended = time.time()  # the script is done; what it logged arrives within seconds
        if ended is not None and time.time() - ended > 3:
            break
        time.sleep(0.005)
    subprocess.run([str(BIN / "phalanx"), "job", "show", made.stdout.strip()], env=_env(home),
                   capture_output=True, timeout=60)  # fmt: skip
    return delays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    machine = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-mlflow-") as tmp:
        work = Path(tmp)
        print(f"rate ({machine}):")
        for per_call in (1, 10):
            got = rate(work, args.points, per_call)
            call = "mlflow.log_metric" if per_call == 1 else "mlflow.log_metrics, 10 a call"
            print(f"  {call}: {got['accepted']:,.0f} points/s accepted, "
                  f"{got['delivered']:,.0f} delivered; {got['kept']:,} of {got['points']:,} "
                  "in the job's metrics", flush=True)  # fmt: skip
        print("\nstep overhead (1 node x 2 ranks):")
        seen = steps(work, args.rounds, args.steps)
        base = statistics.median(seen["none"])
        print("| logging | median steps/s | ratio of medians | median of round ratios |")
        print("|---|---|---|---|")
        for how, values in seen.items():
            median = statistics.median(values)
            print(f"| {how} | {median:.1f} | {median / base:.3f} | {_ratios(seen, how):.3f} |")
        delays = sorted(delay(work, args.seconds))
        if not delays:
            raise RuntimeError("no point was read")
        p = {q: delays[min(len(delays) - 1, int(q / 100 * len(delays)))] for q in (50, 99)}
        print(f"\ndelay log_metric -> metrics.jsonl, {len(delays)} points: "
              f"p50 {p[50]:.3f} s, p99 {p[99]:.3f} s, max {delays[-1]:.3f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
