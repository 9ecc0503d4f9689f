"""Decoding on the GPU (``phalanx.data.gpudecode``), tested on the CPU.

nvJPEG needs an NVIDIA GPU and none is here, and torchvision's CPU-only build is not
installable beside this project's CPU torch: each test gives the batch decoder a Pillow
decoder in nvJPEG's place (a stand-in, said where it is used). What is tested is phalanx's
part: the crops drawn in the loader's workers, the batch, the crop-resize-mirror on the
device, naming a damaged image, and resuming mid-epoch at the same sample and crop.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from phalanx.data.convert import convert_imagefolder
from phalanx.data.gpudecode import (
    BatchDecoder,
    EncodedBatch,
    EvalPlan,
    TrainPlan,
    collate_encoded,
    jpeg_size,
)
from phalanx.data.images import EvalTransform, ImageDecodeError, TrainTransform, sample_rng
from phalanx.data.stream import LocalShardSource, ShardDataset, StatefulLoader
from phalanx.data.synthetic import make_imagefolder
from phalanx.storage.location import local

CPU = torch.device("cpu")


def pillow_decode(data: list[torch.Tensor]) -> list[torch.Tensor]:
    """A stand-in for nvJPEG (no GPU here): full-size RGB decodes as (3, H, W) uint8."""
    out = []
    for t in data:
        with Image.open(io.BytesIO(t.numpy().tobytes())) as img:
            rgb = np.array(img.convert("RGB"), dtype=np.uint8)
        out.append(torch.from_numpy(rgb).permute(2, 0, 1).contiguous())
    return out


def jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """A smooth image (gradients), so that two resamplings of it differ only a little."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], -1)
    rgb = (rgb + seed * 37) % 256
    buf = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def encoded_parts(batch: EncodedBatch) -> list[bytes]:
    """Each sample's bytes, cut from the batch's one tensor by its offsets."""
    raw, ends = batch.data.numpy().tobytes(), batch.offsets.tolist()
    return [raw[a:b] for a, b in itertools.pairwise(ends)]


class Sample:
    """The reference trainer's ``TrainPlanSample``: a module-level class, so it pickles."""

    def __call__(self, data: bytes, label: int, rng: np.random.Generator) -> tuple[object, int]:
        return TrainPlan(32)(data, rng), label


def test_the_workers_draw_the_crop_and_flip_the_cpu_path_draws() -> None:
    data = jpeg(320, 200)
    for index in range(20):
        plan = TrainPlan(64)(data, sample_rng(7, 0, index))
        rng = sample_rng(7, 0, index)
        box = TrainTransform(64).crop_box(320, 200, rng)
        assert plan.box == box and plan.mirror == (rng.random() < 0.5)
        assert bytes(plan.data.numpy()) == data  # still encoded
    assert jpeg_size(data) == (320, 200)


def test_a_batch_decoded_on_the_device_matches_the_cpu_paths_images() -> None:
    images = [jpeg(320, 200, 0), jpeg(180, 260, 1), jpeg(500, 400, 2)]
    decoder = BatchDecoder(64, CPU, decode=pillow_decode)  # Pillow for nvJPEG: no GPU here
    train = collate_encoded(
        [(TrainPlan(64)(d, sample_rng(3, 0, i)), i) for i, d in enumerate(images)]
    )
    out, labels = decoder(train)
    assert out.dtype == torch.uint8 and out.shape == (3, 3, 64, 64)
    assert labels.tolist() == [0, 1, 2]
    for i, data in enumerate(images):
        cpu = TrainTransform(64)(data, sample_rng(3, 0, i))
        # The same crop and flip; only the resampling differs (a few levels of 255).
        diff = (out[i].float() - cpu.float()).abs().mean().item()
        assert diff < 3, (i, diff)
    evaluated, _ = BatchDecoder(48, CPU, decode=pillow_decode)(
        collate_encoded([(EvalPlan(48, 55)(d), 0) for d in images])
    )
    for i, data in enumerate(images):
        diff = (evaluated[i].float() - EvalTransform(48, 55)(data).float()).abs().mean().item()
        assert diff < 3, (i, diff)


def test_a_mirrored_sample_is_the_mirror_of_the_unmirrored_one() -> None:
    data = jpeg(300, 300)
    plan = TrainPlan(40)(data, sample_rng(0, 0, 0))
    decoder = BatchDecoder(40, CPU, decode=pillow_decode)  # Pillow for nvJPEG: no GPU here
    both = collate_encoded([(plan._replace(mirror=False), 0), (plan._replace(mirror=True), 0)])
    out, _ = decoder(both)
    assert torch.equal(out[0].flip(-1), out[1]) and not torch.equal(out[0], out[1])


