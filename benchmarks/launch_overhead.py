"""What phalanx adds on top of bare torchrun: start-up time and steady-state speed.

The same small DDP training script runs, alternately, under

* ``torchrun --nproc-per-node P script.py`` and
* ``phalanx run job.yml`` (one node × P processes, a fresh workspace),

``--repeats`` times each. Measured for each run:

* **time to first step**: from just before the command is started to the
  moment rank 0 finishes its first optimiser step (the script prints a
  wall-clock stamp; both launchers run on this machine, so clocks agree);
* **steady-state steps/s**: rank 0's optimiser steps per second after
  ``--warmup`` steps.

Reported: medians per launcher, the start-up overhead (phalanx − torchrun) and
the steps/s ratio (phalanx / torchrun), both as a ratio of the medians and as
the median of each round's ratio (the two runs of a round share the machine's
load). Goals: overhead ≤ 1.5 s, ratio ≥ 0.99.

Usage::

    .venv/bin/python benchmarks/launch_overhead.py [--procs 2] [--repeats 5] [--steps 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent

SCRIPT = textwrap.dedent(
    """
    import gc, sys, time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    steps, warmup = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    rank = dist.get_rank()
    for step in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if step == 0 and rank == 0:
            print(f"FIRST_STEP {time.time():.6f}", flush=True)
        if step == warmup - 1:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"STEPS_PER_S {(steps - warmup) / elapsed:.3f}", flush=True)
    del model, opt  # DDP holds the group; see phalanx.launch._hook on gloo at exit
    gc.collect()
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse(output: str) -> tuple[float, float]:
    first = re.search(r"FIRST_STEP ([0-9.]+)", output)
    rate = re.search(r"STEPS_PER_S ([0-9.]+)", output)
    if not first or not rate:
        raise RuntimeError(f"the benchmark script's output lacks its stamps:\n{output[-3000:]}")
    return float(first.group(1)), float(rate.group(1))


def run_torchrun(
    script: Path, procs: int, steps: int, warmup: int, env: dict[str, str]
) -> tuple[float, float]:
    cmd = [
        str(BIN / "torchrun"),
        f"--nproc-per-node={procs}",
        f"--master-port={free_port()}",
        "--max-restarts=0",
        str(script),
        str(steps),
        str(warmup),
    ]
    start = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=600)
    first, rate = parse(out.stdout + out.stderr)
    return first - start, rate


def run_phalanx(
    job: Path, env: dict[str, str], preexec: Callable[[], None] | None = None
) -> tuple[float, float]:
    start = time.time()
    out = subprocess.run(
        [str(BIN / "phalanx"), "run", str(job)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=preexec,
    )
    if out.returncode != 0:
        raise RuntimeError(f"phalanx run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    first, rate = parse(out.stdout)
    return first - start, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2, help="processes (ranks) on the node")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        root = Path(tmp)
        code = root / "code"
        code.mkdir()
        script = code / "bench_script.py"
        script.write_text(SCRIPT)
        job = root / "job.yml"
        job.write_text(
            textwrap.dedent(
                f"""
                command: python bench_script.py {args.steps} {args.warmup}
                code: code
                distribution: {{type: pytorch, process_count_per_instance: {args.procs}}}
                """
            )
        )
        env = dict(os.environ)
        env.update(
            {
                "PHALANX_HOME": str(root / "home"),
                "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "GLOO_SOCKET_IFNAME": "lo",
                "OMP_NUM_THREADS": "1",
            }
        )
        results: dict[str, list[tuple[float, float]]] = {"torchrun": [], "phalanx": []}
        for i in range(args.repeats):
            # Alternate so that drift in machine load hits both launchers alike.
            results["torchrun"].append(
                run_torchrun(script, args.procs, args.steps, args.warmup, env)
            )
            results["phalanx"].append(run_phalanx(job, env))
            (t_first, t_rate), (p_first, p_rate) = results["torchrun"][-1], results["phalanx"][-1]
            print(
                f"round {i + 1}: torchrun {t_first:.2f} s / {t_rate:.1f} steps/s, "
                f"phalanx {p_first:.2f} s / {p_rate:.1f} steps/s",
                file=sys.stderr,
            )

    med = {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
        for k, v in results.items()
    }
    overhead = med["phalanx"][0] - med["torchrun"][0]
    ratio = med["phalanx"][1] / med["torchrun"][1]
    # Each round's two runs saw the same machine load: their ratio is the fairer figure.
    paired = statistics.median(
        p[1] / t[1] for t, p in zip(results["torchrun"], results["phalanx"], strict=True)
    )
    shape = f"1 node × {args.procs} processes, {args.repeats} alternating runs each"
    machine = f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}"
    print(f"\nlaunch overhead, {shape}, medians ({machine})\n")
    print("| launcher | time to first step (s) | steady-state steps/s |")
    print("|---|---|---|")
    for name in ("torchrun", "phalanx"):
        print(f"| {name} | {med[name][0]:.2f} | {med[name][1]:.1f} |")
    print(f"\nstart-up overhead: {overhead:+.2f} s (goal ≤ 1.5 s)")
    print(f"steps/s ratio phalanx/torchrun: {ratio:.3f} of medians, {paired:.3f} median of rounds")
    print("(goal ≥ 0.99)")


if __name__ == "__main__":
    main()
