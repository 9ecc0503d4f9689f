"""ResNet on ImageNet (shards or folders) or synthetic data, with DDP: the reference workload.

The workload of the Azure ML distributed-training reference architecture
(ResNet-50 v1.5, 224x224 images, SGD with momentum), written to be read top to
bottom. It measures training throughput in images per second and runs the
same way on one CPU, one GPU, a node of GPUs, or many nodes.

One process (CPU or one GPU)::

    python examples/imagenet/train.py --arch resnet50 --batch-size 64 --epochs 3

One node, N processes (one per GPU; on CPU each process also wants its own
cores, so set OMP_NUM_THREADS to cores / N)::

    torchrun --nproc-per-node N examples/imagenet/train.py --arch resnet50 --batch-size 64
    phalanx run examples/imagenet/job.yml --set distribution.process_count_per_instance=N

M nodes of N processes: on node K (0 … M-1), with node 0's address as ADDR::

    torchrun --nnodes M --nproc-per-node N --node-rank K --master-addr ADDR \\
        --master-port 29500 examples/imagenet/train.py --arch resnet50 --batch-size 64
    phalanx run examples/imagenet/job.yml --set resources.instance_count=M

The small demo of the README (2 nodes x 1 process, a few minutes on CPU)::

    phalanx run examples/imagenet/job-demo.yml

Data. Without ``--data``, synthetic data, as the reference implementation's
benchmark mode does it: one random batch of images and labels is made on the
device once and fed at every step, so the figure measures the model and the
all-reduce, never data loading (seeded with ``--seed + rank``). With ``--data
ROOT``, ``ROOT/train`` (and ``ROOT/val`` when present, for top-1/top-5 accuracy
after each epoch) are phalanx shards — local, or on any datastore through the
node cache — or raw ImageNet-layout folders for comparison; see ``batches.py``.
The loader's position is part of every checkpoint, so a resumed run continues
mid-epoch with no sample repeated or skipped.

Recipe (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): learning rate
``base_lr x global_batch / 256``, a linear warm-up per step, no weight decay on
BatchNorm and bias parameters, the last BatchNorm of each block initialised to
zero, label smoothing 0.1, then cosine or step decay.

Outputs (rank 0, in ``--output-dir``, default ``$PHALANX_OUTPUTS_DIR`` or
``./outputs``): ``throughput.json`` and ``model.pt`` (the model's state_dict);
the last line printed starts with ``THROUGHPUT`` followed by JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from batches import check_data_root, check_gpu_decode, default_workers, make_batches
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from phalanx.nets import ARCHS, build_model
from phalanx.train import (
    Checkpointer,
    DistContext,
    all_reduce_sum,
    cleanup,
    get_logger,
    heartbeat,
    init,
    log_metrics,
    rng_state,
    set_rng_state,
    watch_preemption,
)

log = get_logger("train")

# -----------------------------------------------------------------------------
# Arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="ResNet on synthetic ImageNet-shaped data, with DDP.")
    p.add_argument("--arch", default="resnet50", choices=sorted(ARCHS))
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224, help="side in pixels, >= 32")
    p.add_argument("--batch-size", type=int, default=64, help="images per process per step")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=100, help="synthetic data only")
    p.add_argument("--base-lr", type=float, default=0.1, help="learning rate per 256 images")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument(
        "--weight-decay",
        type=float,
        default=1e-4,
        help="1e-4 (Goyal et al.) to 5e-5; not applied to BatchNorm and bias parameters",
    )
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=1.0, help="linear lr warm-up")
    p.add_argument("--lr-schedule", choices=["cosine", "step"], default="cosine")
    p.add_argument(
        "--zero-init-residual",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start the last BatchNorm of each block at zero (Goyal et al. 2017)",
    )
    p.add_argument("--amp", choices=["auto", "on", "off"], default="auto", help="auto: on CUDA")
    p.add_argument(
        "--amp-dtype",
        choices=["auto", "bf16", "fp16"],
        default="auto",
        help="auto: bf16 where supported, else fp16 (with a GradScaler)",
    )
    p.add_argument("--channels-last", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-interval", type=int, default=10, help="steps between progress lines")
    p.add_argument(
        "--timing-warmup-steps",
        type=int,
        default=5,
        help="steps at the start of the first epoch left out of the throughput figures",
    )
    p.add_argument(
        "--output-dir",
        default=os.environ.get("PHALANX_OUTPUTS_DIR") or "outputs",
        help="default: $PHALANX_OUTPUTS_DIR, else ./outputs",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("PHALANX_CHECKPOINT_DIR"),
        help="default: $PHALANX_CHECKPOINT_DIR (set by phalanx); no checkpoints when unset",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="steps between checkpoints, besides the one at each epoch's end (0: epochs only)",
    )
    p.add_argument("--keep-last", type=int, default=3, help="checkpoints kept (>= 2)")
    p.add_argument(
        "--async-checkpoint",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write checkpoints in the background (the loop pays only for a copy)",
    )
    p.add_argument(
        "--data",
        metavar="ROOT",
        help="dataset root with train/ (and val/): phalanx shards (local or any datastore URI) "
        "or an ImageNet-layout folder; synthetic data when left out",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="DataLoader workers per process (real data)"
    )
    p.add_argument(
        "--decode",
        choices=["cpu", "gpu"],
        default="cpu",
        help="where shards' JPEGs are decoded: the loader's CPU workers, or the GPU (nvJPEG "
        "through torchvision; not yet run on a GPU in phalanx's tests)",
    )
    args = p.parse_args(argv)
    if args.workers is None:
        args.workers = default_workers()
    if args.workers < 0:
        p.error("--workers must not be negative")
    if args.decode == "gpu" and (problem := check_gpu_decode(args.data)):
        print(f"train.py: --decode gpu: {problem}", file=sys.stderr)
        sys.exit(2)
    if args.data is not None and (problem := check_data_root(args.data)):
        # A user error, so one line and exit code 2, before any process group exists.
        print(f"train.py: --data {args.data}: {problem}", file=sys.stderr)
        sys.exit(2)
    for name in ("num_classes", "batch_size", "epochs", "steps_per_epoch", "log_interval"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.image_size < 32:
        p.error("--image-size must be at least 32")
    if args.warmup_epochs < 0 or args.timing_warmup_steps < 0 or args.checkpoint_every < 0:
        p.error(
            "--warmup-epochs, --timing-warmup-steps and --checkpoint-every must not be negative"
        )
    if args.keep_last < 2:
        p.error("--keep-last must be at least 2")
    return args


# -----------------------------------------------------------------------------
# Learning rate: linear warm-up, then cosine or step decay, set at every step


def lr_at(step: int, args: argparse.Namespace, peak_lr: float) -> float:
    total = args.epochs * args.steps_per_epoch
    warmup = min(round(args.warmup_epochs * args.steps_per_epoch), total)
    if step < warmup:
        # From peak/warmup (not 0, so the first step learns something) up to peak.
        return peak_lr * (step + 1) / warmup
    if args.lr_schedule == "cosine":
        progress = (step - warmup) / max(1, total - warmup)
        return peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    # Step: x0.1 at epochs 30, 60 and 80 of 90, scaled to this run's length.
    passed = sum(step >= round(total * m / 90) for m in (30, 60, 80))
    return peak_lr * 0.1**passed


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
    # Weight decay on BatchNorm's scale and shift and on biases only hurts
    # (Goyal et al. 2017; Jia et al. 2018); they are exactly the 0-d/1-d tensors.
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def choose_precision(args: argparse.Namespace, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain fp32."""
    cuda = device.type == "cuda"
    if args.amp == "off" or (args.amp == "auto" and not cuda):
        return None
    if args.amp_dtype == "fp16":
        return torch.float16
    if args.amp_dtype == "bf16" or not cuda or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def synchronize(device: torch.device) -> None:
    # CUDA runs asynchronously: without this the clock would stop before the
    # GPU has finished the steps it is meant to time.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -----------------------------------------------------------------------------
