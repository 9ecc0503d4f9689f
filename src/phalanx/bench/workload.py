"""The synthetic training workload that ``phalanx bench train`` times.

ResNet (v1.5, :mod:`phalanx.nets`) trained with SGD on one random batch made
once on the device, as NVIDIA's and the Azure ML reference architecture's
benchmark modes do it: the figure is the model, the optimiser and the
all-reduce, never data loading. Run under phalanx or torchrun (DDP over gloo on
CPU, nccl on GPU) or as a plain single process::

    python -m phalanx.bench.workload --model resnet50 --batch-size 64 --precision amp
    torchrun --nproc-per-node 8 -m phalanx.bench.workload --model resnet50

Precision: ``fp32`` (on Ampere and newer GPUs convolutions and matmuls use
TF32, as NVIDIA's "TF32" figures do; the result says so), ``amp`` (autocast to
fp16 with a GradScaler on CUDA; on CPU, where fp16 autocast is not worth it,
bf16 instead, with a warning), ``bf16`` (autocast to bf16), ``auto`` (``amp``
on CUDA, ``fp32`` on CPU). Memory format: channels_last on CUDA, contiguous on
CPU, unless ``--channels-last`` says otherwise.

``--compile`` wraps the (DDP) model in ``torch.compile``; compiling happens
in the first warm-up step, so give it a few.

Timing: ``--warmup`` steps (allocator growth, cuDNN autotuning, DDP's bucket
building), a barrier, then ``--steps`` timed steps ending with a device sync.
Each rank's images/sec is gathered on every rank; the total is their sum.
Rank 0 writes the result as JSON to ``--out`` (default
``$PHALANX_OUTPUTS_DIR/bench.json``, else ``./bench.json``), logs
``bench/img_per_sec`` with :func:`phalanx.train.log_metric`, and prints it
as its last line, ``BENCH {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx.bench.host import cpu_model, usable_cores
from phalanx.nets import ARCHS, build_model
from phalanx.train import DistContext, cleanup, get_logger, heartbeat, init, log_metric

log = get_logger("bench")

PRECISIONS = ("auto", "fp32", "amp", "bf16")
RESULT_FILE = "bench.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Synthetic ResNet training throughput, with DDP.")
    p.add_argument("--model", default="resnet50", choices=sorted(ARCHS))
    p.add_argument("--batch-size", type=int, default=64, help="images per process per step")
    p.add_argument("--image-size", type=int, default=224, help="side in pixels, >= 32")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    p.add_argument("--precision", choices=PRECISIONS, default="auto")
    p.add_argument("--channels-last", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model first (its compile time falls in the warm-up steps)",
    )
    p.add_argument("--out", type=Path, default=None, help="result JSON (rank 0)")
    args = p.parse_args(argv)
    for name in ("batch_size", "steps", "num_classes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    if args.image_size < 32:
        p.error("--image-size must be at least 32")
    if args.out is None:
        args.out = Path(os.environ.get("PHALANX_OUTPUTS_DIR") or ".") / RESULT_FILE
    return args


def autocast_dtype(requested: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``requested`` on ``device``; ``None`` for plain fp32."""
    cuda = device.type == "cuda"
    if requested == "fp32" or (requested == "auto" and not cuda):
        return None
    if requested == "bf16":
        if cuda and not torch.cuda.is_bf16_supported():
            # Every rank checks the same device kind, so every rank stops here.
            raise SystemExit(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bf16")
        return torch.bfloat16
    if cuda:
        return torch.float16
    log.warning("--precision amp on CPU: autocast to bf16 (fp16 autocast is for CUDA)")
    return torch.bfloat16


def precision_label(dtype: torch.dtype | None, device: torch.device) -> str:
    """What the numbers were computed in: fp32, tf32, fp16 or bf16."""
    if dtype is torch.float16:
        return "fp16"
    if dtype is torch.bfloat16:
        return "bf16"
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
        return "tf32"  # allowed below, as NVIDIA's fp32 figures on Ampere+ are
    return "fp32"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()} ({usable_cores()} cores)"


