"""ImageFolder -> tar shards: the format, the converter, determinism and resume."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from PIL import Image

import phalanx.data.convert as convert
from conftest import Cli
from phalanx.data.convert import STATE_DIR, ConvertReport, convert_imagefolder
from phalanx.data.shards import (
    INDEX_NAME,
    ShardIndex,
    ShardWriter,
    iter_samples,
    read_index,
)
from phalanx.data.synthetic import class_name, make_image, make_imagefolder
from phalanx.errors import PhalanxError
from phalanx.storage.location import Location, local

SHARD_BYTES = 24_000  # a few images per shard, so every test spans several shards


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes x 10 JPEGs, one PNG and two corrupt files; shared, never modified."""
    root = tmp_path_factory.mktemp("imagefolder") / "train"
    return make_imagefolder(root, classes=3, per_class=10, corrupt=2, png=1)


def run(src: Path, dest: Path, **kw: object) -> ConvertReport:
    kw.setdefault("shard_bytes", SHARD_BYTES)
    kw.setdefault("workers", 1)
    return convert_imagefolder(src, local(str(dest)), **kw)  # type: ignore[arg-type]


def all_samples(dest: Path) -> list[tuple[str, bytes, int]]:
    index = read_index(local(str(dest)))
    return [s for shard in index.shards for s in iter_samples(dest / shard.name)]


