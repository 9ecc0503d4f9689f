"""What running a job's ranks in a container image adds: start-up time and steady-state speed.

The DDP script of ``launch_overhead.py`` runs, alternately, as

* ``phalanx run job.yml`` (one node × P processes), and
* the same job with ``environment: {image: IMAGE}`` (the launcher and its ranks
  in a container of ``IMAGE``; by default the test image, Debian's Python with
  phalanx's torch lent read-only),

``--repeats`` times each, after one unmeasured run of each (the first job of an
image probes it once; later jobs read the answer). Measured as in
``launch_overhead.py``: time to rank 0's first optimiser step from just before
the command starts, and rank 0's steps/s after ``--warmup`` steps.

Reported: medians, the added start-up (image − none) and the steps/s ratio
(image / none), also as the median of each round's ratio. Goals: added start-up
≤ 1 s, ratio ≥ 0.99.

Usage::

    make test-image
    .venv/bin/python benchmarks/container_overhead.py [--procs 2] [--repeats 5] [--steps 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_overhead import BIN, SCRIPT, run_phalanx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2, help="processes (ranks) on the node")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--image", default="phalanx-test-bookworm")
    args = parser.parse_args()

    from phalanx.containers.engine import find_engine

    engine = find_engine()
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as tmp:
        root = Path(tmp)
        code = root / "code"
        code.mkdir()
        (code / "bench_script.py").write_text(SCRIPT)
        jobs = {}
        for kind, environment in (("none", ""), ("image", f"environment: {{image: {args.image}}}")):
            jobs[kind] = root / f"job-{kind}.yml"
            jobs[kind].write_text(
                textwrap.dedent(
                    f"""
                    command: python bench_script.py {args.steps} {args.warmup}
                    code: code
                    distribution: {{type: pytorch, process_count_per_instance: {args.procs}}}
                    """
                )
                + environment
                + "\n"
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
        for kind in jobs:  # unmeasured: the image's probe, the page cache
            run_phalanx(jobs[kind], env)
        results: dict[str, list[tuple[float, float]]] = {"none": [], "image": []}
        for i in range(args.repeats):
            for kind in ("none", "image"):  # alternate: load drift hits both alike
                results[kind].append(run_phalanx(jobs[kind], env))
            (n_first, n_rate), (i_first, i_rate) = results["none"][-1], results["image"][-1]
            print(
                f"round {i + 1}: no image {n_first:.2f} s / {n_rate:.1f} steps/s, "
                f"image {i_first:.2f} s / {i_rate:.1f} steps/s",
                file=sys.stderr,
            )
        left = subprocess.run(
            [engine.path, "ps", "-aq", "--filter", "label=phalanx.job"],
            env=engine.env(), capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip

    med = {
        k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
        for k, v in results.items()
    }
    added = med["image"][0] - med["none"][0]
    ratio = med["image"][1] / med["none"][1]
    paired = statistics.median(
        m[1] / n[1] for n, m in zip(results["none"], results["image"], strict=True)
    )
    shape = f"1 node × {args.procs} processes, {args.repeats} alternating runs each"
    machine = f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}"
    print(f"\ncontainer overhead ({engine.name}, {args.image}), {shape}, medians ({machine})\n")
    print("| environment | time to first step (s) | steady-state steps/s |")
    print("|---|---|---|")
    for name, label in (("none", "phalanx's Python"), ("image", args.image)):
        print(f"| {label} | {med[name][0]:.2f} | {med[name][1]:.1f} |")
    print(f"\nadded start-up: {added:+.2f} s (goal ≤ 1 s)")
    print(f"steps/s ratio image/none: {ratio:.3f} of medians, {paired:.3f} median of rounds")
    print(f"(goal ≥ 0.99); containers left: {len(left)}")


if __name__ == "__main__":
    main()