def synchronize(device: torch.device) -> None:
    # CUDA runs asynchronously: without it the clock stops before the GPU is done.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gather_rates(rate: float, ctx: DistContext) -> list[float]:
    """Every rank's images/sec, on every rank (a collective)."""
    if not ctx.distributed:
        return [rate]
    # On the process's device because NCCL reduces only CUDA tensors.
    rates = torch.zeros(ctx.world_size, dtype=torch.float64, device=ctx.device)
    rates[ctx.rank] = rate
    dist.all_reduce(rates)
    return [float(r) for r in rates.tolist()]


def run(args: argparse.Namespace, ctx: DistContext) -> dict[str, Any]:
    """Train for warmup + steps and measure; the result every rank agrees on."""
    device = ctx.device
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True  # one input shape: pick the fastest kernels once
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dtype = autocast_dtype(args.precision, device)
    channels_last = args.channels_last == "on" or (args.channels_last == "auto" and cuda)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    torch.manual_seed(args.seed)
    model = build_model(args.model, args.num_classes).to(device)
    # torch's type stubs leave out Module.to's memory_format, which it accepts.
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    ddp: nn.Module = model
    if ctx.distributed:
        ddp = DistributedDataParallel(
            model, device_ids=[device.index] if cuda else None, gradient_as_bucket_view=True
        )
    if args.compile:
        # Compiled around DDP, as PyTorch's DDP notes advise: its buckets stay its own.
        ddp = torch.compile(ddp)  # type: ignore[assignment]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    autocast: AbstractContextManager[Any] = (
        torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()
    )
    # One batch, made on the device once (seeded per rank).
    gen = torch.Generator(device=device).manual_seed(args.seed + ctx.rank)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    images = torch.randn(shape, generator=gen, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen, device=device)

    def step() -> torch.Tensor:
        with autocast:
            loss = criterion(ddp(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    precision = precision_label(dtype, device)
    log.info(
        "%s, %d process(es) x %d images of %d px, %s%s, %d warm-up + %d timed steps, on %s",
        args.model, ctx.world_size, args.batch_size, args.image_size, precision,
        ", channels_last" if channels_last else "", args.warmup, args.steps, device_name(device),
    )  # fmt: skip
    for _ in range(args.warmup):
        step()
    synchronize(device)
    if ctx.distributed:
        dist.barrier()  # every rank starts its clock together
    start = time.perf_counter()
    every = max(1, args.steps // 5)
    for i in range(1, args.steps + 1):
        loss = step()
        heartbeat(i)
        if i % every == 0 and i < args.steps:
            log.info("step %d/%d", i, args.steps)  # no sync: a progress line only
    synchronize(device)
    seconds = time.perf_counter() - start
    rates = gather_rates(args.steps * args.batch_size / seconds, ctx)
    total = sum(rates)
    return {
        "model": args.model,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "global_batch_size": args.batch_size * ctx.world_size,
        "steps": args.steps,
        "warmup": args.warmup,
        "requested_precision": args.precision,
        "precision": precision,
        "channels_last": channels_last,
        "compiled": args.compile,
        "world_size": ctx.world_size,
        "nodes": ctx.world_size // ctx.local_world_size,
        "procs_per_node": ctx.local_world_size,
        "backend": ctx.backend if ctx.distributed else None,
        "device": device.type,
        "device_name": device_name(device),
        "threads_per_process": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "seconds": seconds,
        "img_per_sec_total": total,
        "img_per_sec_per_process": total / ctx.world_size,
        "img_per_sec_per_rank": rates,
        "final_loss": float(loss.item()),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ctx = init()
    try:
        result = run(args, ctx)
    finally:
        # Always leave the process group, or peers and the launcher wait for us.
        cleanup()
    log.info(
        "%.1f img/s total, %.1f per process (%d process(es), %.2f s timed)",
        result["img_per_sec_total"], result["img_per_sec_per_process"], ctx.world_size,
        result["seconds"],
    )  # fmt: skip
    if ctx.is_main:
        log_metric("bench/img_per_sec", result["img_per_sec_total"], args.steps)
        log_metric("bench/img_per_sec_per_process", result["img_per_sec_per_process"], args.steps)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, args.out)  # a reader never sees half a file
        print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