# Training


def evaluate(
    model: nn.Module, data: Any, ctx: DistContext, autocast: Any
) -> dict[str, float] | None:
    """Top-1 and top-5 accuracy over the validation set, summed over every rank."""
    batches = data.val()
    if batches is None:
        return None
    model.eval()
    counts = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for images, targets in batches:
            with autocast:
                logits = model(images)
            top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top5 == targets[:, None]
            counts += torch.tensor(
                [hits[:, 0].sum().item(), hits.any(dim=1).sum().item(), len(targets)],
                dtype=torch.float64,
            )
    model.train()
    total = [all_reduce_sum(float(c), ctx) for c in counts]
    return {"top1": total[0] / total[2], "top5": total[1] / total[2], "images": int(total[2])}


def train(args: argparse.Namespace, ctx: DistContext) -> None:
    device = ctx.device
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True  # fixed input shape: pick the fastest kernels once
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    amp_dtype = choose_precision(args, device)
    precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[amp_dtype]
    channels_last = args.channels_last == "on" or (args.channels_last == "auto" and cuda)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    global_batch = args.batch_size * ctx.world_size
    peak_lr = args.base_lr * global_batch / 256

    # The same seed on every rank gives every rank the same initial weights;
    # DDP would broadcast rank 0's anyway, this just makes it obvious.
    data = make_batches(args, ctx.rank, ctx.world_size, device, memory_format)
    spe = data.steps_per_epoch  # the same on every rank, so DDP never waits on a missing batch
    args.steps_per_epoch = spe  # the learning-rate schedule counts in these steps
    torch.manual_seed(args.seed)
    model = build_model(args.arch, data.num_classes, zero_init_residual=args.zero_init_residual)
    model = model.to(device=device, memory_format=memory_format)
    n_params = sum(p.numel() for p in model.parameters())
    # BatchNorm statistics stay per process (as in the reference and in Goyal
    # et al.), not synchronised: each rank normalises over its own batch.
    ddp_model: nn.Module = model
    if ctx.distributed:
        ddp_model = DistributedDataParallel(
            model,
            device_ids=[device.index] if cuda else None,
            gradient_as_bucket_view=True,  # gradients live in the all-reduce buckets: no copy
        )
    optimizer = torch.optim.SGD(
        param_groups(model, args.weight_decay), lr=peak_lr, momentum=args.momentum
    )
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    # A GradScaler only for fp16, whose narrow range underflows small gradients.
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    autocast = (
        torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()
    )

    log.info(
        "%s (%.1fM params), %d process(es) x %d images = global batch %d, %dx%d px, %s%s, "
        "lr %.4g (%.3g x %d / 256), %d epochs x %d steps, device %s",
        args.arch,
        n_params / 1e6,
        ctx.world_size,
        args.batch_size,
        global_batch,
        args.image_size,
        args.image_size,
        precision,
        ", channels_last" if channels_last else "",
        peak_lr,
        args.base_lr,
        global_batch,
        args.epochs,
        spe,
        device,
    )

    # Checkpoints: resume where the last attempt stopped (phalanx restarts the
    # whole gang after a failure or a preemption, with the same folder).
    total_steps = args.epochs * spe
    ckpt = (
        Checkpointer(
            args.checkpoint_dir, keep_last=args.keep_last, async_save=args.async_checkpoint
        )
        if args.checkpoint_dir
        else None
    )
    # The check is a collective; on GPU it also waits for the device, so there
    # it runs every 10 steps (well inside a 30 s grace at any real step time).
    preemption = watch_preemption(check_every=10 if cuda else 1)
    step = 0
    first_loss = last_loss = float("nan")
    # Every rank calls it: the ranks agree on one step that all of them can read.
    loaded = ckpt.load_latest(map_location=device) if ckpt is not None else None
    if loaded is not None:
        model.load_state_dict(loaded.state["model"])
        optimizer.load_state_dict(loaded.state["optimizer"])
        scaler.load_state_dict(loaded.state["scaler"])
        set_rng_state(loaded.state["rng"])
        data.load_state_dict(loaded.state.get("data", {}))
        first_loss = float(loaded.state["first_loss"])
        last_loss = float(loaded.state["last_loss"])
        step = loaded.step
        log.info("resumed from checkpoint at step %d of %d (%s)", step, total_steps, loaded.path)

    def save(at_step: int) -> None:
        if ckpt is None:
            return
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": rng_state(),
            "data": data.state_dict(),  # where the loader is: a resume repeats no sample
            "first_loss": first_loss,
            "last_loss": last_loss,
        }
        ckpt.save(state, at_step)

    # Throughput bookkeeping. Only the steps are timed (not set-up, not the
    # end-of-epoch reductions), and the first few steps of this process are
    # left out: they pay for allocator growth, cuDNN autotuning and DDP's
    # bucket building, which a long run amortises.
    # The reference implementation reported the images/sec of the last epoch
    # only; here each epoch gets its figure, and the overall one is total timed
    # images / total timed seconds over every epoch this process ran.
    timed_from = step + min(args.timing_warmup_steps, max(0, total_steps - step - 1))
    epoch_stats: list[dict[str, float]] = []
    val_stats: list[dict[str, float]] = []
    timed_images = 0
    timed_seconds = 0.0
    for epoch in range(step // spe, args.epochs):
        ddp_model.train()
        epoch_start: float | None = None
        epoch_steps = 0
        if step >= timed_from:
            synchronize(device)
            epoch_start = time.perf_counter()
        interval_start, interval_steps = time.perf_counter(), 0
        batches = data.epoch(epoch)
        for i in range(step - epoch * spe, spe):
            images, targets = next(batches)
            lr = lr_at(step, args, peak_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with autocast:
                loss = criterion(ddp_model(images), targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            interval_steps += 1
            if epoch_start is not None:
                epoch_steps += 1
            if step == 1:
                # Averaged over ranks now, so a resumed run reports the same figure.
                first_loss = all_reduce_sum(loss.item(), ctx) / ctx.world_size
            if step == timed_from:
                synchronize(device)
                epoch_start = time.perf_counter()
            heartbeat(step)
            if preemption.requested(ctx):
                # Every rank agrees on this step; save it and leave before the node goes.
                last_loss = all_reduce_sum(loss.item(), ctx) / ctx.world_size
                save(step)
                if ckpt is not None:
                    ckpt.close()
                log.warning("preempted at step %d; checkpoint saved", step)
                preemption.exit()
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save(step)
            if step % args.log_interval == 0:
                # loss.item() waits for the GPU, so only every log_interval steps.
                current = loss.item()
                synchronize(device)
                now = time.perf_counter()
                ips = interval_steps * args.batch_size / (now - interval_start)
                log_metrics(
                    {"train/loss": current, "train/lr": lr, "train/img_per_sec_per_rank": ips},
                    step,
                )
                log.info(
                    "epoch %d step %d/%d loss %.4f lr %.4g  %.1f img/s per rank",
                    epoch + 1,
                    i + 1,
                    spe,
                    current,
                    lr,
                    ips,
                )
                interval_start, interval_steps = now, 0
        synchronize(device)
        last_loss = all_reduce_sum(loss.item(), ctx) / ctx.world_size
        accuracy = evaluate(ddp_model, data, ctx, autocast)
        if accuracy is not None:
            val_stats.append({"epoch": epoch + 1, **accuracy})
            log_metrics({"val/top1": accuracy["top1"], "val/top5": accuracy["top5"]}, step)
            log.info(
                "epoch %d/%d: validation top-1 %.2f%%, top-5 %.2f%% (%d images)",
                epoch + 1, args.epochs, 100 * accuracy["top1"], 100 * accuracy["top5"],
                accuracy["images"],
            )  # fmt: skip
        if not (args.checkpoint_every and step % args.checkpoint_every == 0):
            save(step)  # the end of every epoch, unless that step was just saved
        if epoch_start is None or epoch_steps == 0:
            continue  # nothing of this epoch was timed (warm-up, or resumed at its end)
        seconds = time.perf_counter() - epoch_start
        images_done = epoch_steps * args.batch_size
        timed_images += images_done
        timed_seconds += seconds
        # Collectives: every rank takes part, whatever it logs.
        rank_ips = images_done / seconds
        total_ips = all_reduce_sum(rank_ips, ctx)
        log_metrics({"train/img_per_sec_total": total_ips}, step)
        epoch_stats.append(
            {
                "epoch": epoch + 1,
                "timed_steps": epoch_steps,
                "seconds": seconds,
                "img_per_sec_per_rank": total_ips / ctx.world_size,
                "img_per_sec_total": total_ips,
            }
        )
        log.info(
            "epoch %d/%d: %.1f img/s per rank, %.1f img/s total (%d timed steps, %.2f s)",
            epoch + 1,
            args.epochs,
            total_ips / ctx.world_size,
            total_ips,
            epoch_steps,
            seconds,
        )
    if ckpt is not None:
        ckpt.close()  # the last save is on disk before the outputs are written

    # None when nothing was timed: a run resumed after its last step has no figure.
    overall_total = all_reduce_sum(timed_images / timed_seconds, ctx) if timed_seconds else None
    overall = {
        "arch": args.arch,
        "world_size": ctx.world_size,
        "batch_size_per_rank": args.batch_size,
        "global_batch_size": global_batch,
        "image_size": args.image_size,
        "precision": precision,
        "channels_last": channels_last,
        "device": device.type,
        "img_per_sec_per_rank": None if overall_total is None else overall_total / ctx.world_size,
        "img_per_sec_total": overall_total,
    }
    report = {
        **overall,
        "epochs": args.epochs,
        "steps_per_epoch": spe,
        "data": args.data or "synthetic",
        "validation": val_stats,
        "timing_warmup_steps": args.timing_warmup_steps,
        "resumed_from_step": loaded.step if loaded is not None else None,
        "per_epoch": epoch_stats,
        "first_loss": first_loss,
        "final_loss": last_loss,
    }
    if overall_total is None:
        log.info("nothing left to train after resuming at step %d; loss %.4f", step, last_loss)
    else:
        log.info(
            "overall: %.1f img/s per rank, %.1f img/s total; loss %.4f -> %.4f",
            overall_total / ctx.world_size,
            overall_total,
            first_loss,
            last_loss,
        )
    if ctx.is_main:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "throughput.json").write_text(json.dumps(report, indent=2) + "\n")
        torch.save(model.state_dict(), out / "model.pt")  # the unwrapped model: no "module."
        print(f"outputs: {out.resolve()} (throughput.json, model.pt)", flush=True)
        # The last line, for tools that parse the result (phalanx bench).
        print("THROUGHPUT " + json.dumps(overall), flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ctx = init()
    try:
        train(args, ctx)
    finally:
        # Always leave the process group, or peers and the launcher wait for us.
        cleanup()


if __name__ == "__main__":
    main()
