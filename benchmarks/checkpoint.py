"""How long ``Checkpointer.save()`` stalls the training loop: synchronous vs asynchronous.

The state is what the reference workload checkpoints: ResNet-50 (v1.5) and its
SGD-with-momentum optimizer after a training step (so the momentum buffers
exist), plus the RNG states: about 205 MB. Each round, in one process:

1. train ``--steps`` steps, then time a synchronous ``save()``;
2. train ``--steps`` steps, then time an asynchronous ``save()`` (the copy to
   CPU buffers; the write goes on in the background);
3. train ``--steps`` steps while it writes, then time ``wait()``: what is left
   of the write once training reaches the next save (0 when the save interval
   covers the write; the next ``save()`` would wait that long).

The stall is the time from calling ``save()`` to its return. Reported: the
median over ``--saves`` rounds after one warm-up round, the ratio async/sync
(goal ≤ 0.2) and the median left-over wait. Both Checkpointers write to the
same disk (``--dir``, default a temporary folder). ``--device cuda`` keeps
the model on the GPU, as in training there: a save then starts with the copy
from GPU memory (``make gpu-check`` runs it so). ``--json PATH`` also writes
the figures there.

Usage::

    .venv/bin/python benchmarks/checkpoint.py [--saves 7] [--steps 1] [--batch 8]
        [--image-size 112] [--dir PATH] [--device cpu|cuda] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from phalanx.nets import ARCHS, build_model
from phalanx.train import Checkpointer, rng_state


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, batch: int, size: int) -> None:
    device = next(model.parameters()).device
    for _ in range(steps):
        x = torch.randn(batch, 3, size, size, device=device)
        y = torch.randint(0, 1000, (batch,), device=device)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the stall is the save's, not the steps' still queued


def state_of(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": rng_state(),
        "step": step,
    }


def timed(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=7, help="measured rounds (after 1 warm-up)")
    parser.add_argument("--steps", type=int, default=1, help="training steps between saves")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a tmp)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--arch", default="resnet50", choices=sorted(ARCHS), help="the model")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    logging.getLogger("phalanx.checkpoint").setLevel(logging.WARNING)

    torch.manual_seed(0)
    model = build_model(args.arch, 1000).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    train(model, opt, 1, args.batch, args.image_size)

    with tempfile.TemporaryDirectory(prefix="phalanx-ckpt-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        sync = Checkpointer(root / "sync", keep_last=2)
        asynchronous = Checkpointer(root / "async", keep_last=2, async_save=True)
        stalls: dict[str, list[float]] = {"sync": [], "async": []}
        left: list[float] = []
        first_async = 0.0
        for round_ in range(args.saves + 1):
            step = 3 * round_
            train(model, opt, args.steps, args.batch, args.image_size)
            t_sync = timed(sync.save, state_of(model, opt, step), step)
            sync.wait()  # its background pruning, off the clock
            train(model, opt, args.steps, args.batch, args.image_size)
            t_async = timed(asynchronous.save, state_of(model, opt, step + 1), step + 1)
            train(model, opt, args.steps, args.batch, args.image_size)
            t_left = timed(asynchronous.wait)
            if round_ == 0:
                first_async = t_async  # allocates the staging buffers: reported apart
                continue
            stalls["sync"].append(t_sync)
            stalls["async"].append(t_async)
            left.append(t_left)
            print(
                f"round {round_}: sync {t_sync:.3f} s, async {t_async:.3f} s, "
                f"left to wait {t_left:.3f} s",
                file=sys.stderr,
            )
        size_mb = (root / "sync" / f"step_{3 * args.saves:012d}" / "state.pt").stat().st_size / 1e6
        sync.close()
        asynchronous.close()

    med = {mode: statistics.median(v) for mode, v in stalls.items()}
    ratio = med["async"] / med["sync"]
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"python {platform.python_version()}"
    )
    print(f"\ncheckpoint stall, {args.arch} + SGD momentum, {size_mb:.0f} MB state ({machine})\n")
    print("| save() | stall median (s) | min (s) | max (s) |")
    print("|---|---|---|---|")
    for mode in ("sync", "async"):
        values = stalls[mode]
        print(f"| {mode} | {med[mode]:.3f} | {min(values):.3f} | {max(values):.3f} |")
    print(f"\nasync/sync stall ratio: {ratio:.3f} (goal ≤ 0.2), medians of {args.saves} saves each")
    print(
        f"async write left after {args.steps} training step(s): median "
        f"{statistics.median(left):.3f} s; first async save (allocates its CPU buffers): "
        f"{first_async:.3f} s"
    )
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    print(f"\ncommand: {command}")
    if args.json is not None:
        figures = {
            "device": args.device,
            "state_mb": size_mb,
            "saves": args.saves,
            "sync_stall_s": med["sync"],
            "async_stall_s": med["async"],
            "async_over_sync": ratio,
            "async_left_to_wait_s": statistics.median(left),
            "first_async_s": first_async,
            "command": command,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
