"""Where train.py's batches come from: synthetic, phalanx shards, or a raw ImageFolder.

``--data`` names a dataset root holding ``train/`` and (optionally) ``val/``:
each is either a phalanx shard dataset (``index.json`` + tar shards, made by
``phalanx data convert imagefolder``) or an ImageNet-layout folder (one
sub-folder per class). The root may be a local folder or, for shards, any
datastore URI (``azureml://datastores/<name>/paths/<path>``, a data asset, ``az://``,
``s3://``): shards are then read through the node cache.

Every source hands the training loop ``uint8`` NCHW batches plus ``int64``
labels; they are moved to the device and normalised there (cheaper than
normalising in the workers, and a quarter of the bytes over PCIe).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from phalanx.data.gpudecode import BatchDecoder, EvalPlan, TrainPlan, collate_encoded
from phalanx.data.images import (
    EvalTransform,
    TrainTransform,
    collate_uint8,
    normalize_batch,
    sample_rng,
)
from phalanx.data.sources import open_source
from phalanx.data.stream import ShardDataset, StatefulLoader, ignore_sigterm, start_workers
from phalanx.storage.uri import is_uri

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


@dataclass
class TrainSample:
    """Shard sample → (uint8 image, label); picklable for DataLoader workers."""

    size: int

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> tuple[Any, int]:
        return TrainTransform(self.size)(jpeg, rng), label


@dataclass
class TrainPlanSample:
    """Shard sample → (still-encoded image with its crop drawn, label): ``--decode gpu``."""

    size: int

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> tuple[Any, int]:
        return TrainPlan(self.size)(jpeg, rng), label


@dataclass
class EvalPlanSample:
    size: int

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> tuple[Any, int]:
        return EvalPlan(self.size, resize=round(self.size * 256 / 224))(jpeg), label


@dataclass
class EvalSample:
    size: int

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> tuple[Any, int]:
        return EvalTransform(self.size, resize=round(self.size * 256 / 224))(jpeg), label


class ImageFolder(Dataset[tuple[torch.Tensor, int]]):
    """Small files on a local disk, one sub-folder per class: the baseline shards replace."""

    def __init__(self, root: Path, size: int, *, train: bool, seed: int = 0) -> None:
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.files = [
            (f, label)
            for label, name in enumerate(self.classes)
            for f in sorted((root / name).iterdir())
            if f.suffix.lower() in IMAGE_SUFFIXES
        ]
        self.size, self.train, self.seed, self.epoch = size, train, seed, 0

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.files[i]
        jpeg = path.read_bytes()
        if self.train:
            return TrainTransform(self.size)(jpeg, sample_rng(self.seed, self.epoch, i)), label
        return EvalTransform(self.size, resize=round(self.size * 256 / 224))(jpeg), label


def _is_shards(root: str) -> bool:
    return is_uri(root) or (Path(root) / "index.json").is_file()


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


class Batches:
    """One data source for training (and optionally evaluation), the same API for all."""

    num_classes: int
    steps_per_epoch: int

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]] | None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Synthetic(Batches):
    """One random batch made on the device once and fed at every step (benchmark mode)."""

    def __init__(self, args: Any, rank: int, device: torch.device, memory_format: Any) -> None:
        gen = torch.Generator(device=device)
        gen.manual_seed(args.seed + rank)
        shape = (args.batch_size, 3, args.image_size, args.image_size)
        images = torch.randn(shape, generator=gen, device=device)
        self.images = images.contiguous(memory_format=memory_format)
        self.targets = torch.randint(
            0, args.num_classes, (args.batch_size,), generator=gen, device=device
        )
        self.num_classes = args.num_classes
        self.steps_per_epoch = args.steps_per_epoch

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.images, self.targets


class Real(Batches):
    """Shards (streamed, resumable mid-epoch) or an ImageFolder, to normalised device batches."""

    def __init__(self, args: Any, rank: int, world: int, device: torch.device, cl: bool) -> None:
        self.device, self.channels_last = device, cl
        kw: dict[str, Any] = {
            "batch_size": args.batch_size,
            "num_workers": args.workers,
            "collate_fn": collate_uint8,
            "pin_memory": device.type == "cuda",
        }
        if args.workers:
            kw["prefetch_factor"] = 4
        train, val = _join(args.data, "train"), _join(args.data, "val")
        self.shards = _is_shards(train)
        self.loader: Any
        # Decoding on the GPU: workers only draw crops; this process decodes each batch.
        self.decoder = None
        train_sample: Any = TrainSample(args.image_size)
        eval_sample: Any = EvalSample(args.image_size)
        if getattr(args, "decode", "cpu") == "gpu" and self.shards:
            self.decoder = BatchDecoder(args.image_size, device)
            train_sample, eval_sample = (
                TrainPlanSample(args.image_size),
                EvalPlanSample(args.image_size),
            )
            kw["collate_fn"] = collate_encoded
            kw["pin_memory"] = False  # the decoder copies the encoded bytes itself
        if self.shards:
            ds = ShardDataset(
                open_source(train), seed=args.seed, transform=train_sample,
                rank=rank, world_size=world,
            )  # fmt: skip
            self.num_classes = ds.num_classes
            # Every rank the same number of batches (and the same number of steps).
            self.loader = StatefulLoader(ds, drop_last=True, **kw)
            self.val_loader: Any = None
            if is_uri(val) or (Path(val) / "index.json").is_file():
                vds = ShardDataset(
                    open_source(val), shuffle=False, transform=eval_sample,
                    rank=rank, world_size=world,
                )  # fmt: skip
                self.val_loader = StatefulLoader(vds, **kw)
        else:
            folder = ImageFolder(Path(train), args.image_size, train=True, seed=args.seed)
            self.folder = folder
            self.num_classes = len(folder.classes)
            self.sampler = DistributedSampler(folder, world, rank, seed=args.seed, drop_last=True)
            # A preemption notice is for this process, which checkpoints; workers ignore it.
            kw["worker_init_fn"] = ignore_sigterm
            self.loader = DataLoader(folder, sampler=self.sampler, drop_last=True, **kw)
            self.val_loader = None
            if Path(val).is_dir():
                vf = ImageFolder(Path(val), args.image_size, train=False)
                vs = DistributedSampler(vf, world, rank, shuffle=False)
                self.val_loader = DataLoader(vf, sampler=vs, **kw)
        self.steps_per_epoch = len(self.loader)
        if self.steps_per_epoch == 0:
            raise SystemExit(
                f"train.py: --data {args.data}: fewer than --batch-size x world size images "
                "in train/; use a smaller --batch-size"
            )

    def _to_device(self, batches: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.decoder is not None:
            for encoded in batches:
                images, labels = self.decoder(encoded)
                yield normalize_batch(images, channels_last=self.channels_last), labels
            return
        for images, labels in batches:
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            yield normalize_batch(images, channels_last=self.channels_last), labels

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.shards:
            self.loader.set_epoch(epoch)
        else:
            self.sampler.set_epoch(epoch)
            self.folder.epoch = epoch
        return self._to_device(self.loader if self.shards else start_workers(self.loader))

    def val(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]] | None:
        return None if self.val_loader is None else self._to_device(self.val_loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict() if self.shards else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.shards and state:
            self.loader.load_state_dict(state)


def check_data_root(root: str) -> str | None:
    """What is wrong with ``--data`` (for a local root; a URI is checked when it is read)."""
    if is_uri(root):
        return None
    train = Path(root.removeprefix("file://")) / "train"
    if not train.is_dir():
        return (
            f"no folder {train}; give a root holding train/ (and val/), as phalanx shards "
            "(phalanx data convert imagefolder) or one folder per class"
        )
    return None


def check_gpu_decode(root: str | None) -> str | None:
    """What stands in the way of ``--decode gpu`` here."""
    if root is None or not _is_shards(_join(root, "train")):
        return "needs --data with phalanx shards (phalanx data convert imagefolder)"
    if not torch.cuda.is_available():
        return "needs CUDA, which this machine lacks; decode on the CPU (--decode cpu)"
    try:
        import torchvision.io  # noqa: F401
    except ImportError:
        return "needs torchvision (the build matching this torch); pip install torchvision"
    return None


def make_batches(
    args: Any, rank: int, world: int, device: torch.device, memory_format: Any
) -> Batches:
    if args.data is None:
        return Synthetic(args, rank, device, memory_format)
    return Real(args, rank, world, device, memory_format == torch.channels_last)


def default_workers() -> int:
    """DataLoader workers per process: the cores of this process's share of the node, minus one."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, (os.cpu_count() or 2) // local - 1)
