"""Decoding, train/eval transforms, device-side normalisation and shard JPEG preparation."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from PIL import Image

from phalanx.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EvalTransform,
    ImageDecodeError,
    TrainTransform,
    collate_uint8,
    decode_rgb,
    normalize_batch,
    prepare_jpeg,
    sample_rng,
)
from phalanx.data.synthetic import make_image
from phalanx.errors import PhalanxError


def encode(img: Image.Image, fmt: str = "JPEG", **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def gradient(width: int, height: int) -> Image.Image:
    """R follows x, G follows y, B is constant: every pixel says where it came from."""
    x = np.arange(width, dtype=np.uint8)[None, :].repeat(height, 0)
    y = np.arange(height, dtype=np.uint8)[:, None].repeat(width, 1)
    return Image.fromarray(np.stack([x, y, np.full_like(x, 77)], axis=-1))


def smooth_jpeg(width: int, height: int, seed: int = 0) -> bytes:
    return encode(make_image(np.random.default_rng(seed), width, height), quality=95)


def test_train_transform_shape_dtype_and_determinism() -> None:
    jpeg = smooth_jpeg(120, 90)
    t = TrainTransform(size=32)
    a = t(jpeg, sample_rng(7, 0, 3))
    assert a.shape == (3, 32, 32) and a.dtype == torch.uint8 and a.is_contiguous()
    assert torch.equal(a, t(jpeg, sample_rng(7, 0, 3)))
    assert not torch.equal(a, t(jpeg, sample_rng(7, 1, 3)))
    # The stdlib generator works too, and is just as reproducible.
    assert torch.equal(t(jpeg, random.Random(5)), t(jpeg, random.Random(5)))


def test_crop_box_stays_inside_and_falls_back_to_centre() -> None:
    t = TrainTransform(size=16)
    for seed in range(200):
        rng = np.random.default_rng(seed)
        width, height = (int(v) for v in rng.integers(20, 400, size=2))
        left, top, w, h = t.crop_box(width, height, rng)
        assert left >= 0 and top >= 0 and left + w <= width and top + h <= height
        assert w > 0 and h > 0
    # A 1000x10 strip admits no crop with aspect in [3/4, 4/3] and area >= 50%: centre crop.
    strip = TrainTransform(size=8, scale=(0.5, 1.0))
    assert strip.crop_box(1000, 10, np.random.default_rng(0)) == ((1000 - 13) // 2, 0, 13, 10)


def test_flip_mirrors_the_crop() -> None:
    jpeg = encode(gradient(64, 64), "PNG")
    whole = {"size": 32, "scale": (1.0, 1.0), "ratio": (1.0, 1.0)}
    plain = TrainTransform(**whole, flip=False)(jpeg, sample_rng(0))  # type: ignore[arg-type]
    seen = set()
    for seed in range(16):
        out = TrainTransform(**whole)(jpeg, sample_rng(seed))  # type: ignore[arg-type]
        if torch.equal(out, plain):
            seen.add("plain")
        else:
            assert torch.equal(out, plain.flip(-1))
            seen.add("mirrored")
    assert seen == {"plain", "mirrored"}


def test_train_transform_with_draft_matches_a_full_decode() -> None:
    src = gradient(200, 160).resize((800, 640), Image.Resampling.BILINEAR)
    jpeg = encode(src, quality=98)
    t = TrainTransform(size=64, flip=False)
    out = t(jpeg, sample_rng(3))
    left, top, w, h = t.crop_box(800, 640, sample_rng(3))
    assert min(w, h) >= 2 * 64, "pick a seed whose crop allows draft decoding"
    full = Image.open(io.BytesIO(jpeg)).convert("RGB")
    ref = full.resize((64, 64), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))
    diff = (out.permute(1, 2, 0).int() - torch.from_numpy(np.array(ref)).int()).abs()
    assert diff.float().mean() < 2.0


def test_eval_transform_exact_on_gradient() -> None:
    # Shorter side already 256: the result is exactly the centre 224x224 of the source.
    src = gradient(320, 256)
    out = EvalTransform(size=224, resize=256)(encode(src, "PNG"))
    expected = torch.from_numpy(np.array(src)[16:240, 48:272]).permute(2, 0, 1)
    assert out.dtype == torch.uint8 and torch.equal(out, expected)


def test_eval_transform_matches_resize_then_crop() -> None:
    src = gradient(200, 160).resize((500, 400), Image.Resampling.BILINEAR)
    out = EvalTransform(size=96, resize=128)(encode(src, "PNG"))
    ref = src.resize((160, 128), Image.Resampling.BILINEAR).crop((32, 16, 128, 112))
    diff = (out.permute(1, 2, 0).int() - torch.from_numpy(np.array(ref)).int()).abs()
    assert out.shape == (3, 96, 96) and diff.max() <= 1


def test_decode_rgb_draft_is_not_smaller_than_needed() -> None:
    jpeg = smooth_jpeg(800, 600)
    assert decode_rgb(jpeg).size == (800, 600)
    img = decode_rgb(jpeg, min_side=100)
    assert img.mode == "RGB" and img.size == (200, 150)  # 1/4: 1/8 would be under 100
    for side in (1, 74, 75, 76, 150, 151, 599, 600):
        assert min(decode_rgb(jpeg, min_side=side).size) >= side
    grey = encode(Image.new("L", (64, 48), 128))
    assert decode_rgb(grey).mode == "RGB"


@pytest.mark.parametrize(
    "data", [b"", b"not an image at all", smooth_jpeg(64, 64)[:300]], ids=["empty", "junk", "cut"]
)
def test_corrupt_bytes_raise_a_clear_error(data: bytes) -> None:
    with pytest.raises(PhalanxError, match=r"^key7: cannot decode \(.+\); .*re-convert"):
        decode_rgb(data, name="key7")
    with pytest.raises(ImageDecodeError):
        TrainTransform(size=8)(data, sample_rng(0))
    with pytest.raises(ImageDecodeError):
        EvalTransform(size=8, resize=8)(data)


def test_normalize_batch_numerics() -> None:
    batch = torch.randint(
        0, 256, (2, 3, 5, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    out = normalize_batch(batch)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    expected = (batch.double() / 255 - mean.double()) / std.double()
    assert out.dtype == torch.float32 and out.shape == batch.shape
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
    cl = normalize_batch(batch, channels_last=True)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(cl, out)
    assert normalize_batch(batch, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="uint8"):
        normalize_batch(batch.float())


def test_collate_uint8() -> None:
    samples = [(torch.full((3, 4, 4), i, dtype=torch.uint8), i) for i in range(5)]
    images, labels = collate_uint8(samples)
    assert images.shape == (5, 3, 4, 4) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 2, 3, 4]
    assert images[3].eq(3).all()


def _is_baseline_rgb_jpeg(data: bytes) -> bool:
    img = Image.open(io.BytesIO(data))
    return img.format == "JPEG" and img.mode == "RGB" and "progressive" not in img.info


def test_prepare_jpeg_keeps_baseline_rgb_and_reencodes_the_rest() -> None:
    rgb = make_image(np.random.default_rng(0), 48, 40)
    baseline = encode(rgb, quality=90)
    assert prepare_jpeg(baseline) == (baseline, False)
    others = {
        "png": encode(rgb.convert("RGBA"), "PNG"),
        "cmyk": encode(rgb.convert("CMYK")),
        "grey": encode(rgb.convert("L")),
        "palette": encode(rgb.convert("P"), "PNG"),
        "progressive": encode(rgb, progressive=True),
    }
    for kind, data in others.items():
        out, reencoded = prepare_jpeg(data)
        assert reencoded and _is_baseline_rgb_jpeg(out), kind
        assert Image.open(io.BytesIO(out)).size == (48, 40), kind


def test_prepare_jpeg_resizes_the_shorter_side() -> None:
    data = smooth_jpeg(300, 200)
    out, reencoded = prepare_jpeg(data, resize=50)
    assert reencoded and Image.open(io.BytesIO(out)).size == (75, 50)
    assert prepare_jpeg(data, resize=200) == (data, False)  # already small enough
    with pytest.raises(ImageDecodeError, match="truncated"):
        prepare_jpeg(data[: len(data) // 2])
