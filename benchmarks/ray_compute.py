"""Ray compute against local compute for the same job, side by side in one run.

1. Start-up latency: a 2-node DDP job (``init_process_group`` + a barrier) is
   submitted ``--rounds`` times to each target; measured from submission to
   the moment rank 0's command starts, and to Completed.
2. Throughput: ``phalanx bench train`` on 2 nodes × 1 process, on each target;
   the 2 × 1 images/sec of Ray over local (goal ≥ 0.95).

It starts its own two-node Ray cluster on this machine (head + worker, as
``ray start`` does) and stops it at the end::

    python benchmarks/ray_compute.py --rounds 5
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phalanx.bench.raycluster import start_cluster, stop_cluster

PHALANX = str(Path(sys.executable).with_name("phalanx"))
BARRIER = """
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PHALANX_HOME": str(home), "OMP_NUM_THREADS": "1"}


def startup(compute: str, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from submission to rank 0's command starting, and to Completed."""
    (work / "src").mkdir(parents=True, exist_ok=True)
    (work / "src" / "barrier.py").write_text(BARRIER)
    spec = work / "job.yml"
    spec.write_text(
        f"command: python barrier.py\ncode: src\ncompute: {compute}\n"
        "resources: {instance_count: 2}\n"
        "distribution: {type: pytorch, process_count_per_instance: 1}\n"
    )
    submitted = time.time()
    name = subprocess.run(
        [PHALANX, "job", "create", "-f", str(spec)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    while True:
        shown = json.loads(
            subprocess.run(
                [PHALANX, "job", "show", name, "--json"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        if shown["status"] in ("Completed", "Failed", "Canceled"):
            break
        time.sleep(0.1)
    if shown["status"] != "Completed":
        raise SystemExit(f"job {name} on {compute}: {shown['status']}: {shown.get('error')}")
    record = json.loads((Path(shown["job_dir"]) / "system_logs" / "attempt_1" / "rank_0.json")
                        .read_text())  # fmt: skip
    return record["started_at"] - submitted, record["ended_at"] - submitted + 0.0


def throughput(compute: str, out: Path, env: dict[str, str], args: argparse.Namespace) -> float:
    """2 × 1 images/sec of ``phalanx bench train`` on ``compute``."""
    subprocess.run(
        [PHALANX, "bench", "train", "--model", args.model, "--image-size", str(args.image_size),
         "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", "3",
         "--nodes", "2", "--procs-per-node", "1", "--compute", compute, "--out", str(out)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    with open(out / "train.csv") as f:
        rows = {(r["nodes"], r["procs_per_node"]): r for r in csv.DictReader(f)}
    return float(rows[("2", "1")]["img_per_sec_total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="phalanx-ray-bench-"))
    cluster = start_cluster(tmp / "ray")
    try:
        env = _env(tmp / "home")
        targets = {"local": "local", "ray": cluster.gcs_address}
        starts: dict[str, list[tuple[float, float]]] = {k: [] for k in targets}
        for i in range(args.rounds):  # interleaved, so drift hits both alike
            for key, compute in targets.items():
                starts[key].append(startup(compute, tmp / f"{key}-{i}", env))
        if args.rounds:
            print("start-up, seconds (median of", args.rounds, "rounds)")
            print(f"{'target':<8} {'to rank 0 start':>16} {'to completed':>13}")
        for key, values in starts.items():
            if not values:
                continue
            first = statistics.median(v[0] for v in values)
            done = statistics.median(v[1] for v in values)
            print(f"{key:<8} {first:>16.2f} {done:>13.2f}")
        if not args.skip_throughput:
            rates = {k: throughput(c, tmp / f"bench-{k}", env, args) for k, c in targets.items()}
            print(f"2x1 img/s: local {rates['local']:.1f}, ray {rates['ray']:.1f}, "
                  f"ray/local {rates['ray'] / rates['local']:.3f}")  # fmt: skip
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
