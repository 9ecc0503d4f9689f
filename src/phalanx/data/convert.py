"""Convert an ImageNet-style folder into tar shards (see :mod:`phalanx.data.shards`).

Which files are samples, and their labels, follow torchvision's ``ImageFolder``
(:mod:`phalanx.data.imagefolder`): one class per sub-folder of the source,
sorted; each class folder searched recursively, links to folders followed
(a link that loops back is reported, not followed); a file is a sample when its
name ends with a torchvision image extension, in any case. Everything left out
is listed with the reason in the report and in ``index.json``: other files,
unreadable files and folders, loops, and images that cannot be decoded.

The conversion is planned up front and the plan is a pure function of the source
folder's listing (sorted class folders, sorted file names, file sizes), so:

* shards are byte-identical whatever the number of worker processes;
* an interrupted conversion resumes where it stopped: after a shard is uploaded the
  converter writes ``_convert/<shard>.done`` (the shard's record and a fingerprint of
  its planned contents), and a re-run skips every shard whose record matches the
  plan and whose file is present with the recorded size;
* ``index.json`` is written last, then ``_convert/`` is deleted.

Shard boundaries come from accumulating source file sizes (scaled down when
``resize`` shrinks images) up to ``shard_bytes``, so shards land near, usually a
little under, the target size.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from phalanx.data.imagefolder import SourceScan, scan_imagefolder
from phalanx.data.images import JPEG_QUALITY, ImageDecodeError, prepare_jpeg
from phalanx.data.shards import (
    INDEX_NAME,
    VERSION,
    ShardIndex,
    ShardInfo,
    ShardWriter,
    Skipped,
    shard_name,
)
from phalanx.errors import PhalanxError
from phalanx.storage.location import Location

DEFAULT_SHARD_BYTES = 256 * 1024 * 1024
STATE_DIR = "_convert"
_SAMPLE_OVERHEAD = 1792  # two ustar headers, the label block and average padding
_SHARD_FILE = re.compile(r"shard-\d{6,}\.tar")

Progress = Callable[[int, int], None]
"""Called with (samples processed, samples planned)."""


@dataclass(frozen=True)
class ShardPlan:
    """The planned contents of one shard: ``(key, rel path, label)`` per sample."""

    name: str
    samples: list[tuple[str, str, int]]
    fingerprint: str
    """Hash of everything the shard's bytes depend on; a resume trusts a shard only
    when its recorded fingerprint matches."""


@dataclass(frozen=True)
class ConvertReport:
    """What a conversion produced."""

    samples: int
    shards: int
    bytes: int
    skipped: list[Skipped]
    classes: list[str]
    seconds: float
    index_url: str
    resumed: int = 0
    """Shards reused from an interrupted earlier run."""
    reencoded: int = 0
    """Images re-encoded (not baseline RGB JPEG, or resized)."""


def sample_key(class_name: str, index: int) -> str:
    """The shard key of sample ``index``: ``<class>_<index>``, dot-free and tar-safe.

    The dataset-wide index keeps keys unique even when two class names sanitise alike,
    and the file's own path (sub-folders, dots in their names) never enters the key,
    so ``iter_samples`` groups ``<key>.jpg`` with ``<key>.cls`` whatever the layout.
    """
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", class_name)[:48] or "class"
    return f"{safe}_{index:08d}"


def plan_shards(
    scan: SourceScan,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    resize: int | None = None,
    shuffle_seed: int | None = 0,
) -> list[ShardPlan]:
    """Split ``scan.files`` into shards; a pure function of the listing and options.

    With a ``shuffle_seed`` the samples are written in a seeded random order, so
    every shard mixes the classes: a streaming loader's shuffle window then never
    hands a rank a batch of one class. ``None`` keeps the folders' order.
    """
    scale = _resize_scale(scan, resize) if resize else 1.0
    plans: list[ShardPlan] = []
    current: list[tuple[str, str, int]] = []
    stamps: list[tuple[int, int]] = []
    size = 0
    order = list(range(len(scan.files)))
    if shuffle_seed is not None:
        order = [int(i) for i in np.random.default_rng(shuffle_seed).permutation(len(order))]

    def flush() -> None:
        stamp = json.dumps([VERSION, JPEG_QUALITY, resize, shuffle_seed, current, stamps])
        fingerprint = hashlib.sha256(stamp.encode()).hexdigest()
        plans.append(ShardPlan(shard_name(len(plans)), list(current), fingerprint))

    for index in order:
        f = scan.files[index]
        estimate = int(f.size * scale) + _SAMPLE_OVERHEAD
        if current and size + estimate > shard_bytes:
            flush()
            current, stamps, size = [], [], 0
        current.append((sample_key(scan.classes[f.label], index), f.rel, f.label))
        stamps.append((f.size, f.mtime))
        size += estimate
    if current:
        flush()
    return plans


def _resize_scale(scan: SourceScan, resize: int) -> float:
    """Mean fraction of pixels kept by ``resize`` over an evenly spaced sample of files.

    Reads image headers only; the sample is fixed by the listing, so the plan stays
    deterministic.
    """
    n = len(scan.files)
    picks = sorted({i * n // min(n, 64) for i in range(min(n, 64))})
    ratios = []
    for i in picks:
        try:
            with Image.open(scan.root / scan.files[i].rel) as im:
                ratios.append(min(1.0, (resize / max(1, min(im.size))) ** 2))
        except Exception:  # an unreadable file is reported later; here it just counts as 1
            ratios.append(1.0)
    return max(0.01, sum(ratios) / len(ratios)) if ratios else 1.0


@dataclass(frozen=True)
class _Task:
    number: int
    plan: ShardPlan
    src: Path
    dest: Location
    tmp_dir: str | None
    resize: int | None


@dataclass(frozen=True)
class _Done:
    info: ShardInfo
    skipped: list[Skipped]
    reencoded: int
    fingerprint: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str | bytes) -> _Done:
        d = json.loads(text)
        skipped = [Skipped(**s) for s in d["skipped"]]
        return _Done(ShardInfo(**d["info"]), skipped, int(d["reencoded"]), str(d["fingerprint"]))


def _is_local(loc: Location) -> bool:
    protocol = loc.fs.protocol
    return "file" in (protocol if isinstance(protocol, tuple) else (protocol,))


def _convert_shard(task: _Task, tick: Callable[[int, int], None]) -> _Done:
    """Write, hash and upload one shard; ``tick(shard, n)`` reports progress."""
    dest = task.dest.child(task.plan.name)
    local = _is_local(task.dest)
    # A local destination gets the shard renamed into place: no second copy, and a
    # reader never sees a half-written shard under its final name.
    folder = Path(task.dest.path) if local else Path(task.tmp_dir or tempfile.gettempdir())
    tmp = folder / f".{task.plan.name}.partial"
    skipped: list[Skipped] = []
    reencoded = pending = 0
    try:
        with ShardWriter(tmp, task.plan.name) as writer:
            for key, rel, label in task.plan.samples:
                try:
                    jpeg, changed = prepare_jpeg((task.src / rel).read_bytes(), task.resize)
                except ImageDecodeError as exc:
                    skipped.append(Skipped(rel, f"cannot decode image ({exc.reason})"))
                except OSError as exc:
                    skipped.append(Skipped(rel, f"cannot read file ({exc.strerror or exc})"))
                else:
                    writer.write(key, jpeg, label)
                    reencoded += changed
                pending += 1
                if pending == 32:
                    tick(task.number, pending)
                    pending = 0
        info = writer.close()
        try:
            if local:
                os.replace(tmp, dest.path)
            else:
                task.dest.fs.put_file(str(tmp), dest.path)
        except OSError as exc:
            raise PhalanxError(f"cannot write {dest.url}: {exc}; check the destination") from exc
    finally:
        tmp.unlink(missing_ok=True)
    tick(task.number, pending)
    return _Done(info, skipped, reencoded, task.plan.fingerprint)


_QUEUE: Any = None  # the worker process's progress queue, set by _init_worker


def _init_worker(queue: Any) -> None:
    global _QUEUE
    _QUEUE = queue


def _pool_convert_shard(task: _Task) -> _Done:
    return _convert_shard(task, lambda shard, n: _QUEUE.put((shard, n)))


def convert_imagefolder(
    src: Path,
    dest: Location,
    *,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    workers: int | None = None,
    progress: Progress | None = None,
    resize: int | None = None,
    overwrite: bool = False,
    tmp_dir: Path | None = None,
    shuffle_seed: int | None = 0,
) -> ConvertReport:
    """Convert the ImageNet-style folder ``src`` into a sharded dataset at ``dest``.

    Args:
        src: Local folder ``src/<class>/[<sub-folders>/]<image files>``; which files
            are samples is torchvision's rule (:mod:`phalanx.data.imagefolder`).
        dest: Dataset folder on any datastore; created if missing.
        shard_bytes: Target shard size (source bytes per shard, see the module doc).
        workers: Processes that encode shards in parallel; default: all CPUs. With more
            than one, a calling script needs the ``if __name__ == "__main__":`` guard,
            as for any ``multiprocessing`` pool that does not fork.
        progress: Called with (samples processed, samples planned) as work advances.
        resize: Scale images down so their shorter side is at most this many pixels.
        overwrite: Replace a complete dataset already at ``dest``.
        tmp_dir: Where shards are staged before upload to a remote ``dest``.
        shuffle_seed: Seed of the order samples are written in (shards then mix the
            classes); ``None`` keeps the folders' class-by-class order.

    Returns:
        What was written, including every skipped source file and why.

    Raises:
        PhalanxError: ``src`` is not an image folder, ``dest`` already holds a dataset
            and ``overwrite`` is false, no image could be decoded, or a write failed.
    """
    started = time.monotonic()
    if shard_bytes < 1:
        raise PhalanxError(f"shard size must be positive, got {shard_bytes} bytes")
    if resize is not None and resize < 1:
        raise PhalanxError(f"resize must be a positive number of pixels, got {resize}")
    workers = workers or os.cpu_count() or 1
    scan = scan_imagefolder(src)
    plans = plan_shards(scan, shard_bytes, resize, shuffle_seed)
    index_loc, state = dest.child(INDEX_NAME), dest.child(STATE_DIR)
    if dest.fs.exists(index_loc.path):
        if not overwrite:
            raise PhalanxError(
                f"{dest.url} already holds a complete dataset ({INDEX_NAME}); choose another "
                f"destination, or pass overwrite=True (--overwrite) to replace it"
            )
        # Unmark the old dataset first so nobody reads it half-replaced.
        dest.fs.rm(index_loc.path)
        if dest.fs.exists(state.path):
            dest.fs.rm(state.path, recursive=True)
    dest.fs.makedirs(state.path, exist_ok=True)

    done = _resumable(dest, plans)
    resumed = len(done)
    total = len(scan.files)
    counts = {i: len(p.samples) for i, p in enumerate(plans) if p.name in done}
    reported = -1

    def show() -> None:
        nonlocal reported
        processed = sum(counts.values())
        if progress is not None and processed != reported:
            reported = processed
            progress(processed, total)

    def tick(shard: int, n: int) -> None:
        if plans[shard].name not in done:  # else a late tick from a shard counted whole
            counts[shard] = counts.get(shard, 0) + n
            show()

    def finished(number: int, result: _Done) -> None:
        done[plans[number].name] = result
        counts[number] = len(plans[number].samples)
        dest.fs.pipe_file(state.child(f"{plans[number].name}.done").path, result.to_json().encode())
        show()

    show()
    staging = None if _is_local(dest) else tempfile.TemporaryDirectory(dir=tmp_dir)
    try:
        tasks = [
            _Task(i, p, src, dest, staging.name if staging else None, resize)
            for i, p in enumerate(plans)
            if p.name not in done
        ]
        _run(tasks, min(workers, len(tasks)), tick, finished)
    finally:
        if staging is not None:
            staging.cleanup()
    report = _finish(scan, plans, done, dest, resize)
    return replace(report, resumed=resumed, seconds=time.monotonic() - started)


def _run(
    tasks: Sequence[_Task],
    workers: int,
    tick: Callable[[int, int], None],
    finished: Callable[[int, _Done], None],
) -> None:
    """Convert ``tasks`` in this process (one worker) or a process pool."""
    if workers <= 1:
        for task in tasks:
            finished(task.number, _convert_shard(task, tick))
        return
    # forkserver, not fork: the caller may run threads (a progress bar) that a forked
    # child would inherit mid-lock.
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    pool = ProcessPoolExecutor(workers, ctx, initializer=_init_worker, initargs=(queue,))
    try:
        pending: dict[Future[_Done], int] = {
            pool.submit(_pool_convert_shard, t): t.number for t in tasks
        }
        while pending:
            ready, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            while not queue.empty():
                tick(*queue.get())
            for future in ready:
                finished(pending.pop(future), future.result())
    except BrokenProcessPool as exc:
        raise PhalanxError(
            "a conversion worker process died (out of memory?); run the conversion again "
            "to resume it, with fewer workers if memory is short"
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        queue.close()


def _resumable(dest: Location, plans: list[ShardPlan]) -> dict[str, _Done]:
    """Shards an earlier run finished that match this plan, by name."""
    state = dest.child(STATE_DIR)
    try:
        listing = dest.fs.ls(dest.path, detail=True)
    except FileNotFoundError:  # an object store has no empty folders: nothing written yet
        return {}
    sizes = {str(e["name"]).rsplit("/", 1)[-1]: int(e.get("size") or 0) for e in listing}
    try:
        records = {str(p).rsplit("/", 1)[-1] for p in dest.fs.ls(state.path, detail=False)}
    except FileNotFoundError:
        return {}
    done: dict[str, _Done] = {}
    for plan in plans:
        if f"{plan.name}.done" not in records or plan.name not in sizes:
            continue
        try:
            result = _Done.from_json(dest.fs.cat_file(state.child(f"{plan.name}.done").path))
        except (ValueError, KeyError, TypeError):
            continue  # a damaged record only costs redoing that shard
        if result.fingerprint == plan.fingerprint and result.info.bytes == sizes[plan.name]:
            done[plan.name] = result
    return done


def _finish(
    scan: SourceScan,
    plans: list[ShardPlan],
    done: dict[str, _Done],
    dest: Location,
    resize: int | None,
) -> ConvertReport:
    """Check the result, remove stale shards, write ``index.json`` and drop the resume state."""
    results = [done[p.name] for p in plans]
    skipped = sorted(
        [*scan.skipped, *(s for r in results for s in r.skipped)], key=lambda s: s.path
    )
    samples = sum(r.info.samples for r in results)
    if samples == 0:
        first = f"; first: {skipped[0].path}: {skipped[0].reason}" if skipped else ""
        raise PhalanxError(
            f"{scan.root}: none of the {len(scan.files)} images could be used{first}"
        )
    # Shards beyond this plan (from an older, larger conversion) would confuse readers.
    planned = {p.name for p in plans}
    for entry in dest.fs.ls(dest.path, detail=False):
        name = str(entry).rsplit("/", 1)[-1]
        if _SHARD_FILE.fullmatch(name) and name not in planned:
            dest.fs.rm(str(entry))
    source: dict[str, Any] = {
        "files": len(scan.files),
        "bytes": sum(f.size for f in scan.files),
        "reencoded": sum(r.reencoded for r in results),
        "resize": resize,
        "jpeg_quality": JPEG_QUALITY,
    }
    index = ShardIndex(
        classes=scan.classes,
        samples=samples,
        shards=[r.info for r in results],
        source=source,
        skipped=skipped,
    )
    index_loc = dest.child(INDEX_NAME)
    _put_text(index_loc, index.to_json())
    dest.fs.rm(dest.child(STATE_DIR).path, recursive=True)
    return ConvertReport(
        samples=samples,
        shards=len(results),
        bytes=sum(r.info.bytes for r in results),
        skipped=skipped,
        classes=scan.classes,
        seconds=0.0,
        index_url=index_loc.url,
        reencoded=source["reencoded"],
    )


def _put_text(loc: Location, text: str) -> None:
    """Write a small file whole: rename into place locally; object stores PUT atomically."""
    if _is_local(loc):
        tmp = f"{loc.path}.partial"
        Path(tmp).write_text(text, encoding="utf-8")
        os.replace(tmp, loc.path)
    else:
        loc.fs.pipe_file(loc.path, text.encode())
