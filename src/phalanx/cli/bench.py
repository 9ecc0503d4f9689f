"""``phalanx bench …``: training throughput across nodes × processes, and data loading.

The benchmark modules (and torch) are imported inside each command, so the
rest of the CLI starts as fast without them.
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markdown import Markdown

console = Console()
err_console = Console(stderr=True)

PRECISION_CHOICES = ("auto", "fp32", "amp", "bf16")


def _command_line() -> str:
    return "phalanx " + shlex.join(sys.argv[1:])


@click.group("bench")
def bench_group() -> None:
    """Benchmarks: training throughput (scaling across nodes × processes) and data loading."""


@bench_group.command("train")
@click.option("--model", default="resnet50", show_default=True, help="resnet18 … resnet152.")
@click.option("--batch-size", type=int, default=64, show_default=True, help="Per process.")
@click.option("--image-size", type=int, default=224, show_default=True, help="Side in pixels.")
@click.option("--steps", type=int, default=50, show_default=True, help="Timed steps per point.")
@click.option("--warmup", type=int, default=10, show_default=True, help="Untimed steps first.")
@click.option(
    "--precision",
    type=click.Choice(PRECISION_CHOICES),
    default="auto",
    show_default=True,
    help="auto: amp on GPU, fp32 on CPU. amp: fp16 autocast on GPU (bf16 on CPU).",
)
@click.option("--nodes", default="1", show_default=True, help="Node counts, e.g. 1,2.")
@click.option(
    "--procs-per-node", default="1", show_default=True, help="Processes per node, e.g. 1,2,4."
)
@click.option("--compute", default="local", show_default=True, help="The jobs' compute target.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results folder; default ./bench-results/<timestamp>.",
)
def train_cmd(
    model: str,
    batch_size: int,
    image_size: int,
    steps: int,
    warmup: int,
    precision: str,
    nodes: str,
    procs_per_node: str,
    compute: str,
    out: Path | None,
) -> int:
    """Run the synthetic ResNet workload as one job per nodes × processes; report scaling.

    Every combination of --nodes and --procs-per-node is a real phalanx job,
    run one after another after a 1 × 1 baseline. Writes train.csv, train.md
    and train.png (bars of images/sec, scaling efficiency annotated) to --out,
    keeps the figures in the workspace ($PHALANX_HOME/bench/<run>/results.json,
    the studio's /bench page), and prints the table beside published ResNet-50
    figures.
    """
    from phalanx.bench.grid import TrainBenchConfig, parse_counts
    from phalanx.bench.record import record_train
    from phalanx.bench.report import write_all
    from phalanx.bench.train import run_grid

    config = TrainBenchConfig(
        model=model,
        batch_size=batch_size,
        image_size=image_size,
        steps=steps,
        warmup=warmup,
        precision=precision,
        nodes=parse_counts(nodes, "--nodes"),
        procs_per_node=parse_counts(procs_per_node, "--procs-per-node"),
        compute=compute,
        out=out or Path("bench-results") / dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
    )
    results = run_grid(
        config, progress=lambda line: console.print(line, highlight=False, soft_wrap=True)
    )
    # Kept in the workspace first: a chart that cannot be drawn (no matplotlib)
    # still leaves the run on the studio's /bench page.
    kept = record_train(results, config, _command_line())
    csv_path, md_path, png_path, text = write_all(results, config, _command_line())
    console.print()
    console.print(Markdown(text))
    console.print(f"\nwritten: {csv_path}, {md_path}, {png_path}", soft_wrap=True, highlight=False)
    console.print(
        f"kept in the workspace: {kept.parent} (the studio's /bench page)", highlight=False
    )
    return 0


@bench_group.command("data")
@click.option("--classes", type=int, default=40, show_default=True)
@click.option("--per-class", type=int, default=100, show_default=True)
@click.option("--min-side", type=int, default=200, show_default=True, help="Smallest image side.")
@click.option("--max-side", type=int, default=500, show_default=True, help="Largest image side.")
@click.option("--size", type=int, default=224, show_default=True, help="Crop size.")
@click.option("--batch", type=int, default=32, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True, help="DataLoader workers.")
@click.option("--shard-mb", type=float, default=4.0, show_default=True, help="Shard size (MB).")
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--rtt-ms", type=float, default=0.0, help="Round-trip time added to Azurite.")
@click.option(
    "--modes",
    default="a,b,c,d,e,local",
    show_default=True,
    help="Which of a (memory), b (files), c (Azurite files), d/e (shards, cold/warm), local.",
)
@click.option("--quick", is_flag=True, help="Smoke run: 4 × 20 images, 1 round.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def data_cmd(
    classes: int,
    per_class: int,
    min_side: int,
    max_side: int,
    size: int,
    batch: int,
    workers: int,
    shard_mb: float,
    rounds: int,
    rtt_ms: float,
    modes: str,
    quick: bool,
    json_path: Path | None,
) -> int:
    """Time the data loader: memory, local files, Azurite files, shards cold and warm.

    The same as benchmarks/data_loader.py, with the same options; modes c, d
    and e need Azurite ($PHALANX_AZURITE, or `make .tools/node_modules/.bin/azurite-blob`).
    """
    from phalanx.bench.data import DataBenchConfig, parse_modes, run_and_report
    from phalanx.bench.data import quick as quick_run

    config = DataBenchConfig(
        classes=classes,
        per_class=per_class,
        min_side=min_side,
        max_side=max_side,
        size=size,
        batch=batch,
        workers=workers,
        shard_mb=shard_mb,
        rounds=rounds,
        rtt_ms=rtt_ms,
        modes=parse_modes(modes),
    )
    if quick:
        config = quick_run(config)
    result = run_and_report(config, _command_line(), json_path)
    from phalanx.bench.record import record_data

    console.print(f"kept in the workspace: {record_data(result).parent}", highlight=False)
    return 0
