"""Recovery time: from a rank killed mid-training to the next training step.

Runs the reference workload (examples/imagenet/train.py, small: ResNet-18,
32 px, 2 nodes × 1 process, a checkpoint every 4 steps) under ``phalanx``,
SIGKILLs rank 1 once the step-4 checkpoint is committed, and times, with a
monotonic clock polled every 20 ms:

* **detect + stop**: from the kill until the first attempt is recorded as ended;
* **recovery**: from the kill until rank 0 logs a training step of the next
  attempt (resumed from the checkpoint).

Goal: recovery ≤ 10 s on one machine. Repeated ``--repeats`` times; medians.

Usage::

    .venv/bin/python benchmarks/recovery.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"epoch \d+ step \d+/\d+ ")

JOB = f"""
command: >-
  python train.py --arch resnet18 --num-classes 10 --image-size 32 --batch-size 4
  --epochs 4 --steps-per-epoch 10 --log-interval 1 --checkpoint-every 4
  --output-dir ${{{{outputs.model}}}}
code: {REPO / "examples" / "imagenet"}
outputs: {{model: {{type: uri_folder}}}}
environment_variables: {{OMP_NUM_THREADS: "1"}}
resources: {{instance_count: 2}}
distribution: {{type: pytorch, process_count_per_instance: 1}}
retry: {{max_attempts: 2}}
"""


def phalanx(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([str(BIN / "phalanx"), *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"phalanx {' '.join(args)}: {out.stderr}")
    return out.stdout


def wait_for(condition: object, timeout: float = 180) -> float:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.02)
    return time.monotonic()


def is_rank_1_trainer(proc: psutil.Process, job_dir: Path) -> bool:
    try:
        env, cmdline = proc.environ(), proc.cmdline()
    except psutil.Error:
        return False
    return (
        env.get("PHALANX_JOB_DIR") == str(job_dir)
        and env.get("RANK") == "1"
        and "train.py" in " ".join(cmdline)
        and "phalanx.launch.worker" not in cmdline
    )


def one_run(env: dict[str, str], spec: Path) -> tuple[float, float]:
    name = phalanx(env, "job", "create", "-f", str(spec)).strip()
    job_dir = Path(env["PHALANX_HOME"]) / "jobs" / name
    log0 = job_dir / "user_logs" / "std_log_process_0.txt"
    committed = job_dir / "checkpoints" / "step_000000000004" / "COMMITTED"
    wait_for(committed.exists)
    victim = next(p for p in psutil.process_iter() if is_rank_1_trainer(p, job_dir))
    killed = time.monotonic()
    victim.send_signal(signal.SIGKILL)

    def attempt_ended() -> bool:
        job = json.loads(phalanx(env, "job", "show", name, "--json"))
        return bool(job["attempts"]) and job["attempts"][0]["ended_at"] is not None

    stopped = wait_for(attempt_ended)

    def resumed_step() -> bool:
        text = log0.read_text()
        at = text.find("resumed from checkpoint")
        return at >= 0 and STEP.search(text, at) is not None

    resumed = wait_for(resumed_step)
    phalanx(env, "job", "cancel", name)
    return stopped - killed, resumed - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-recovery-") as tmp:
        spec = Path(tmp) / "job.yml"
        spec.write_text(textwrap.dedent(JOB))
        env = dict(os.environ, PHALANX_HOME=str(Path(tmp) / "home"), GLOO_SOCKET_IFNAME="lo")
        runs = []
        for i in range(args.repeats):
            runs.append(one_run(env, spec))
            print(f"run {i + 1}: stopped after {runs[-1][0]:.2f} s, "
                  f"training again after {runs[-1][1]:.2f} s", file=sys.stderr)  # fmt: skip
    stop = statistics.median(r[0] for r in runs)
    recover = statistics.median(r[1] for r in runs)
    print(f"\nrecovery from a killed rank, {args.repeats} runs, medians\n")
    print("| phase | seconds |")
    print("|---|---|")
    print(f"| kill → attempt recorded as ended (detect + stop the gang) | {stop:.2f} |")
    print(f"| kill → first training step of the next attempt | {recover:.2f} |")
    print(f"\ngoal: recovery ≤ 10 s · {'met' if recover <= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