def test_round_trip(src: Path, tmp_path: Path) -> None:
    progress: list[tuple[int, int]] = []
    report = run(src, tmp_path / "ds", progress=lambda done, total: progress.append((done, total)))
    index = read_index(local(str(tmp_path / "ds")))

    assert index.classes == [class_name(c) for c in range(3)] == report.classes
    assert report.samples == index.samples == 31 and report.shards == len(index.shards) > 2
    assert report.reencoded == index.source["reencoded"] == 1  # the PNG
    assert sorted(s.path for s in index.skipped) == [
        "n00000000/corrupt_0.JPEG",
        "n00000001/corrupt_1.JPEG",
    ]
    assert "truncated" in index.skipped[0].reason
    assert progress[0] == (0, 33) and progress[-1] == (33, 33)
    assert [a for a, _ in progress] == sorted(a for a, _ in progress)
    assert report.index_url == f"file://{tmp_path / 'ds' / INDEX_NAME}"

    for shard in index.shards:
        data = (tmp_path / "ds" / shard.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (shard.bytes, shard.sha256)
        assert shard.samples == sum(1 for _ in iter_samples(tmp_path / "ds" / shard.name))

    # Every valid source JPEG appears exactly once, byte for byte, under its class label.
    samples = all_samples(tmp_path / "ds")
    assert len({key for key, _, _ in samples}) == len(samples)
    assert all("." not in key for key, _, _ in samples)
    stored = Counter((jpeg, label) for _, jpeg, label in samples)
    for label, name in enumerate(index.classes):
        for path in sorted((src / name).glob(f"{name}_*.JPEG")):
            assert stored.pop((path.read_bytes(), label)) == 1
    [(png_jpeg, png_label)] = list(stored.elements())  # what is left: the re-encoded PNG
    assert png_label == 0
    decoded = Image.open(io.BytesIO(png_jpeg))
    assert (decoded.format, decoded.mode) == ("JPEG", "RGB")
    original = np.asarray(Image.open(src / class_name(0) / "extra_0.png").convert("RGB"), float)
    # Pixel noise and 4:2:0 chroma subsampling cost a few levels, no more.
    assert np.abs(np.asarray(decoded, float) - original).mean() < 8


def test_tar_members_are_deterministic_and_paired(src: Path, tmp_path: Path) -> None:
    run(src, tmp_path / "ds")
    with tarfile.open(tmp_path / "ds" / "shard-000000.tar") as tar:
        members = tar.getmembers()
    assert members and all(
        (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
        for m in members
    )
    names = [m.name for m in members]
    assert names[0::2] == [n.replace(".cls", ".jpg") for n in names[1::2]]
    assert all(n.endswith(".jpg") for n in names[0::2])
    assert not (tmp_path / "ds" / STATE_DIR).exists()


def test_same_output_for_any_worker_count(src: Path, tmp_path: Path) -> None:
    run(src, tmp_path / "one", workers=1)
    run(src, tmp_path / "two", workers=2)
    one = (tmp_path / "one" / INDEX_NAME).read_text()
    assert one == (tmp_path / "two" / INDEX_NAME).read_text()
    assert len(ShardIndex.from_json(one).shards) > 2


def test_remote_destination(src: Path, tmp_path: Path) -> None:
    dest = Location(MemoryFileSystem(), "/phalanx-test/ds", "memory://phalanx-test/ds")
    try:
        report = convert_imagefolder(
            src, dest, shard_bytes=SHARD_BYTES, workers=1, tmp_dir=tmp_path
        )
        index = read_index(dest)
        assert report.samples == index.samples == 31
        for shard in index.shards:
            data = dest.fs.cat_file(dest.child(shard.name).path)
            assert hashlib.sha256(data).hexdigest() == shard.sha256
        assert not dest.fs.exists(dest.child(STATE_DIR).path)
        assert list(tmp_path.iterdir()) == []  # staging cleaned up
    finally:
        dest.fs.rm(dest.path, recursive=True)


class Interrupted(Exception):
    pass


def test_resume_after_interruption(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = run(src, tmp_path / "reference")
    dest = tmp_path / "ds"

    def recorded() -> list[str]:
        return sorted(p.name.removesuffix(".done") for p in (dest / STATE_DIR).glob("*.done"))

    def stop_after_two_shards(done: int, total: int) -> None:
        if len(recorded()) >= 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        run(src, dest, progress=stop_after_two_shards)
    assert not (dest / INDEX_NAME).exists()
    finished = recorded()
    assert finished == ["shard-000000.tar", "shard-000001.tar"]
    mtimes = {name: (dest / name).stat().st_mtime_ns for name in finished}
    # A shard file with no completion record (died mid-upload) must be redone.
    (dest / "shard-000002.tar").write_bytes(b"partial")

    converted: list[str] = []
    real = convert._convert_shard

    def counting(task: convert._Task, tick: convert.Callable[[int, int], None]) -> convert._Done:
        converted.append(task.plan.name)
        return real(task, tick)

    monkeypatch.setattr(convert, "_convert_shard", counting)
    report = run(src, dest)
    assert report.resumed == 2 and not set(converted) & set(finished)
    assert len(converted) == reference.shards - 2 and "shard-000002.tar" in converted
    assert {name: (dest / name).stat().st_mtime_ns for name in finished} == mtimes
    assert (dest / INDEX_NAME).read_text() == (tmp_path / "reference" / INDEX_NAME).read_text()
    assert not (dest / STATE_DIR).exists()


def test_resume_redoes_shards_whose_inputs_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_imagefolder(tmp_path / "src", classes=2, per_class=6)

    def crash(*args: object) -> None:
        raise Interrupted  # every shard is done, the index not yet written

    with monkeypatch.context() as m:
        m.setattr(convert, "_finish", crash)
        for name in ("same", "changed"):
            with pytest.raises(Interrupted):
                run(src, tmp_path / name, shard_bytes=10**9)
    assert run(src, tmp_path / "same", shard_bytes=10**9).resumed == 1
    changed = src / class_name(1) / "n00000001_5.JPEG"
    make_image(np.random.default_rng(9), 70, 70).save(changed)
    report = run(src, tmp_path / "changed", shard_bytes=10**9)
    assert report.resumed == 0 and report.shards == 1
    assert changed.read_bytes() in {jpeg for _, jpeg, _ in all_samples(tmp_path / "changed")}


def test_refuses_to_overwrite_a_complete_dataset(src: Path, tmp_path: Path) -> None:
    dest = tmp_path / "ds"
    small = run(src, dest)
    with pytest.raises(PhalanxError, match=r"already holds a complete dataset.*overwrite"):
        run(src, dest)
    report = run(src, dest, shard_bytes=10**9, overwrite=True)
    assert small.shards > 1 and report.shards == 1
    assert sorted(p.name for p in dest.iterdir()) == [INDEX_NAME, "shard-000000.tar"]


def test_resize(src: Path, tmp_path: Path) -> None:
    report = run(src, tmp_path / "ds", resize=32)
    assert report.samples == 31 and report.reencoded == 31  # every image is larger than 32
    for _, jpeg, _ in all_samples(tmp_path / "ds"):
        img = Image.open(io.BytesIO(jpeg))
        assert min(img.size) == 32 and (img.format, img.mode) == ("JPEG", "RGB")


def test_not_an_image_folder(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"x")
    (tmp_path / "empty" / "cls_a").mkdir(parents=True)
    (tmp_path / "empty" / "cls_a" / "notes.txt").write_text("x")
    cases = {
        "missing": "no such folder",
        "file.txt": "is a file",
        "flat": "no class subfolders",
        "empty": "cls_a hold no image files",
    }
    for name, why in cases.items():
        with pytest.raises(PhalanxError, match=rf"{why}.*expected an ImageNet-style folder"):
            run(tmp_path / name, tmp_path / "out")


def test_all_images_corrupt(tmp_path: Path) -> None:
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.jpg").write_bytes(b"junk")
    with pytest.raises(PhalanxError, match=r"none of the 1 images could be used; first: a/x.jpg"):
        run(tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def test_index_validation(tmp_path: Path) -> None:
    good = ShardIndex(classes=["a"], samples=0, shards=[]).to_json()
    assert ShardIndex.from_json(good).classes == ["a"]
    doc = json.loads(good)
    broken = {
        "classes": ({**doc, "classes": None}, "field 'classes' must be a list"),
        "missing": ({k: v for k, v in doc.items() if k != "samples"}, "missing field 'samples'"),
        "format": ({**doc, "format": "other"}, "not a phalanx sharded dataset"),
        "count": ({**doc, "samples": 5}, "'samples' is 5 but the shards hold 0"),
        "shard": ({**doc, "shards": [{"name": "s"}]}, r"shards\[0\]: missing field 'samples'"),
    }
    for text, why in broken.values():
        with pytest.raises(PhalanxError, match=rf"^x/index.json: .*{why}"):
            ShardIndex.from_json(json.dumps(text), where="x/index.json")
    with pytest.raises(PhalanxError, match="not a valid JSON"):
        ShardIndex.from_json("{", where="x/index.json")
    with pytest.raises(PhalanxError, match=r"index.json: not found; .* not a complete"):
        read_index(local(str(tmp_path)))


def test_iter_samples_rejects_damaged_shards(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    with ShardWriter(path, "s.tar") as writer:
        writer.write("k_0", b"\xff\xd8" + b"x" * 2000, 3)
        writer.write("k_1", b"\xff\xd8" + b"y" * 2000, 4)
    assert [(k, label) for k, _, label in iter_samples(path)] == [("k_0", 3), ("k_1", 4)]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(path.read_bytes()[:1200])
    with pytest.raises(PhalanxError, match=r"^cut.tar: not a readable shard"):
        list(iter_samples(cut, name="cut.tar"))
    lonely = tmp_path / "lonely.tar"
    with tarfile.open(lonely, "w") as tar:
        tar.addfile(tarfile.TarInfo("k_0.jpg"), io.BytesIO(b""))
    with pytest.raises(PhalanxError, match=r"lonely.tar: sample 'k_0' has no .cls member"):
        list(iter_samples(lonely))
    with (
        pytest.raises(ValueError, match="invalid shard key"),
        ShardWriter(tmp_path / "t", "t") as w,
    ):
        w.write("a.b", b"", 0)


def test_hidden_names_and_strays(tmp_path: Path) -> None:
    src = make_imagefolder(tmp_path / "src", classes=1, per_class=2)
    folder = src / class_name(0)
    (folder / ".DS_Store").write_bytes(b"x")  # not an image: left out without a word
    (folder / "notes.txt").write_text("x")
    (folder / "empty").mkdir()
    make_image(np.random.default_rng(1), 50, 50).save(folder / ".hidden.jpg")
    report = run(src, tmp_path / "ds")
    assert report.classes == [class_name(0)] and report.samples == 3  # .hidden.jpg counts
    assert [(s.path, s.reason) for s in report.skipped] == [
        (
            "n00000000/notes.txt",
            "not an image: the name does not end with "
            ".jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp",
        ),
    ]
    # A hidden folder of the source is a class, as in torchvision, so an empty one
    # is refused as torchvision refuses it (rather than shifting every label).
    (src / ".ipynb_checkpoints").mkdir()
    with pytest.raises(PhalanxError, match=r"class folder\(s\) .ipynb_checkpoints hold no image"):
        run(src, tmp_path / "ds2")


# -- torchvision's ImageFolder rule ------------------------------------------

TORCHVISION_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def torchvision_samples(root: Path) -> list[tuple[str, int]]:
    """What ``torchvision.datasets.ImageFolder(root).samples`` holds, relative to ``root``:
    its find_classes and make_dataset, written out (torchvision is not installed here)."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    samples = []
    for label, cls in enumerate(classes):
        for folder, _, names in sorted(os.walk(root / cls, followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith(TORCHVISION_EXTENSIONS):
                    samples.append((os.path.relpath(os.path.join(folder, name), root), label))
    return samples


def nested_imagefolder(tmp_path: Path) -> Path:
    """Classes with images in sub-folders, linked folders (a class and a sub-folder),
    upper-case and hidden image names, other files and a corrupt image."""
    rng = np.random.default_rng(5)
    src = make_imagefolder(tmp_path / "src", classes=2, per_class=2, corrupt=1)
    a, b = src / class_name(0), src / class_name(1)
    (a / "nested" / "v1.2").mkdir(parents=True)  # a dot in a folder name
    make_image(rng, 60, 50).save(a / "nested" / "v1.2" / "deep.JPG")
    make_image(rng, 60, 50).save(a / "nested" / "shallow.Png")
    (a / "nested" / "readme.txt").write_text("not an image")
    make_image(rng, 60, 50).save(a / "nested" / "anim.gif")  # Pillow reads it; torchvision not
    outside = tmp_path / "outside"
    outside.mkdir()
    make_image(rng, 60, 50).save(outside / "linked.jpeg")
    make_image(rng, 60, 50).save(outside / "linked.bmp")
    (b / "linked").symlink_to(outside, target_is_directory=True)
    make_image(rng, 60, 50).save(b / ".hidden.webp")
    other = tmp_path / "other_class"
    other.mkdir()
    make_image(rng, 60, 50).save(other / "x.tiff")
    (src / "z_linked_class").symlink_to(other, target_is_directory=True)
    return src


def test_samples_are_torchvisions(tmp_path: Path) -> None:
    src = nested_imagefolder(tmp_path)
    expected = torchvision_samples(src)
    assert len(expected) == 11  # 2x2 + corrupt + deep, shallow + 2 linked + hidden + z's
    scan = convert.scan_imagefolder(src)
    assert scan.classes == [class_name(0), class_name(1), "z_linked_class"]
    assert [(f.rel, f.label) for f in scan.files] == expected  # same files, same order

    report = run(src, tmp_path / "ds")
    corrupt = f"{class_name(0)}/corrupt_0.JPEG"
    assert report.samples == len(expected) - 1  # the corrupt image is reported instead
    reasons = {s.path: s.reason for s in report.skipped}
    assert set(reasons) == {
        corrupt,
        f"{class_name(0)}/nested/readme.txt",
        f"{class_name(0)}/nested/anim.gif",
    }
    assert "cannot decode image" in reasons[corrupt]
    assert reasons[f"{class_name(0)}/nested/anim.gif"].startswith("not an image: the name")

    samples = all_samples(tmp_path / "ds")
    keys = [key for key, _, _ in samples]
    assert len(set(keys)) == len(keys) == report.samples
    assert not any("." in key or "/" in key for key in keys)
    assert Counter(label for _, _, label in samples) == Counter(
        label for rel, label in expected if rel != corrupt
    )
    deep = (src / class_name(0) / "nested" / "v1.2" / "deep.JPG").read_bytes()
    assert (deep, 0) in {(jpeg, label) for _, jpeg, label in samples}

    # The plan does not depend on the worker count with nested files either.
    run(src, tmp_path / "two", workers=2)
    assert (tmp_path / "two" / INDEX_NAME).read_text() == (tmp_path / "ds" / INDEX_NAME).read_text()


def test_a_link_loop_ends_and_is_reported(cli: Cli, tmp_path: Path) -> None:
    src = nested_imagefolder(tmp_path)
    expected = torchvision_samples(src)  # before the loops: torchvision would not end
    nested = src / class_name(0) / "nested"
    (nested / "up").symlink_to("..", target_is_directory=True)  # back to the class folder
    (tmp_path / "outside" / "home").symlink_to(src, target_is_directory=True)  # to the root

    scan = convert.scan_imagefolder(src)
    assert [(f.rel, f.label) for f in scan.files] == expected
    loops = {s.path: s.reason for s in scan.skipped if "loop" in s.reason}
    assert loops == {
        f"{class_name(0)}/nested/up": (
            f"a loop: links back to {class_name(0)}, which holds it; not followed"
        ),
        f"{class_name(1)}/linked/home": (
            "a loop: links back to the source folder, which holds it; not followed"
        ),
    }

    proc = cli.run(
        "data", "convert", "imagefolder", str(src), str(tmp_path / "ds"), "--workers", "1",
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{len(expected) - 1} images in" in proc.stdout
    assert f"{class_name(0)}/nested/up: a loop: links back to {class_name(0)}" in proc.stdout
    index = read_index(local(str(tmp_path / "ds")))
    assert index.samples == len(expected) - 1
    assert {s.path for s in index.skipped} >= set(loops)
