"""Small synthetic ImageNet-layout folders for tests, the demo job and benchmarks."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def class_name(number: int) -> str:
    """The folder name of synthetic class ``number`` (ImageNet-like: ``n00000003``)."""
    return f"n{number:08d}"


def make_image(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A random RGB image: a smooth colour field plus mild noise.

    Smooth fields compress like photographs rather than like pure noise, so JPEG
    sizes (and hence shard sizes and decode times) look realistic.
    """
    # Field values stay within 0..224 and noise within 0..31, so uint8 sums never wrap.
    coarse = rng.integers(0, 225, size=(height // 16 + 2, width // 16 + 2, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BILINEAR))
    noise = np.frombuffer(rng.bytes(field.size), dtype=np.uint8).reshape(field.shape) >> 3
    return Image.fromarray(field + noise)


def make_imagefolder(
    root: Path,
    classes: int = 3,
    per_class: int = 10,
    size_range: tuple[int, int] = (40, 90),
    seed: int = 0,
    corrupt: int = 0,
    *,
    png: int = 0,
    learnable: bool = False,
) -> Path:
    """Write a deterministic ImageNet-layout folder ``root/<class>/<image>``.

    Every class gets ``per_class`` JPEGs (quality 90) whose width and height are
    drawn independently from ``size_range``. The same arguments always give the
    same bytes.

    Args:
        root: Folder to create (parents too); existing files of the same name are
            overwritten.
        classes: Number of class folders (``n00000000``, ``n00000001``, ...).
        per_class: Valid JPEGs per class.
        size_range: Inclusive bounds of each image side, in pixels.
        seed: Seed for every random choice.
        corrupt: Extra undecodable files, spread over the classes round robin; even
            ones are truncated JPEGs, odd ones are not images at all. They are named
            ``corrupt_<i>.JPEG``.
        png: Extra valid PNG images (RGBA), spread over the classes round robin, named
            ``extra_<i>.png``.
        learnable: Tint each class's images with a colour of its own, so a model
            can learn the classes (the demo job shows accuracy rising); otherwise
            labels carry no signal.

    Returns:
        ``root``.
    """
    if classes < 1 or per_class < 0 or size_range[0] < 1 or size_range[0] > size_range[1]:
        raise ValueError(f"bad synthetic folder shape {classes=} {per_class=} {size_range=}")
    rng = np.random.default_rng(seed)
    lo, hi = size_range
    dirs = [root / class_name(c) for c in range(classes)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for c, d in enumerate(dirs):
        for i in range(per_class):
            w, h = (int(v) for v in rng.integers(lo, hi + 1, size=2))
            img = make_image(rng, w, h)
            if learnable:
                img = _tint(img, c, classes)
            img.save(d / f"{class_name(c)}_{i}.JPEG", "JPEG", quality=90)
    for i in range(png):
        w, h = (int(v) for v in rng.integers(lo, hi + 1, size=2))
        img = make_image(rng, w, h).convert("RGBA")
        img.save(dirs[i % classes] / f"extra_{i}.png", "PNG")
    for i in range(corrupt):
        if i % 2 == 0:
            buf = io.BytesIO()
            make_image(rng, hi, hi).save(buf, "JPEG", quality=90)
            data = buf.getvalue()[: buf.tell() // 2]
        else:
            data = b"this is not an image\n" * 8
        (dirs[i % classes] / f"corrupt_{i}.JPEG").write_bytes(data)
    return root


def _tint(img: Image.Image, c: int, classes: int) -> Image.Image:
    """Blend ``img`` with class ``c``'s own hue (evenly spaced around the colour wheel)."""
    import colorsys

    r, g, b = colorsys.hsv_to_rgb(c / classes, 0.9, 0.9)
    colour = Image.new("RGB", img.size, (int(r * 255), int(g * 255), int(b * 255)))
    return Image.blend(img, colour, 0.5)
