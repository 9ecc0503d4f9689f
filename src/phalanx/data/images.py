"""Image decoding and the train/eval transforms, without torchvision.

Loader workers turn JPEG bytes into ``uint8`` CHW tensors; the device turns a whole
batch into normalised floats in one pass (:func:`normalize_batch`), so host memory
and the host-to-device copy carry one byte per pixel channel, not four.

JPEGs are decoded with libjpeg's DCT scaling (Pillow's ``draft``): when the region a
transform needs is at least 2, 4 or 8 times the output size, the decoder produces
the image at 1/2, 1/4 or 1/8 resolution directly, which is several times cheaper
than a full decode followed by a resize.

torch is imported inside the functions that make tensors, so the converter's worker
processes, which only use :func:`prepare_jpeg`, never load it.
"""

from __future__ import annotations

import io
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, UnidentifiedImageError

from phalanx.errors import PhalanxError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
JPEG_QUALITY = 95

RandomSource = np.random.Generator | random.Random
"""Where a transform draws its random numbers; seed one per sample for reproducibility."""


class ImageDecodeError(PhalanxError):
    """Bytes that do not decode as an image; ``reason`` says why, without the context."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnidentifiedImageError):
        # Pillow's own message embeds an object address, which would make reports differ.
        return "not an image format Pillow can read"
    return f"{type(exc).__name__}: {exc}"


def _open(data: bytes, name: str | None) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data))
    except Exception as exc:
        raise _decode_error(exc, name) from exc


def _decode_error(exc: Exception, name: str | None) -> ImageDecodeError:
    reason = _reason(exc)
    return ImageDecodeError(
        f"{name or 'image'}: cannot decode ({reason}); the data is damaged, re-convert "
        f"the dataset with `phalanx data convert`",
        reason,
    )


def _load_reduced(img: Image.Image, reduce: int, name: str | None) -> tuple[Image.Image, float]:
    """Decode ``img`` at 1/``reduce`` scale where the format allows it, as RGB.

    Returns:
        The loaded RGB image and the factor it was actually reduced by (1 for formats
        without DCT scaling).
    """
    w, h = img.size
    factor = 1.0
    try:
        step = next(s for s in (8, 4, 2, 1) if s <= reduce)
        if step > 1:
            # Asking for (w // s, h // s) makes Pillow pick exactly the factor s.
            drafted = img.draft("RGB", (w // step, h // step))
            if drafted is not None:
                factor = w / drafted[1][2]
        img.load()
        rgb = img if img.mode == "RGB" else img.convert("RGB")
    except Exception as exc:
        raise _decode_error(exc, name) from exc
    return rgb, factor


def decode_rgb(jpeg: bytes, *, min_side: int | None = None, name: str | None = None) -> Image.Image:
    """Decode image bytes to an RGB image, cheaply downscaled when allowed.

    Args:
        jpeg: Encoded image (JPEG gets DCT scaling; other formats decode in full).
        min_side: The shorter side of the result must stay at least this long; the
            decoder may shrink the image by 2, 4 or 8 within that bound.
        name: Names the sample in error messages.

    Raises:
        ImageDecodeError: The bytes are not a decodable image.
    """
    img = _open(jpeg, name)
    reduce = min(img.size) // min_side if min_side else 1
    return _load_reduced(img, max(1, reduce), name)[0]


def _to_tensor(img: Image.Image) -> torch.Tensor:
    import torch

    hwc = torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))
    return hwc.permute(2, 0, 1).contiguous()


def _randint(rng: RandomSource, high: int) -> int:
    """A uniform integer in ``[0, high]`` from either kind of generator."""
    return min(high, int(rng.random() * (high + 1)))


@dataclass(frozen=True)
class TrainTransform:
    """Inception-style random-resized crop plus horizontal flip, to ``uint8`` CHW.

    The crop covers a random ``scale`` fraction of the image area with a log-uniform
    aspect ratio in ``ratio``; after 10 failed attempts it falls back to the largest
    centred crop whose aspect ratio lies within ``ratio``.
    """

    size: int = 224
    """Output side in pixels."""
    scale: tuple[float, float] = (0.08, 1.0)
    """Range of the crop's share of the image area."""
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    """Range of the crop's width / height."""
    flip: bool = True
    """Mirror left-right with probability 1/2."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be positive, got {self.size}")
        if not 0 < self.scale[0] <= self.scale[1] <= 1:
            raise ValueError(f"scale must satisfy 0 < min <= max <= 1, got {self.scale}")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"ratio must satisfy 0 < min <= max, got {self.ratio}")

    def crop_box(self, width: int, height: int, rng: RandomSource) -> tuple[int, int, int, int]:
        """Pick the crop as ``(left, top, width, height)`` in image pixels."""
        area = width * height
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_lo, log_hi))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                return _randint(rng, width - w), _randint(rng, height - h), w, h
        aspect = width / height
        if aspect < self.ratio[0]:
            w, h = width, min(height, round(width / self.ratio[0]))
        elif aspect > self.ratio[1]:
            w, h = min(width, round(height * self.ratio[1])), height
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h

    def __call__(self, jpeg: bytes, rng: RandomSource, *, name: str | None = None) -> torch.Tensor:
        """Decode, crop, resize and maybe flip one image; returns ``uint8`` (3, size, size)."""
        img = _open(jpeg, name)
        left, top, w, h = self.crop_box(*img.size, rng)
        mirror = self.flip and rng.random() < 0.5
        # The crop box is chosen on the full-size image; the decoder may then shrink by
        # as much as keeps the cropped region at least `size` on each side.
        rgb, f = _load_reduced(img, max(1, min(w, h) // self.size), name)
        box = (left / f, top / f, (left + w) / f, (top + h) / f)
        out = rgb.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        if mirror:
            out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return _to_tensor(out)


@dataclass(frozen=True)
class EvalTransform:
    """Resize the shorter side to ``resize``, centre-crop ``size``, to ``uint8`` CHW."""

    size: int = 224
    """Output side in pixels."""
    resize: int = 256
    """Shorter side after resizing, before the crop."""

    def __post_init__(self) -> None:
        if not 1 <= self.size <= self.resize:
            raise ValueError(f"need 1 <= size <= resize, got {self.size=} {self.resize=}")

    def __call__(self, jpeg: bytes, *, name: str | None = None) -> torch.Tensor:
        """Decode and transform one image; returns ``uint8`` (3, size, size)."""
        img = _open(jpeg, name)
        w, h = img.size
        if w <= h:
            rw, rh = self.resize, int(self.resize * h / w)
        else:
            rw, rh = int(self.resize * w / h), self.resize
        left, top = round((rw - self.size) / 2), round((rh - self.size) / 2)
        rgb, f = _load_reduced(img, max(1, min(w, h) // self.resize), name)
        # Resizing only the crop's source region equals resize-then-crop, for less work.
        sx, sy = w / rw / f, h / rh / f
        box = (left * sx, top * sy, (left + self.size) * sx, (top + self.size) * sy)
        return _to_tensor(rgb.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box))


def sample_rng(seed: int, *ids: int) -> np.random.Generator:
    """A generator for one sample, e.g. ``sample_rng(seed, epoch, index)``; same ids, same draws."""
    return np.random.default_rng([seed, *ids])


def collate_uint8(samples: Sequence[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(image, label)`` pairs into a ``uint8`` NCHW batch and ``int64`` labels."""
    import torch

    if not samples:
        raise ValueError("cannot collate an empty batch")
    images = torch.stack([img for img, _ in samples])
    labels = torch.tensor([int(label) for _, label in samples], dtype=torch.int64)
    return images, labels