def test_a_batch_crosses_from_a_worker_as_a_few_tensors_whatever_its_size() -> None:
    """Every tensor a loader worker sends costs a file descriptor while it is queued: a
    batch is five tensors (bytes, offsets, boxes, flips, labels), not one per image."""
    images = [jpeg(64 + i, 48, i) for i in range(40)]
    batch = collate_encoded(
        [(TrainPlan(32)(d, sample_rng(0, 0, i)), i) for i, d in enumerate(images)]
    )
    tensors = [v for v in batch if isinstance(v, torch.Tensor)]
    assert len(tensors) == 5 and batch.data.dim() == 1
    assert encoded_parts(batch) == images


def test_a_decoder_that_fails_on_every_image_is_not_blamed_on_one() -> None:
    """A CUDA error sticks to its process: after it every decode fails, and no image
    may then be called damaged (the decoder's own error is raised)."""

    def broken(data: list[torch.Tensor]) -> list[torch.Tensor]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    batch = collate_encoded(
        [(TrainPlan(32)(jpeg(64, 48), sample_rng(0, 0, i)), 0) for i in range(3)]
    )
    with pytest.raises(RuntimeError, match="illegal memory access"):
        BatchDecoder(32, CPU, decode=broken)(batch)


def test_a_damaged_image_is_named_and_nothing_else_is_blamed() -> None:
    good = jpeg(120, 90)
    plans = [TrainPlan(32)(good, sample_rng(0, 0, i)) for i in range(3)]
    broken = plans[1]._replace(data=torch.frombuffer(bytearray(good[:200]), dtype=torch.uint8),
                               name="sample 17")  # fmt: skip
    batch = collate_encoded([(plans[0], 0), (broken, 0), (plans[2], 0)])
    with pytest.raises(ImageDecodeError, match=r"^sample 17: cannot decode .*phalanx data convert"):
        BatchDecoder(32, CPU, decode=pillow_decode)(batch)  # Pillow for nvJPEG: no GPU here
    with pytest.raises(ImageDecodeError, match="cannot read its header"):
        TrainPlan(32)(b"not a jpeg", sample_rng(0, 0, 0), name="sample 3")


def test_no_gpu_means_a_clear_error_not_a_crash() -> None:
    if torch.cuda.is_available():  # pragma: no cover - this project's machines have none
        pytest.fail("this test is for machines without CUDA")
    try:
        import torchvision.io  # noqa: F401
    except ImportError:
        with pytest.raises(ImageDecodeError, match="needs torchvision"):
            BatchDecoder(32, torch.device("cuda"))
    else:  # pragma: no cover - torchvision is not installed here
        pytest.fail("torchvision is not expected beside the CPU torch")


def test_resuming_mid_epoch_gives_the_same_samples_and_crops(tmp_path: Path) -> None:
    raw = make_imagefolder(tmp_path / "raw", classes=3, per_class=12, size_range=(40, 90))
    convert_imagefolder(raw, local(str(tmp_path / "shards")), shard_bytes=8_000, workers=1)

    def loader() -> StatefulLoader:
        ds = ShardDataset(LocalShardSource(tmp_path / "shards"), seed=5, transform=Sample(),
                          rank=0, world_size=1)  # fmt: skip
        return StatefulLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_encoded,
                              drop_last=True)  # fmt: skip

    def key(batch: EncodedBatch) -> list[tuple[bytes, tuple[float, ...], bool]]:
        boxes, mirror = batch.boxes.tolist(), batch.mirror.tolist()
        return [
            (bytes(d), tuple(b), bool(m))
            for d, b, m in zip(encoded_parts(batch), boxes, mirror, strict=True)
        ]

    whole = loader()
    whole.set_epoch(1)
    expected = [key(b) for b in whole]
    first = loader()
    first.set_epoch(1)
    it = iter(first)
    seen = [key(next(it)) for _ in range(3)]
    state = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [key(b) for b in resumed]
    assert seen + rest == expected and len(expected) == 9
    out, _ = BatchDecoder(32, CPU, decode=pillow_decode)(next(iter(loader())))
    assert out.shape == (4, 3, 32, 32)
