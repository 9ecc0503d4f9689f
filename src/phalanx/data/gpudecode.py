"""JPEG decoding on the GPU (nvJPEG, through torchvision), for nodes whose CPU cores
cannot decode as fast as their GPUs train.

The work is split where it is cheapest. Loader workers read each sample's JPEG header
(its size), draw its crop and flip from the sample's own generator, and hand on the
encoded bytes: a few microseconds a sample instead of a decode. The training process
then decodes a whole batch in one call on its GPU and crops, resizes and mirrors each
image there, to the same ``uint8`` NCHW batch the CPU path makes.

The crops are drawn exactly as :class:`~phalanx.data.images.TrainTransform` draws them
(the same generator, the same draws in the same order), so a resumed epoch sees the
same crops, and the data position is the loader's, as on the CPU path. The pixels
differ slightly from the CPU path's: that one decodes at a reduced scale where it may
(libjpeg's DCT scaling) and resizes with Pillow; this one decodes in full and resizes
with an antialiased bilinear filter.

Status: the decode call (``torchvision.io.decode_jpeg(..., device="cuda")``) has not
run on a GPU in phalanx's tests (none of its machines has one); everything around it
is tested on the CPU with a Pillow decoder in its place. It stays off unless a job asks
for it (the reference trainer's ``--decode gpu``).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from PIL import Image

from phalanx.data.images import EvalTransform, ImageDecodeError, RandomSource, TrainTransform

if TYPE_CHECKING:
    import torch

Decode = Callable[[list["torch.Tensor"]], list["torch.Tensor"]]
"""Encoded JPEGs (1-D ``uint8`` CPU tensors) → decoded ``uint8`` (3, H, W) tensors."""


class Encoded(NamedTuple):
    """One sample as a loader worker hands it on: still encoded, its crop chosen."""

    data: torch.Tensor
    """The JPEG's bytes, a 1-D ``uint8`` tensor."""
    box: tuple[float, float, float, float]
    """The region to keep, ``(left, top, width, height)`` in the full image's pixels."""
    mirror: bool
    """Mirror left-right after the resize."""
    name: str
    """Names the sample in an error message."""


class EncodedBatch(NamedTuple):
    """A batch of :class:`Encoded` samples and their labels (a named tuple, so that the
    DataLoader's pinning passes it through).

    The JPEGs travel as one tensor with offsets, not one tensor each: a DataLoader
    worker shares every tensor it sends through a file descriptor, and a batch of 256
    separate ones, four batches ahead, would run past a common limit of 1,024 open files.
    """

    data: torch.Tensor
    """Every sample's bytes, one after another: 1-D ``uint8``."""
    offsets: torch.Tensor
    """``int64`` (N + 1,): sample ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""
    boxes: torch.Tensor
    """``float64`` (N, 4): each sample's box."""
    mirror: torch.Tensor
    """``bool`` (N,)."""
    names: list[str]
    labels: torch.Tensor
    """``int64`` (N,)."""


def jpeg_size(data: bytes, name: str | None = None) -> tuple[int, int]:
    """``(width, height)`` from the image's header, without decoding it."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size
    except Exception as exc:
        raise ImageDecodeError(
            f"{name or 'image'}: cannot read its header ({type(exc).__name__}); the data is "
            "damaged, re-convert the dataset with `phalanx data convert`",
            type(exc).__name__,
        ) from exc


def _as_tensor(data: bytes) -> torch.Tensor:
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


@dataclass(frozen=True)
class TrainPlan:
    """The worker's half of :class:`TrainTransform`: the crop and flip, drawn the same."""

    size: int = 224

    def __call__(self, jpeg: bytes, rng: RandomSource, *, name: str | None = None) -> Encoded:
        width, height = jpeg_size(jpeg, name)
        left, top, w, h = TrainTransform(self.size).crop_box(width, height, rng)
        mirror = rng.random() < 0.5  # TrainTransform's next draw, in its order
        return Encoded(_as_tensor(jpeg), (left, top, w, h), mirror, name or "image")


@dataclass(frozen=True)
class EvalPlan:
    """The worker's half of :class:`EvalTransform`: its centre crop, in source pixels."""

    size: int = 224
    resize: int = 256

    def __call__(self, jpeg: bytes, *, name: str | None = None) -> Encoded:
        EvalTransform(self.size, self.resize)  # the same checks of size and resize
        w, h = jpeg_size(jpeg, name)
        if w <= h:
            rw, rh = self.resize, int(self.resize * h / w)
        else:
            rw, rh = int(self.resize * w / h), self.resize
        left, top = round((rw - self.size) / 2), round((rh - self.size) / 2)
        sx, sy = w / rw, h / rh
        box = (left * sx, top * sy, self.size * sx, self.size * sy)
        return Encoded(_as_tensor(jpeg), box, False, name or "image")


