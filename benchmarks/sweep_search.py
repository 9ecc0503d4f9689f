"""Sweep jobs on a small real training task: random vs bayesian vs ASHA, and the
scheduler's overhead per trial (issue 26).

Two parts, each through the CLI (``phalanx job create -f sweep.yml``) in a fresh
workspace, one sweep at a time:

* **Search.** The trial trains a one-hidden-layer MLP (torch, one thread, SGD with
  momentum) on a synthetic 5-class problem generated deterministically in the
  trial (a random tanh "teacher" network labels Gaussian inputs, 5 % of labels
  flipped), and logs its validation accuracy each epoch with
  ``phalanx.train.log_metric("val_acc", acc, step=epoch)``. The search space is
  ``lr`` (loguniform 1e-3 … 0.3), ``weight_decay`` (loguniform 1e-6 … 1e-2) and
  ``hidden`` (choice 32, 128, 512); the good region is ``lr`` ≈ 0.01 … 0.02
  with ``hidden`` ≥ 128 and a small weight decay, the only one that reaches
  ``--target`` (val_acc 0.855) within 27 epochs. Three sweeps per seed:
  ``random``, ``bayesian`` (Optuna's TPE) and ``random`` + ``early_termination:
  asha`` (min_resource 1, reduction_factor 3), with the same seed, so ASHA's
  trials get exactly random's values. Each sweep runs until a trial logs
  val_acc ≥ target (then it is canceled) or ``max_total_trials``.

  CPU seconds are measured inside each trial: it logs ``time.process_time()``
  (its rank process's CPU since the process started, so Python's and torch's
  start-up are counted) with each epoch's accuracy, and writes it once more to
  its outputs when it ends or is stopped (SIGTERM). The CPU spent to reach the
  target is every trial's CPU up to the moment the target was first logged
  (a trial running then counts up to that moment, interpolated between its
  records). Counted separately: the same without each trial's start-up (CPU
  before its first epoch). Not counted: the processes around the rank (the
  job's supervisor and torchrun, the sweep's controller).

* **Overhead.** A trial that only writes its start time (no torch) runs
  ``--overhead-trials`` times in a sweep of one trial at a time; the same script
  runs as plain command jobs (``phalanx job create``, one after another) in the
  same workspace. Measured from the database's job records: for each trial, from
  the previous trial's job ending (its slot freed) to the new trial's rank
  starting (the script's first line, ``time.time()``); for the plain jobs, from
  the job being made (``created_at``) to its rank starting: the job's own
  start-up. The scheduler's overhead per trial is the difference of the medians.
  Goal: ≤ 1 s.

Usage::

    .venv/bin/python benchmarks/sweep_search.py [--seeds 2] [--json out.json]
    .venv/bin/python benchmarks/sweep_search.py --quick      # a smoke run, a few minutes
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")

TRIAL = textwrap.dedent(
    """
    import time
    T0, C0 = time.time(), time.process_time()
    import argparse, json, os, signal
    import torch
    from torch import nn
    from phalanx.train import log_metrics

    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--weight_decay", type=float, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--n_train", type=int, required=True)
    a = p.parse_args()
    outputs = os.environ["PHALANX_OUTPUTS_DIR"]

    def write_end(*_):
        with open(os.path.join(outputs, "cpu_end.json"), "w") as f:
            json.dump({"time": time.time(), "cpu_s": time.process_time()}, f)
        os._exit(143 if _ else 0)

    signal.signal(signal.SIGTERM, write_end)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    D, K, N, V = 10, 5, a.n_train, 4000
    W1, W2 = torch.randn(D, 16, generator=g), torch.randn(16, K, generator=g)
    X = torch.randn(N + V, D, generator=g)
    y = (torch.tanh(X @ W1) @ W2).argmax(1)
    flip = torch.rand(N + V, generator=g) < 0.05
    y[flip] = torch.randint(0, K, (int(flip.sum()),), generator=g)
    xt, yt, xv, yv = X[:N], y[:N], X[N:], y[N:]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, a.hidden), nn.ReLU(), nn.Linear(a.hidden, K))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9,
                          weight_decay=a.weight_decay)
    log_metrics({"t0": T0, "c0": C0, "cpu_s": time.process_time()}, step=0)
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(N)
        for i in range(0, N, 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
        with torch.no_grad():
            acc = (model(xv).argmax(1) == yv).float().mean().item()
        log_metrics({"val_acc": acc, "cpu_s": time.process_time()}, step=epoch)
    write_end()
    """
)

SWEEP = textwrap.dedent(
    """
    type: sweep
    trial:
      code: src
      command: >-
        python trial.py --lr ${{{{search_space.lr}}}}
        --weight_decay ${{{{search_space.weight_decay}}}} --hidden ${{{{search_space.hidden}}}}
        --epochs {epochs} --n_train {n_train}
      environment_variables: {{OMP_NUM_THREADS: "1"}}
    search_space:
      lr: {{type: loguniform, min_value: -6.9078, max_value: -1.2040}}
      weight_decay: {{type: loguniform, min_value: -13.8155, max_value: -4.6052}}
      hidden: {{type: choice, values: [32, 128, 512]}}
    sampling_algorithm: {sampling}
    objective: {{primary_metric: val_acc, goal: maximize}}
    {early}
    limits: {{max_total_trials: {trials}, max_concurrent_trials: {concurrent}, timeout: {timeout}}}
    """
)

HELLO = textwrap.dedent(
    """
    import time
    T0 = time.time()
    import json, os, sys
    with open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "start.json"), "w") as f:
        json.dump({"t0": T0}, f)
    from phalanx.train import log_metric
    log_metric("x", float(sys.argv[1]), step=0)
    """
)

HELLO_SWEEP = textwrap.dedent(
    """
    type: sweep
    trial:
      code: src
      command: python hello.py ${{{{search_space.x}}}}
    search_space:
      x: {{type: uniform, min_value: 0, max_value: 1}}
    sampling_algorithm: {{type: random, seed: 0}}
    objective: {{primary_metric: x, goal: maximize}}
    limits: {{max_total_trials: {trials}, max_concurrent_trials: 1, timeout: 600}}
    """
)

HELLO_JOB = textwrap.dedent(
    """
    type: command
    code: src
    command: python hello.py 0.5
    """
)

METHODS = {
    "random": ("{type: random, seed: %d}", ""),
    "bayesian": ("{type: bayesian, seed: %d}", ""),
    "asha": (
        "{type: random, seed: %d}",
        "early_termination: {type: asha, min_resource: 1, reduction_factor: 3}",
    ),
}


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> str:
    proc = subprocess.run(
        [PHALANX, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"phalanx {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _rows(home: Path, sql: str, **params: object) -> list[dict[str, Any]]:
    """Rows of the workspace database, read directly (precise times; no CLI start-up)."""
    from phalanx.workspace import Workspace

    ws = Workspace(home)
    try:
        return [dict(r) for r in ws.query(sql, params)]
    finally:
        ws.close()


def _workspace(root: Path, tag: str, files: dict[str, str]) -> tuple[Path, dict[str, str]]:
    folder = root / tag
    (folder / "src").mkdir(parents=True)
    for name, text in files.items():
        (folder / "src" / name).write_text(text)
    env = dict(os.environ, PHALANX_HOME=str(folder / "home"), OMP_NUM_THREADS="1")
    env.pop("PHALANX_DEBUG", None)
    return folder, env


def _metrics(job_dir: Path) -> list[dict[str, Any]]:
    path = job_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line being written
            continue
    return out


def _wait_terminal(home: Path, sweep: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _rows(home, "SELECT status FROM jobs WHERE name = :n OR parent_name = :n", n=sweep)
        if rows and all(r["status"] in ("Completed", "Failed", "Canceled") for r in rows):
            return
        time.sleep(0.5)
    raise RuntimeError(f"sweep {sweep} and its trials did not end within {timeout:.0f} s")


# -- the search -----------------------------------------------------------------


def run_search(root: Path, method: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    folder, env = _workspace(root, f"{method}-{seed}", {"trial.py": TRIAL})
    home = Path(env["PHALANX_HOME"])
    sampling, early = METHODS[method]
    spec = folder / "sweep.yml"
    spec.write_text(
        SWEEP.format(
            epochs=args.epochs, n_train=args.n_train, sampling=sampling % seed, early=early,
            trials=args.max_trials, concurrent=args.concurrent, timeout=args.sweep_timeout,
        )
    )  # fmt: skip
    started = time.time()
    sweep = _cli(env, "job", "create", "-f", str(spec))
    reached: float | None = None
    deadline = time.monotonic() + args.sweep_timeout + 60
    while time.monotonic() < deadline:
        rows = _rows(home, "SELECT status FROM jobs WHERE name = :n", n=sweep)
        if rows[0]["status"] in ("Completed", "Failed", "Canceled"):
            break
        hits = [
            m["time"]
            for d in (home / "jobs").glob(f"{sweep}_*")
            for m in _metrics(d)
            if m["name"] == "val_acc" and (m["value"] or 0) >= args.target
        ]
        if hits:
            reached = min(hits)
            _cli(env, "job", "cancel", sweep)
            break
        time.sleep(0.5)
    else:
        _cli(env, "job", "cancel", sweep)
    _wait_terminal(home, sweep, 120)
    view = json.loads(_cli(env, "job", "show", sweep, "--json"))["sweep"]
    return _account(home, sweep, view, reached, started, args.target) | {
        "method": method,
        "seed": seed,
    }


def _account(
    home: Path,
    sweep: str,
    view: dict[str, Any],
    reached: float | None,
    started: float,
    target: float,
) -> dict[str, Any]:
    """Per trial: its CPU curve; in all: the CPU and trials spent to reach the target."""
    jobs = {
        r["name"]: r
        for r in _rows(
            home, "SELECT name, created_at, ended_at FROM jobs WHERE parent_name = :n", n=sweep
        )
    }
    trials = []
    for t in view["trials"]:
        job_dir = home / "jobs" / t["job_name"]
        points: list[tuple[float, float]] = []
        first_epoch_cpu = None
        best = None
        hit_at = None
        metrics = _metrics(job_dir)
        for m in metrics:
            if m["name"] == "t0":
                c0 = next(x["value"] for x in metrics if x["name"] == "c0")
                points.append((m["value"], c0))
            elif m["name"] == "cpu_s":
                points.append((m["time"], m["value"]))
                if m["step"] == 0:
                    first_epoch_cpu = m["value"]
            elif m["name"] == "val_acc" and m["value"] is not None:
                best = m["value"] if best is None else max(best, m["value"])
                if hit_at is None and m["value"] >= target:
                    hit_at = m["time"]
        end = job_dir / "outputs" / "cpu_end.json"
        if end.exists():
            e = json.loads(end.read_text())
            points.append((e["time"], e["cpu_s"]))
        points.sort()
        cpu_total = points[-1][1] if points else 0.0
        trials.append({
            "number": t["number"], "state": t["state"], "params": t["params"],
            "value": t["value"], "best_val_acc": best, "reason": t["reason"],
            "epochs": max((s for s, _ in t["curve"] or []), default=0),
            "points": points, "startup_cpu_s": first_epoch_cpu, "cpu_s": cpu_total,
            "hit_at": hit_at, "created_at": jobs[t["job_name"]]["created_at"],
            "ended_at": jobs[t["job_name"]]["ended_at"],
        })  # fmt: skip
    until = reached if reached is not None else float("inf")
    cpu = sum(_cpu_until(t["points"], until) for t in trials)
    startup = sum(
        min(_cpu_until(t["points"], until), t["startup_cpu_s"] or 0.0)
        for t in trials
        if t["points"] and t["points"][0][0] <= until
    )
    hitters = [t for t in trials if t["hit_at"] is not None]
    first = min(hitters, key=lambda t: t["hit_at"]) if hitters else None
    return {
        "sweep": sweep,
        "reached": reached is not None,
        "trials_made": len(trials),
        # Trials made until the target was reached (the one reaching it included).
        "trials_to_target": (first["number"] + 1) if first else None,
        "cpu_to_target_s": cpu,
        "train_cpu_to_target_s": cpu - startup,
        "wall_to_target_s": (reached - started) if reached is not None else None,
        "pruned": sum(1 for t in trials if t["state"] == "pruned"),
        "trials": trials,
    }


def _cpu_until(points: list[tuple[float, float]], until: float) -> float:
    """A trial's CPU seconds at ``until`` (linear between its records)."""
    if not points or points[0][0] > until:
        return 0.0
    for (t1, c1), (t2, c2) in itertools.pairwise(points):
        if t1 <= until <= t2:
            return c1 + (c2 - c1) * ((until - t1) / (t2 - t1) if t2 > t1 else 1.0)
    return points[-1][1]


