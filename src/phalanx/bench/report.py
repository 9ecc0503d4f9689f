"""A training benchmark's results as CSV, Markdown and a PNG bar chart.

The chart follows the results figures of Azure ML's distributed-training
reference architecture: one bar of total images/sec per configuration, here
with the ideal (N × the single process) drawn behind each bar and the scaling
efficiency written above it. matplotlib (the ``bench`` extra) is imported only
to draw the chart, with the Agg backend, so no display is needed.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from phalanx.bench.anchors import ANCHORS, sources
from phalanx.bench.grid import BASELINE, PointResult, TrainBenchConfig
from phalanx.errors import PhalanxError

CSV_COLUMNS = (
    "nodes", "procs_per_node", "processes", "model", "image_size", "batch_per_process",
    "global_batch", "precision", "device", "device_name", "threads_per_process",
    "img_per_sec_total", "img_per_sec_per_process", "efficiency", "baseline_img_per_sec",
    "in_grid", "job",
)  # fmt: skip


def _baseline(results: list[PointResult]) -> PointResult:
    return next(r for r in results if r.point == BASELINE)


def write_csv(results: list[PointResult], path: Path) -> None:
    """One row per point, in :data:`CSV_COLUMNS` order."""
    base = _baseline(results).img_per_sec_total
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            raw = r.raw
            writer.writerow(
                [
                    r.point.nodes, r.point.procs, r.point.processes, raw["model"],
                    raw["image_size"], raw["batch_size"], raw["global_batch_size"],
                    raw["precision"], raw["device"], raw["device_name"],
                    raw["threads_per_process"], f"{r.img_per_sec_total:.2f}",
                    f"{r.img_per_sec_per_process:.2f}", f"{r.efficiency:.4f}", f"{base:.2f}",
                    int(r.in_grid), r.job,
                ]
            )  # fmt: skip


def title(results: list[PointResult]) -> str:
    """``resnet50, 224 px, batch 64 per process, fp32 on <device>``."""
    raw = _baseline(results).raw
    return (
        f"{raw['model']}, {raw['image_size']} px, batch {raw['batch_size']} per process, "
        f"{raw['precision']}, on {raw['device_name']}"
    )


def markdown(results: list[PointResult], config: TrainBenchConfig, command: str) -> str:
    """The results table, how it was measured, and the published anchors with their sources."""
    raw = _baseline(results).raw
    base = _baseline(results).img_per_sec_total
    lines = [
        f"# Training throughput: {title(results)}",
        "",
        f"Measured {dt.date.today().isoformat()} with `{command}`: each configuration is one "
        f"phalanx job on compute `{config.compute}`, {raw['steps']} timed steps after "
        f"{raw['warmup']} warm-up steps, synthetic data made once on the device; torch "
        f"{raw['torch']}."
        + (
            f" On CPU, {raw['threads_per_process']} thread(s) per process at every point."
            if raw["device"] == "cpu"
            else ""
        ),
        "",
        "| nodes × processes | processes | img/s total | img/s per process | scaling efficiency |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        note = "" if r.in_grid else " (baseline, added)"
        lines.append(
            f"| {r.point.nodes} × {r.point.procs}{note} | {r.point.processes} | "
            f"{r.img_per_sec_total:.1f} | {r.img_per_sec_per_process:.1f} | "
            f"{r.efficiency:.2f} |"
        )
    lines += [
        "",
        f"Scaling efficiency = img/s total / (processes × {base:.1f}), the img/s of the "
        "1 × 1 configuration of this run.",
        "",
        "## Published anchors: ResNet-50 v1.5 training, one GPU",
        "",
        "| GPU | precision | batch per GPU | img/s per GPU | source |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {a.gpu} | {a.precision} | {a.batch_size} | {a.img_per_sec:.0f} | {a.source.name} |"
        for a in ANCHORS
    ]
    lines += ["", "Sources:", ""]
    lines += [f"- {src.name}: {src.title}. <{src.url}>" for src in sources()]
    return "\n".join(lines) + "\n"


def write_png(results: list[PointResult], path: Path) -> None:
    """Bars of total images/sec per configuration, efficiency annotated; 1000 × 500 px.

    Raises:
        PhalanxError: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        raise PhalanxError(
            "matplotlib is not installed, so no chart was drawn (the CSV and Markdown were "
            "written): pip install 'phalanx[bench]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = _baseline(results).img_per_sec_total
    labels = [r.point.label for r in results]
    totals = [r.img_per_sec_total for r in results]
    ideal = [base * r.point.processes for r in results]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    try:
        xs = range(len(results))
        ax.bar(xs, ideal, width=0.6, color="none", edgecolor="#9e9e9e", linestyle="--",
               label="ideal (processes × 1×1)")  # fmt: skip
        bars = ax.bar(xs, totals, width=0.6, color="#0078d4", label="measured")
        for bar, r in zip(bars, results, strict=True):
            ax.annotate(
                f"{r.img_per_sec_total:.1f} img/s\n{100 * r.efficiency:.0f}% eff.",
                (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), base * 0.02)),
                xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=9,
            )  # fmt: skip
        ax.set_xticks(list(xs), labels)
        ax.set_xlabel("nodes × processes per node")
        ax.set_ylabel("images/sec (all processes)")
        ax.set_title(title(results), fontsize=10)
        ax.set_ylim(0, max(*ideal, *totals) * 1.25)
        ax.legend(loc="upper left", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def write_all(
    results: list[PointResult], config: TrainBenchConfig, command: str
) -> tuple[Path, Path, Path, str]:
    """``train.csv``, ``train.md`` and ``train.png`` in ``config.out``; also the Markdown."""
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, png_path = out / "train.csv", out / "train.md", out / "train.png"
    write_csv(results, csv_path)
    text = markdown(results, config, command)
    md_path.write_text(text)
    write_png(results, png_path)
    return csv_path, md_path, png_path, text
