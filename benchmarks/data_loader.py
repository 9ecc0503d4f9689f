"""How fast images reach the training loop: memory, local files, Azurite files, shards.

The benchmark lives in :mod:`phalanx.bench.data` (whose docstring says what each
mode measures) and also runs as ``phalanx bench data``; this script keeps the
command of ``docs/benchmarks.md`` working with the same options and output.

Usage::

    .venv/bin/python benchmarks/data_loader.py [--classes 40] [--per-class 100]
        [--min-side 200] [--max-side 500] [--size 224] [--batch 32] [--workers 2]
        [--shard-mb 4] [--rounds 3] [--rtt-ms 0] [--modes a,b,c,d,e,local]
        [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from phalanx.bench.data import MODES, DataBenchConfig, parse_modes, quick, run_and_report
from phalanx.errors import PhalanxError


def main() -> None:
    defaults = DataBenchConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=defaults.classes)
    parser.add_argument("--per-class", type=int, default=defaults.per_class)
    parser.add_argument("--min-side", type=int, default=defaults.min_side, help="smallest side")
    parser.add_argument("--max-side", type=int, default=defaults.max_side, help="largest side")
    parser.add_argument("--size", type=int, default=defaults.size, help="crop size")
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--workers", type=int, default=defaults.workers, help="every mode")
    parser.add_argument("--shard-mb", type=float, default=defaults.shard_mb)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="latency added to Azurite")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 x 20 images, 1 round")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    try:
        config = DataBenchConfig(
            classes=args.classes, per_class=args.per_class, min_side=args.min_side,
            max_side=args.max_side, size=args.size, batch=args.batch, workers=args.workers,
            shard_mb=args.shard_mb, rounds=args.rounds, rtt_ms=args.rtt_ms,
            modes=parse_modes(args.modes),
        )  # fmt: skip
        if args.quick:
            config = quick(config)
        command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
        run_and_report(config, command, args.json)
    except PhalanxError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")


if __name__ == "__main__":
    main()
