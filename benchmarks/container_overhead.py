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

A container's processes run in a control group of their own (the engine makes one
per container), and the CPU scheduler's accounting for a group costs something by
itself, with or without an image. Run as root on a machine with cgroup v1's ``cpu``
controller, a third arm measures it: the job without an image, started inside a
fresh ``cpu,cpuacct`` group (as a systemd unit, a Slurm job or a Kubernetes pod
would run it). The image's own cost is then image / (none in a group).

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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_overhead import BIN, SCRIPT, run_phalanx

_CGROUP_V1 = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpuacct"))


def _cpu_group() -> list[Path]:
    """A fresh ``cpu,cpuacct`` group (cgroup v1); empty when none can be made here."""
    made: list[Path] = []
    for controller in _CGROUP_V1:
        group = controller / f"phalanx-bench-{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            for left in made:
                left.rmdir()
            return []
        made.append(group)
    return made


def _join(groups: list[Path]) -> Callable[[], None]:
    def join() -> None:
        for group in groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    return join


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2, help="processes (ranks) on the node")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--image", default="phalanx-test-bookworm")
    args = parser.parse_args()

    from phalanx.environments.containers.engine import find_engine

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
        groups = _cpu_group()
        arms: dict[str, tuple[Path, Callable[[], None] | None]] = {
            "none": (jobs["none"], None),
            "image": (jobs["image"], None),
        }
        if groups:
            arms["grouped"] = (jobs["none"], _join(groups))
        results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in arms}
        try:
            for i in range(args.repeats):
                for kind, (job, preexec) in arms.items():  # alternate: drift hits all alike
                    results[kind].append(run_phalanx(job, env, preexec))
                print(f"round {i + 1}: " + ", ".join(
                    f"{kind} {r[-1][0]:.2f} s / {r[-1][1]:.1f} steps/s"
                    for kind, r in results.items()
                ), file=sys.stderr)  # fmt: skip
        finally:
            for group in groups:
                group.rmdir()
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
    labels = {"none": "phalanx's Python", "image": args.image,
              "grouped": "phalanx's Python in a cpu,cpuacct group"}  # fmt: skip
    for name in results:
        print(f"| {labels[name]} | {med[name][0]:.2f} | {med[name][1]:.1f} |")
    print(f"\nadded start-up: {added:+.2f} s (goal ≤ 1 s)")
    print(f"steps/s ratio image/none: {ratio:.3f} of medians, {paired:.3f} median of rounds")
    if "grouped" in results:
        grouped = med["grouped"][1] / med["none"][1]
        own = statistics.median(
            m[1] / g[1] for g, m in zip(results["grouped"], results["image"], strict=True)
        )
        print(f"steps/s ratio none in a group/none: {grouped:.3f} of medians (the group's cost)")
        print(f"steps/s ratio image/none in a group: {med['image'][1] / med['grouped'][1]:.3f} "
              f"of medians, {own:.3f} median of rounds (the image's own cost)")  # fmt: skip
    print(f"(goal ≥ 0.99); containers left: {len(left)}")


if __name__ == "__main__":
    main()