# -- the overhead ----------------------------------------------------------------


def run_overhead(root: Path, count: int) -> dict[str, Any]:
    folder, env = _workspace(root, "overhead", {"hello.py": HELLO})
    home = Path(env["PHALANX_HOME"])
    (folder / "job.yml").write_text(HELLO_JOB)
    (folder / "sweep.yml").write_text(HELLO_SWEEP.format(trials=count))
    plain = []
    for _ in range(count):
        name = _cli(env, "job", "create", "-f", str(folder / "job.yml"))
        _wait_terminal(home, name, 120)
        plain.append(name)
    sweep = _cli(env, "job", "create", "-f", str(folder / "sweep.yml"))
    _wait_terminal(home, sweep, 60 + 20 * count)
    view = json.loads(_cli(env, "job", "show", sweep, "--json"))["sweep"]

    def record(name: str) -> dict[str, float]:
        (job,) = _rows(home, "SELECT created_at, ended_at FROM jobs WHERE name = :n", n=name)
        (attempt,) = _rows(
            home, "SELECT started_at FROM attempts WHERE job_name = :n AND number = 1", n=name
        )
        t0 = json.loads((home / "jobs" / name / "outputs" / "start.json").read_text())["t0"]
        return {**job, "attempt_at": attempt["started_at"], "t0": t0}

    own = [record(n) for n in plain]
    trials = [record(t["job_name"]) for t in sorted(view["trials"], key=lambda t: t["number"])]
    (made,) = _rows(home, "SELECT created_at FROM jobs WHERE name = :n", n=sweep)
    out = {
        "plain_created_to_rank_s": [r["t0"] - r["created_at"] for r in own],
        "plain_created_to_attempt_s": [r["attempt_at"] - r["created_at"] for r in own],
        "first_trial_sweep_created_to_rank_s": trials[0]["t0"] - made["created_at"],
        "trial_freed_to_created_s": [
            b["created_at"] - a["ended_at"] for a, b in itertools.pairwise(trials)
        ],
        "trial_created_to_rank_s": [r["t0"] - r["created_at"] for r in trials],
        "plain_attempt_to_rank_s": [r["t0"] - r["attempt_at"] for r in own],
        "trial_created_to_attempt_s": [r["attempt_at"] - r["created_at"] for r in trials],
        "trial_attempt_to_rank_s": [r["t0"] - r["attempt_at"] for r in trials],
        "trial_freed_to_rank_s": [b["t0"] - a["ended_at"] for a, b in itertools.pairwise(trials)],
    }
    med = {k: statistics.median(v) for k, v in out.items() if isinstance(v, list)}
    out["median"] = med
    out["overhead_s"] = med["trial_freed_to_rank_s"] - med["plain_created_to_rank_s"]
    return out


