"""The GPU check's results: a stage's figure as a table cell, the Markdown table, and
the files it writes (``benchmarks/gpu_check.py`` runs the stages)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The stages in the order they run and are shown.
STAGES = (
    "machine", "nccl", "capacity", "batch", "synthetic", "shards", "decode", "checkpoint",
    "container",
)  # fmt: skip


def figure(stage: str, r: dict[str, Any]) -> str:
    """One stage's result as a table cell."""
    if "error" in r:
        return f"**failed**: {r['error'][:300]}"
    if stage == "machine":
        versions = f"torch {r['torch']}, CUDA {r['cuda']}, NCCL {r.get('nccl')}"
        return f"{r.get('nvidia_smi') or 'no GPU'}; {versions}, {r['cores']} cores"
    if stage == "nccl":
        return f"`{r['line']}` ({r['backend']}, one rank)"
    if stage == "capacity":
        order = f"{r['job1'][2][11:19]} ≤ {r['job2'][1][11:19]}"
        gpus = ",".join(r["gpus_in_queue"])
        return f"queue shows GPU(s) {gpus}; two 1-GPU jobs ran one after the other ({order})"
    if stage == "batch":
        peak = f" (peak {float(r['peak_gb']):.1f} GiB)" if r.get("peak_gb") else ""
        return f"{r['batch']} per GPU{peak}"
    if stage == "synthetic":
        rates = f"phalanx {r['img_per_sec_phalanx']:.0f}, torchrun {r['img_per_sec_torchrun']:.0f}"
        return f"{rates} img/s: ratio **{r['ratio']:.3f}** (goal ≥ 0.99)"
    if stage == "shards":
        rates = f"shards {r['img_per_sec_shards']:.0f}, synthetic {r['img_per_sec_synthetic']:.0f}"
        cell = f"CPU decode: {rates} img/s: ratio **{r['ratio']:.3f}** (goal ≥ 0.95)"
        if r.get("img_per_sec_shards_gpu_decode"):
            gpu = r["img_per_sec_shards_gpu_decode"]
            cell += f"; GPU decode: {gpu:.0f} img/s: ratio **{r['ratio_gpu_decode']:.3f}**"
        elif r.get("gpu_decode_error"):
            cell += f"; GPU decode failed: {r['gpu_decode_error'][:200]}"
        return cell
    if stage == "decode":
        rates = ", ".join(f"{k} {v}" for k, v in r.items() if k != "seconds")
        return rates[:400]
    if stage == "checkpoint":
        stalls = f"sync {r['sync_stall_s']:.3f} s, async {r['async_stall_s']:.3f} s"
        ratio = f"ratio **{r['async_over_sync']:.3f}** (goal ≤ 0.2)"
        return f"{stalls}: {ratio}, {r['state_mb']:.0f} MB state"
    if stage == "container":
        if not r["ran"]:
            return str(r["note"])
        return f"ran in {r['image']} ({r['engine']}): {r['gpus_seen']}"
    return json.dumps(r)


def table(results: dict[str, Any], header: str) -> str:
    """The Markdown table of every stage in ``results``, under ``header``."""
    rows = [header, "", "| stage | seconds | result |", "|---|---|---|"]
    for stage in STAGES:
        if stage in results:
            r = results[stage]
            cell = figure(stage, r).replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {stage} | {r.get('seconds', 0):.0f} | {cell} |")
    return "\n".join(rows) + "\n"


def write(results: dict[str, Any], header: str) -> Path:
    """``gpu_check.json`` and ``gpu_check.md`` under ``$OUT``, else benchmarks/results."""
    out = Path(os.environ.get("OUT") or REPO / "benchmarks" / "results")
    out.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in results.items() if not k.startswith("_")}
    (out / "gpu_check.json").write_text(json.dumps(public, indent=2, default=str) + "\n")
    (out / "gpu_check.md").write_text(table(results, header))
    return out
