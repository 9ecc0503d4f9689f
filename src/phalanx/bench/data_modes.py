"""The ways of feeding images that ``phalanx bench data`` times, and one timed pass.

Every mode applies the same decode and augmentation (:class:`Augment`) with the
same batch size and DataLoader workers; :mod:`phalanx.bench.data` says what
each mode measures and runs them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from phalanx.data.images import TrainTransform, collate_uint8, sample_rng
from phalanx.data.stream import LocalShardSource, ShardDataset, ShardSource, StatefulLoader
from phalanx.storage.location import Location

if TYPE_CHECKING:
    from phalanx.bench.azurite import Azurite
    from phalanx.bench.data import DataBenchConfig

SEED = 0
BATCH_TIMEOUT = 300  # seconds: a dead Azurite fails the run instead of hanging it


class Augment:
    """The one decode + augment every mode applies: ``(jpeg, label, rng) -> (uint8 CHW, label)``."""

    def __init__(self, size: int) -> None:
        self.transform = TrainTransform(size)

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> Any:
        return self.transform(jpeg, rng), label


class _Images(Dataset[Any]):
    """A map-style dataset: sample ``i`` is ``read(i)`` decoded with a per-sample rng."""

    def __init__(self, labels: list[int], augment: Augment) -> None:
        self.labels, self.augment = labels, augment

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, i: int) -> bytes:
        raise NotImplementedError

    def __getitem__(self, i: int) -> Any:
        return self.augment(self.read(i), self.labels[i], sample_rng(SEED, 0, i))


class MemoryImages(_Images):
    """(a) The JPEG bytes, in a list."""

    def __init__(self, blobs: list[bytes], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.blobs = blobs

    def read(self, i: int) -> bytes:
        return self.blobs[i]


class FolderImages(_Images):
    """(b) One local file per image."""

    def __init__(self, paths: list[Path], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.paths = paths

    def read(self, i: int) -> bytes:
        return self.paths[i].read_bytes()


class BlobImages(_Images):
    """(c) One GET per image from a datastore folder, through adlfs.

    Each worker resolves the datastore itself: an adlfs file system made before a
    fork is not usable after it.
    """

    def __init__(self, uri: str, rels: list[str], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.uri, self.rels = uri, rels
        self._loc: Location | None = None
        self._pid = -1

    def read(self, i: int) -> bytes:
        if self._loc is None or self._pid != os.getpid():
            self._loc, self._pid = resolve_uri(self.uri), os.getpid()
        return bytes(self._loc.fs.cat_file(self._loc.child(self.rels[i]).path))


def resolve_uri(uri: str) -> Location:
    from phalanx.storage.uri import resolve
    from phalanx.workspace import Workspace

    ws = Workspace()
    try:
        return resolve(uri, ws)
    finally:
        ws.close()


@dataclass(frozen=True)
class Pass:
    """One full pass of one mode."""

    images: int
    seconds: float
    cpu: float
    """CPU seconds of this process and its (joined) DataLoader workers."""
    server_cpu: float
    """CPU seconds of Azurite (and its latency proxy)."""

    @property
    def rate(self) -> float:
        return self.images / self.seconds

    @property
    def cpu_per_image(self) -> float:
        return (self.cpu + self.server_cpu) / self.images


def _cpu_seconds() -> float:
    """CPU time of this process plus its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _process_cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` from ``/proc`` (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cpu(pids: tuple[int, ...]) -> float:
    return sum(_process_cpu_seconds(pid) for pid in pids)


def timed_pass(build: Callable[[], Any], server_pids: tuple[int, ...]) -> Pass:
    """Build a loader and read one full pass, the build included."""
    cpu, server = _cpu_seconds(), _server_cpu(server_pids)
    start = time.perf_counter()
    images = 0
    for batch, _labels in build():
        images += len(batch)
    seconds = time.perf_counter() - start
    return Pass(images, seconds, _cpu_seconds() - cpu, _server_cpu(server_pids) - server)


def start_proxy(port: int, rtt_ms: float) -> tuple[subprocess.Popen[str], int]:
    """A latency proxy (:mod:`phalanx.bench.latency_proxy`) in front of ``port``; its port."""
    from phalanx.launch.ports import free_port

    listen = free_port()
    proxy = subprocess.Popen(
        [sys.executable, "-m", "phalanx.bench.latency_proxy", str(listen), str(port),
         str(rtt_ms / 2)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proxy.stdout is not None
    if proxy.stdout.readline().strip() != "ready":
        proxy.kill()
        raise RuntimeError("the latency proxy did not start")
    return proxy, listen


def run_round(
    config: DataBenchConfig,
    data: dict[str, Any],
    root: Path,
    azurite: Azurite | None,
    r: int,
) -> dict[str, Pass]:
    """One pass per chosen mode, in the order a, b, c, d, e, local."""
    from phalanx.data.sources import CachedShardSource

    augment = Augment(config.size)
    labels = data["labels"]

    def maps(ds: Dataset[Any]) -> Callable[[], Any]:
        def build() -> Any:
            return DataLoader(
                ds,
                batch_size=config.batch,
                shuffle=True,
                num_workers=config.workers,
                collate_fn=collate_uint8,
                generator=torch.Generator().manual_seed(r),
                timeout=BATCH_TIMEOUT if config.workers else 0,
            )

        return build

    def shards(source: Callable[[], ShardSource]) -> Callable[[], Any]:
        def build() -> Any:
            ds = ShardDataset(source(), seed=r, transform=augment, rank=0, world_size=1)
            return StatefulLoader(
                ds,
                batch_size=config.batch,
                num_workers=config.workers,
                collate_fn=collate_uint8,
                timeout=BATCH_TIMEOUT if config.workers else 0,
            )

        return build

    cache = tempfile.mkdtemp(prefix=f"cache-{r}-", dir=root)  # empty: (d) starts cold
    plan: dict[str, Callable[[], Callable[[], Any]]] = {
        "a": lambda: maps(MemoryImages(data["blobs"], labels, augment)),
        "b": lambda: maps(
            FolderImages([data["folder"] / p for p in data["rels"]], labels, augment)
        ),
        "c": lambda: maps(BlobImages(data["raw_uri"], data["rels"], labels, augment)),
        "d": lambda: shards(lambda: CachedShardSource(data["shards_uri"], cache_dir=cache)),
        "e": lambda: shards(lambda: CachedShardSource(data["shards_uri"], cache_dir=cache)),
        "local": lambda: shards(lambda: LocalShardSource(root / "shards")),
    }
    pids = azurite.pids if azurite is not None else ()
    passes: dict[str, Pass] = {}
    for mode, make in plan.items():
        if mode not in config.modes:
            continue
        passes[mode] = p = timed_pass(make(), pids)
        if azurite is not None and azurite.proc.poll() is not None:
            raise RuntimeError(f"Azurite exited with {azurite.proc.returncode} during mode {mode}")
        if p.images != data["images"]:
            raise RuntimeError(f"mode {mode} read {p.images} images, expected {data['images']}")
        print(
            f"round {r + 1} {mode}: {p.rate:6.1f} img/s ({p.seconds:.2f} s; CPU loader "
            f"{p.cpu:.2f} s, Azurite {p.server_cpu:.2f} s)",
            file=sys.stderr,
        )
    return passes
