"""Elastic compute on Ray's real autoscaler: scale-up to the first step, and scale-down.

It starts a Ray head at no CPUs with Ray's autoscaler over its fake multi-node
provider (real raylet processes of this machine as worker nodes of 1 CPU,
``phalanx.bench.raycluster.start_autoscaling_cluster``), registers an elastic
target (max 2 nodes, ``--idle-time-before-scale-down`` given), and for each
round submits a 2-node job to the cluster at 0 workers:

- **create → first step**: from just before ``phalanx job create`` to rank 0's
  first step (its own ``time.time()``, printed).
- **autoscaler's share**: from the moment phalanx's probe asked the autoscaler
  (``requested_at``) to both worker nodes being alive in Ray (the benchmark
  watches ``ray.nodes()`` every 0.1 s through its own connection). This is
  the node provider's start-up; on a cloud it is the VMs' boot.
- **phalanx's share**: the rest: create → request (queueing, the scheduler's
  round, the probe) plus nodes alive → first step (the probe seeing them,
  the grant, the supervisor's Ray connection, placement, the node agents,
  torchrun). Goal ≤ 5 s.
- **warm start**: the same job again, submitted as soon as the first ends, on
  the nodes phalanx still holds (its idle time): create → first step with no
  scale-up, phalanx's own start-up of a job on the cluster.
- **end → nodes gone**: from the last job's end to both workers gone from Ray.
  Goal ≤ phalanx's idle time + Ray's idle timeout + 30 s.

::

    python benchmarks/elastic.py --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from phalanx.bench.raycluster import start_autoscaling_cluster, stop_cluster

PHALANX = str(Path(sys.executable).with_name("phalanx"))
RAY_IDLE_S = 6.0
PHALANX_IDLE_S = 5
STEP = """
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    print(f"FIRST_STEP {time.time():.3f}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


class Workers:
    """When the cluster's worker count last changed to each value (watched every 0.1 s)."""

    def __init__(self, gcs: str) -> None:
        import ray

        ray.init(address=gcs, logging_level="ERROR", log_to_driver=False)
        self._ray = ray
        self.reached: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last = -1
        while not self._stop.is_set():
            nodes = self._ray.nodes()
            count = sum(1 for n in nodes if n["Alive"] and "CPU" in (n.get("Resources") or {}))
            if count != last:
                self.reached[count] = time.time()
                last = count
            time.sleep(0.1)

    def forget(self) -> None:
        self.reached = {}

    def wait(self, count: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while count not in self.reached:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster never had {count} workers in {timeout} s")
            time.sleep(0.1)
        return self.reached[count]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._ray.shutdown()


def phalanx(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [PHALANX, *args], env=env, capture_output=True, text=True, check=True, timeout=120
    ).stdout


def run_job(env: dict[str, str], work: Path) -> tuple[float, float, dict]:
    """Submit the job and wait for its end: when it was submitted, rank 0's first step."""
    submitted = time.time()
    name = phalanx(env, "job", "create", "-f", str(work / "job.yml")).strip()
    while True:
        job = json.loads(phalanx(env, "job", "show", name, "--json"))
        if job["status"] in ("Completed", "Failed", "Canceled"):
            break
        time.sleep(0.2)
    if job["status"] != "Completed":
        raise RuntimeError(f"job {name} ended {job['status']}: {job.get('error')}")
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt").read_text()
    first = float(next(ln.split()[1] for ln in log.splitlines() if ln.startswith("FIRST_STEP")))
    return submitted, first, job


def one_round(env: dict[str, str], work: Path, workers: Workers) -> dict[str, float]:
    workers.wait(0, timeout=120)
    workers.forget()
    submitted, first, job = run_job(env, work)
    queue = json.loads(phalanx(env, "queue", "--compute", "elastic", "--json"))[0]
    requested = time.time() - queue["scaling"]["requested_s_ago"]
    # requested_s_ago is of the request now standing; in this round that is the scale-up
    # (the scale-down to 0 comes only after the idle time).
    up = workers.wait(2, timeout=10)
    again, again_first, job = run_job(env, work)  # on the nodes still held
    ended = dt.datetime.fromisoformat(job["ended_at"]).timestamp()
    workers.forget()
    gone = workers.wait(0, timeout=PHALANX_IDLE_S + RAY_IDLE_S + 120)
    autoscaler = up - requested
    total = first - submitted
    return {
        "create_to_first_step": total,
        "autoscaler": autoscaler,
        "phalanx": total - autoscaler,
        "create_to_request": requested - submitted,
        "nodes_up_to_first_step": first - up,
        "warm_start": again_first - again,
        "end_to_nodes_gone": gone - ended,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="phx-elastic-"))
    cluster = start_autoscaling_cluster(
        base / "ray", {"cpu1": {"CPU": 1}}, max_workers=2, idle_timeout_s=RAY_IDLE_S
    )
    try:
        env = {**os.environ, "PHALANX_HOME": str(base / "home"), "OMP_NUM_THREADS": "1"}
        work = base / "work"
        (work / "src").mkdir(parents=True)
        (work / "src" / "step.py").write_text(STEP)
        (work / "job.yml").write_text(
            "command: python step.py\ncode: src\ncompute: elastic\n"
            "resources: {instance_count: 2}\n"
            "distribution: {type: pytorch, process_count_per_instance: 1}\n"
        )
        phalanx(env, "compute", "create", "--name", "elastic", "--type", "ray", "--address",
                cluster.client_address, "--max-nodes", "2", "--node-cpus", "1",
                "--cpus-per-node", "1", "--idle-time-before-scale-down",
                f"{PHALANX_IDLE_S}s")  # fmt: skip
        workers = Workers(cluster.gcs_address)
        rounds = []
        for i in range(args.rounds):
            result = one_round(env, work, workers)
            rounds.append(result)
            print(f"round {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.items()),
                  flush=True)  # fmt: skip
        workers.close()
        print(f"\nmedians of {args.rounds} rounds (2 nodes of 1 CPU, Ray's fake provider):")
        for key in rounds[0]:
            print(f"  {key}: {statistics.median(r[key] for r in rounds):.2f} s")
        print(f"  goals: phalanx ≤ 5 s; end_to_nodes_gone ≤ {PHALANX_IDLE_S} + {RAY_IDLE_S:g} "
              "+ 30 s")  # fmt: skip
    finally:
        stop_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