def _slot_waits(result: dict[str, Any]) -> list[float]:
    """In a search sweep: for each trial made after the first ones, from the latest
    trial end before it was made (the slot it took) to its rank starting."""
    trials = result["trials"]
    waits = []
    for t in trials:
        ends = [u["ended_at"] for u in trials if u["ended_at"] and u["ended_at"] <= t["created_at"]]
        if ends and t["points"]:
            waits.append(t["points"][0][0] - max(ends))
    return waits


# -- the report -------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for method in METHODS:
        rs = [r for r in results if r["method"] == method]
        hit = [r for r in rs if r["reached"]]
        out[method] = {
            "runs": len(rs),
            "reached": len(hit),
            "trials_to_target": [r["trials_to_target"] for r in rs],
            "cpu_to_target_s": [round(r["cpu_to_target_s"], 2) for r in rs],
            "median_trials": statistics.median(r["trials_to_target"] for r in hit) if hit else None,
            "median_cpu_s": statistics.median(r["cpu_to_target_s"] for r in hit) if hit else None,
            "sum_cpu_s": sum(r["cpu_to_target_s"] for r in rs),
            "sum_train_cpu_s": sum(r["train_cpu_to_target_s"] for r in rs),
            "median_wall_s": statistics.median(r["wall_to_target_s"] for r in hit) if hit else None,
            "pruned": sum(r["pruned"] for r in rs),
            "trials_made": sum(r["trials_made"] for r in rs),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="repetitions of each method")
    parser.add_argument("--target", type=float, default=0.855, help="val_acc to reach")
    parser.add_argument("--epochs", type=int, default=27)
    parser.add_argument("--n-train", dest="n_train", type=int, default=36000)
    parser.add_argument("--max-trials", dest="max_trials", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=2)
    parser.add_argument("--sweep-timeout", dest="sweep_timeout", type=int, default=150)
    parser.add_argument("--overhead-trials", dest="overhead_trials", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a smoke run (a few minutes)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.n_train, args.max_trials = 1, 9, 6000, 6
        args.target, args.sweep_timeout, args.overhead_trials = 0.76, 90, 3
    command = "benchmarks/sweep_search.py " + " ".join(sys.argv[1:])
    results = []
    with tempfile.TemporaryDirectory(prefix="phalanx-sweep-bench-") as tmp:
        root = Path(tmp)
        overhead = run_overhead(root, args.overhead_trials)
        for seed in range(args.seeds):
            for method in METHODS:
                r = run_search(root, method, seed, args)
                print(f"seed {seed} {method:8s}: reached={r['reached']} "
                      f"trials={r['trials_to_target']} cpu={r['cpu_to_target_s']:.1f} s "
                      f"(made {r['trials_made']}, pruned {r['pruned']})", flush=True)  # fmt: skip
                results.append(r)
    summary = summarize(results)
    slot = [w for r in results for w in _slot_waits(r)]
    report = {
        "command": command,
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "arch": platform.machine(),
            "python": platform.python_version(),
        },
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "summary": summary,
        "overhead": overhead,
        "search_slot_to_rank_s": slot,
        "runs": results,
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    rand = summary["random"]
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; target val_acc ≥ {args.target}, "
          f"{args.seeds} seeds")  # fmt: skip
    print()
    print("| method | reached | trials to target (per seed) | median trials | CPU s to target "
          "(per seed) | median CPU s | Σ CPU s | Σ CPU s / random's | Σ training CPU s / "
          "random's | trials pruned / made |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for method, s in summary.items():
        print(
            f"| {method} | {s['reached']}/{s['runs']} | {s['trials_to_target']} | "
            f"{_fmt(s['median_trials'], 'g')} | {s['cpu_to_target_s']} | "
            f"{_fmt(s['median_cpu_s'])} | {s['sum_cpu_s']:.1f} | "
            f"{s['sum_cpu_s'] / rand['sum_cpu_s']:.2f} | "
            f"{s['sum_train_cpu_s'] / rand['sum_train_cpu_s']:.2f} | "
            f"{s['pruned']} / {s['trials_made']} |"
        )
    med = overhead["median"]
    print()
    print(f"Overhead per trial ({args.overhead_trials} trials and plain jobs, medians)")
    print()
    print("| measured | seconds |")
    print("|---|---|")
    print(f"| plain job: made → its rank starts | {med['plain_created_to_rank_s']:.2f} |")
    print(f"| plain job: made → its attempt starts | {med['plain_created_to_attempt_s']:.2f} |")
    print(f"| trial: previous trial ended → this trial made | "
          f"{med['trial_freed_to_created_s']:.3f} |")  # fmt: skip
    print(f"| plain job: its attempt starts → its rank starts | "
          f"{med['plain_attempt_to_rank_s']:.2f} |")  # fmt: skip
    print(f"| trial: made → its attempt starts | {med['trial_created_to_attempt_s']:.2f} |")
    print(f"| trial: its attempt starts → its rank starts | "
          f"{med['trial_attempt_to_rank_s']:.2f} |")  # fmt: skip
    print(f"| trial: made → its rank starts | {med['trial_created_to_rank_s']:.2f} |")
    print(f"| trial: previous trial ended → its rank starts | "
          f"{med['trial_freed_to_rank_s']:.2f} |")  # fmt: skip
    print(f"| first trial: sweep made → its rank starts | "
          f"{overhead['first_trial_sweep_created_to_rank_s']:.2f} |")  # fmt: skip
    print(f"| **overhead per trial** (ended → rank, minus the plain job's own start-up) | "
          f"**{overhead['overhead_s']:+.2f}** |")  # fmt: skip
    if slot:
        print(f"| search sweeps: slot freed → next trial's rank starts (median of "
              f"{len(slot)}) | {statistics.median(slot):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