def collate_encoded(samples: Sequence[tuple[Encoded, int]]) -> EncodedBatch:
    """Gather ``(Encoded, label)`` pairs into one :class:`EncodedBatch`."""
    import torch

    if not samples:
        raise ValueError("cannot collate an empty batch")
    sizes = torch.tensor([0, *(s.data.numel() for s, _ in samples)], dtype=torch.int64)
    return EncodedBatch(
        data=torch.cat([s.data for s, _ in samples]),
        offsets=sizes.cumsum(0),
        boxes=torch.tensor([s.box for s, _ in samples], dtype=torch.float64),
        mirror=torch.tensor([s.mirror for s, _ in samples], dtype=torch.bool),
        names=[s.name for s, _ in samples],
        labels=torch.tensor([int(label) for _, label in samples], dtype=torch.int64),
    )


def nvjpeg(device: torch.device) -> Decode:
    """torchvision's batched decoder on ``device`` (nvJPEG on a CUDA device)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as exc:
        raise ImageDecodeError(
            "decoding on the GPU needs torchvision (the build that matches your torch: "
            "pip install torchvision), or decode on the CPU",
            "torchvision missing",
        ) from exc

    def decode(data: list[torch.Tensor]) -> list[torch.Tensor]:
        return list(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))

    return decode


class BatchDecoder:
    """Decodes, crops, resizes and mirrors an :class:`EncodedBatch` on one device.

    Args:
        size: The output's side in pixels.
        device: Where the batch is decoded and transformed.
        decode: The decoder; by default :func:`nvjpeg` on ``device``.
    """

    def __init__(self, size: int, device: torch.device, decode: Decode | None = None) -> None:
        self.size, self.device = size, device
        self.decode = decode if decode is not None else nvjpeg(device)

    def __call__(self, batch: EncodedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch as ``uint8`` (N, 3, size, size) on the device, and its labels there."""
        import torch
        from torch.nn.functional import interpolate

        images = self._decode_all(batch)
        out = torch.empty(
            (len(images), 3, self.size, self.size), dtype=torch.uint8, device=self.device
        )
        boxes = batch.boxes.tolist()
        mirror = batch.mirror.tolist()
        for i, img in enumerate(images):
            region = _region(img, boxes[i]).unsqueeze(0).float()
            resized = interpolate(
                region, size=(self.size, self.size), mode="bilinear", align_corners=False,
                antialias=True,
            )[0]  # fmt: skip
            if mirror[i]:
                resized = resized.flip(-1)
            out[i] = resized.round_().clamp_(0, 255).to(torch.uint8)
        return out, batch.labels.to(self.device, non_blocking=True)

    def _decode_all(self, batch: EncodedBatch) -> list[torch.Tensor]:
        bounds = batch.offsets.tolist()
        parts = [batch.data[a:b] for a, b in itertools.pairwise(bounds)]
        try:
            return self.decode(parts)
        except Exception as exc:
            failed = exc
        # One bad image fails the whole call: find which, to name it. An image is blamed
        # only when others decode alone; when none does, the decoder itself is broken
        # (a CUDA error sticks to the process), and that is what is raised.
        bad: list[tuple[str, Exception]] = []
        for data, name in zip(parts, batch.names, strict=True):
            try:
                self.decode([data])
            except Exception as alone:
                bad.append((name, alone))
        if not bad:
            return self.decode(parts)  # a failure that was not any one image's
        if len(bad) == len(parts) and len(parts) > 1:
            raise failed
        name, cause = bad[0]
        raise ImageDecodeError(
            f"{name}: cannot decode ({type(cause).__name__}); the data is damaged, "
            "re-convert the dataset with `phalanx data convert`",
            type(cause).__name__,
        ) from cause


def _region(img: torch.Tensor, box: Sequence[float]) -> torch.Tensor:
    """The pixels of ``box`` (``left, top, width, height``), at least one pixel each way."""
    left, top, w, h = box
    height, width = int(img.shape[-2]), int(img.shape[-1])
    x0 = min(max(0, int(left)), width - 1)
    y0 = min(max(0, int(top)), height - 1)
    x1 = min(width, max(x0 + 1, round(left + w)))
    y1 = min(height, max(y0 + 1, round(top + h)))
    return img[:, y0:y1, x0:x1]