def normalize_batch(
    batch: torch.Tensor,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    channels_last: bool = False,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``(batch / 255 - mean) / std`` per channel, as floats, on the batch's device.

    Args:
        batch: ``uint8`` tensor of shape (N, C, H, W).
        mean: Per-channel mean on the 0-1 scale.
        std: Per-channel standard deviation on the 0-1 scale.
        channels_last: Return the result in channels-last memory format (faster
            convolutions on GPUs with tensor cores).
        dtype: Floating type of the result; default ``torch.float32``.
    """
    import torch

    if batch.dtype != torch.uint8 or batch.dim() != 4 or batch.shape[1] != len(mean):
        raise ValueError(
            f"expected a uint8 (N, {len(mean)}, H, W) batch, got {batch.dtype} {tuple(batch.shape)}"
        )
    dtype = dtype or torch.float32
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = batch.to(dtype=dtype, memory_format=fmt)
    shift = torch.tensor(mean, dtype=torch.float64, device=batch.device).view(1, -1, 1, 1) * 255
    scale = 1 / (torch.tensor(std, dtype=torch.float64, device=batch.device) * 255)
    return x.sub_(shift.to(dtype)).mul_(scale.view(1, -1, 1, 1).to(dtype))


def prepare_jpeg(data: bytes, resize: int | None = None) -> tuple[bytes, bool]:
    """Validate an image by decoding it and return baseline RGB JPEG bytes for a shard.

    Baseline RGB JPEGs that need no resize are kept byte for byte; anything else
    (PNG, CMYK, greyscale, palette, progressive JPEG, larger than ``resize``) is
    re-encoded as RGB JPEG at quality 95. EXIF orientation is ignored, as ImageNet
    loaders do.

    Args:
        data: The source file's bytes.
        resize: If set, the shorter side is scaled down to at most this many pixels.

    Returns:
        ``(jpeg, reencoded)``.

    Raises:
        ImageDecodeError: The data is not a decodable image.
    """
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            target = _shorter_side_to(w, h, resize) if resize and min(w, h) > resize else None
            progressive = bool(im.info.get("progressive") or im.info.get("progression"))
            if im.format == "JPEG" and im.mode == "RGB" and not progressive and target is None:
                # A 1/8-scale decode still entropy-decodes every block, so truncated
                # or corrupt data fails as in a full decode, at a fraction of the cost.
                im.draft("RGB", (max(1, w // 8), max(1, h // 8)))
                im.load()
                return data, False
            if target is not None:
                im.draft("RGB", target)  # JPEG only: decode at no less than the target
            im.load()
            rgb = im if im.mode == "RGB" else im.convert("RGB")
            if target is not None:
                rgb = rgb.resize(target, Image.Resampling.BICUBIC)
            out = io.BytesIO()
            rgb.save(out, "JPEG", quality=JPEG_QUALITY)
            return out.getvalue(), True
    except Exception as exc:
        # Pillow raises many types on bad data (OSError, SyntaxError, struct.error, ...);
        # for the converter a bad file is a line in its report, never a crash.
        raise _decode_error(exc, None) from exc


def _shorter_side_to(w: int, h: int, side: int) -> tuple[int, int]:
    if w <= h:
        return side, max(1, round(h * side / w))
    return max(1, round(w * side / h)), side
