"""What decoding on the GPU spares a node's CPU cores, and what the GPU then does.

For ImageNet-like JPEGs (phalanx's synthetic images, 500 × 375 on average, quality 90,
in memory: no I/O) it measures, on one core:

- ``cpu path``: the loader worker's whole job on the CPU path (decode at a reduced
  scale, random-resized crop, resize, flip: ``images.TrainTransform``);
- ``gpu path, worker``: the worker's job when the GPU decodes (read the header, draw the
  crop: ``gpudecode.TrainPlan``);

and, where CUDA and torchvision are there, the training process's part of the GPU path
(``gpudecode.BatchDecoder``: nvJPEG on a whole batch, then crop, resize and mirror on
the device), in images per second of the GPU. Without a GPU that line says so.

Usage::

    .venv/bin/python benchmarks/decode_split.py [--images 256] [--size 224]
        [--batch 256] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from phalanx.data.gpudecode import BatchDecoder, TrainPlan, collate_encoded
from phalanx.data.images import TrainTransform, sample_rng
from phalanx.data.synthetic import make_image


def make_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """ImageNet-like JPEGs: sides drawn from 300…700 (ImageNet's are about 500 × 375)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        w, h = (int(x) for x in rng.integers(300, 700, size=2))
        buf = io.BytesIO()
        make_image(rng, w, h).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def per_second(work: Callable[[], int], rounds: int) -> float:
    """The median over ``rounds`` of items per second of ``work`` (which returns its count)."""
    rates = []
    for _ in range(rounds):
        start = time.process_time()
        done = work()
        rates.append(done / max(1e-9, time.process_time() - start))
    return statistics.median(rates)


def gpu_rate(jpegs: list[bytes], size: int, batch: int, rounds: int) -> float | str:
    """Images per second of the GPU's part, or why it was not measured."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device here"
    try:
        decoder = BatchDecoder(size, torch.device("cuda"))
    except Exception as exc:  # torchvision missing: say so in the table
        return str(exc).split(";")[0]
    batches = []
    for start in range(0, len(jpegs) - batch + 1, batch):
        part = jpegs[start : start + batch]
        batches.append(collate_encoded(
            [(TrainPlan(size)(d, sample_rng(0, 0, start + i)), 0) for i, d in enumerate(part)]
        ))  # fmt: skip
    if not batches:
        return f"fewer images than one batch of {batch}"
    decoder(batches[0])  # warm-up: nvJPEG's handles, the kernels
    torch.cuda.synchronize()
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for b in batches:
            decoder(b)
        torch.cuda.synchronize()
        rates.append(len(batches) * batch / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    jpegs = make_jpegs(args.images)
    transform, plan = TrainTransform(args.size), TrainPlan(args.size)

    def cpu_path() -> int:
        for i, d in enumerate(jpegs):
            transform(d, sample_rng(0, 0, i))
        return len(jpegs)

    def worker_part() -> int:
        for i, d in enumerate(jpegs):
            plan(d, sample_rng(0, 0, i))
        return len(jpegs)

    cpu = per_second(cpu_path, args.rounds)
    worker = per_second(worker_part, args.rounds)
    gpu = gpu_rate(jpegs, args.size, args.batch, args.rounds)
    results = {
        "images": args.images,
        "size": args.size,
        "cpu_path_images_per_core_s": round(cpu, 1),
        "gpu_path_worker_images_per_core_s": round(worker, 1),
        "worker_speedup": round(worker / cpu, 1),
        "gpu_images_per_s": gpu if isinstance(gpu, str) else round(gpu, 1),
    }
    rows = [
        ("cpu path: decode, crop, resize, flip (one core)", f"{cpu:,.0f} images/s"),
        ("gpu path, worker: header and crop draw (one core)", f"{worker:,.0f} images/s"),
        (
            "gpu path, the GPU: nvJPEG, crop, resize, flip",
            gpu if isinstance(gpu, str) else f"{gpu:,.0f} images/s",
        ),
    ]
    print("| stage | rate |\n|---|---|")
    for what, rate in rows:
        print(f"| {what} | {rate} |")
    print(f"\nthe worker's part is {worker / cpu:.0f}× cheaper on the GPU path")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
