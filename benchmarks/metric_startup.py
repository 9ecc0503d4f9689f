"""What logging the first metric costs a fresh process: wall time and peak memory.

Three kinds of fresh Python process (this interpreter, this venv) are timed
side by side, round by round, in a rotating order:

* **(a) import torch**: the floor every rank pays anyway;
* **(b) the old way**: ``import torch``, then one scalar through
  ``torch.utils.tensorboard.SummaryWriter`` (which imports the ``tensorboard``
  package, and with it TensorFlow when that is installed), then ``close()``;
* **(c) the new way**: ``import torch``, then ``phalanx.train.log_metric`` once
  with ``PHALANX_OUTPUTS_DIR`` set to a fresh folder (a ``metrics.jsonl`` line
  and an event file written by ``phalanx.tbevents``).

Measured per child: wall time from just before it is started until
``os.wait4`` reaps it, and its peak resident set size (``ru_maxrss`` of that
child alone, from ``wait4``'s rusage). Each child also says whether TensorFlow
ended up in ``sys.modules``. Reported: medians (and min–max of the wall time),
and the ratio of (b) to (c), both whole and above (a). One untimed warm-up
round first, so every case meets a warm page cache.

Usage::

    .venv/bin/python benchmarks/metric_startup.py [--rounds 5] [--warmup 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata

REPORT = 'import sys; print("TF", "tensorflow" in sys.modules)'

CASES = {
    "(a) import torch": "import torch\n" + REPORT,
    "(b) import torch + SummaryWriter, 1 scalar (old)": (
        "import os, torch\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "w = SummaryWriter(log_dir=os.environ['BENCH_DIR'])\n"
        "w.add_scalar('loss', 0.5, 1)\n"
        "w.close()\n" + REPORT
    ),
    "(c) import torch + phalanx log_metric, 1 scalar (new)": (
        "import torch\nfrom phalanx.train import log_metric\nlog_metric('loss', 0.5, 1)\n" + REPORT
    ),
}


@dataclass
class Samples:
    wall_s: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    imports_tf: set[bool] = field(default_factory=set)


def run_child(code: str, folder: str) -> tuple[float, float, bool]:
    """Wall seconds, peak RSS (MiB) and whether TensorFlow was imported, for one child."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "PHALANX_JOB_DIR")}
    env.update(BENCH_DIR=folder, PHALANX_OUTPUTS_DIR=folder)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # TensorFlow's banner
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0 or "TF " not in out:
        raise RuntimeError(f"child exited {proc.returncode}:\n{code}\n{out}")
    # ru_maxrss is in KiB on Linux.
    return wall, usage.ru_maxrss / 1024, "TF True" in out


def version(*dists: str) -> str:
    """The installed version of the first of ``dists`` that is installed."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    args = parser.parse_args()

    names = list(CASES)
    samples = {name: Samples() for name in names}
    for round_no in range(args.warmup + args.rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:  # rotate, so no case always goes first
            with tempfile.TemporaryDirectory() as folder:
                wall, rss, tf = run_child(CASES[name], folder)
            if round_no >= args.warmup:
                s = samples[name]
                s.wall_s.append(wall)
                s.rss_mib.append(rss)
                s.imports_tf.add(tf)
        label = "warm-up" if round_no < args.warmup else f"round {round_no - args.warmup + 1}"
        print(f"{label} done", file=sys.stderr)

    print(
        f"Python {platform.python_version()}, torch {version('torch')}, "
        f"tensorflow {version('tensorflow', 'tensorflow-cpu')}, "
        f"tensorboard {version('tensorboard')}; {args.rounds} rounds, medians\n"
    )
    print("| process | wall time (s) | min–max (s) | peak RSS (MiB) | imports TensorFlow |")
    print("|---|---|---|---|---|")
    med: dict[str, tuple[float, float]] = {}
    for name in names:
        s = samples[name]
        wall, rss = statistics.median(s.wall_s), statistics.median(s.rss_mib)
        med[name] = (wall, rss)
        tf = "/".join("yes" if t else "no" for t in sorted(s.imports_tf))
        print(
            f"| {name} | {wall:.2f} | {min(s.wall_s):.2f}–{max(s.wall_s):.2f} | {rss:.0f} | {tf} |"
        )
    (wa, ra), (wb, rb), (wc, rc) = (med[n] for n in names)
    print()
    print(f"- old / new, whole process: wall {wb / wc:.2f}×, peak RSS {rb / rc:.2f}×")
    print(
        f"- above `import torch`: old {wb - wa:+.2f} s / {rb - ra:+.0f} MiB, "
        f"new {wc - wa:+.2f} s / {rc - ra:+.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
