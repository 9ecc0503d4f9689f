"""phalanx.data.stream: exact splits over ranks and workers, determinism, resume, damage.

Shards are written here with tarfile; a sample's "image" is the bytes
``sample-<id>``, so a test can tell which sample came out. Ranks are simulated
by datasets with explicit ``rank``/``world_size`` in one process; DataLoader
workers are real processes.
"""

from __future__ import annotations

import collections
import gc
import hashlib
import io
import itertools
import json
import os
import pickle
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from conftest import LAUNCH_VARS, TESTS
from phalanx.data.sampling import (
    EpochSpec,
    LoaderShape,
    Resume,
    delivery,
    epoch_sequence,
    plan_streams,
)
from phalanx.data.stream import LocalShardSource, ShardDataset, StatefulLoader
from phalanx.errors import PhalanxError

SIZES = (3, 17, 8, 12, 5, 14, 9)  # uneven on purpose
TOTAL = sum(SIZES)
CLASSES = ["cat", "dog", "eel", "fox", "gnu"]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_dataset(root: Path, sizes: Sequence[int] = SIZES) -> Path:
    """A dataset under ``root`` whose sample ``i`` has image ``sample-<i>`` and label i % 5."""
    root.mkdir(parents=True, exist_ok=True)
    shards, sample = [], 0
    for k, n in enumerate(sizes):
        name = f"shard-{k:06d}.tar"
        with tarfile.open(root / name, "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(n):
                _add(tar, f"{sample:08d}.jpg", f"sample-{sample}".encode())
                _add(tar, f"{sample:08d}.cls", str(sample % len(CLASSES)).encode())
                sample += 1
        data = (root / name).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        shards.append({"name": name, "samples": n, "bytes": len(data), "sha256": digest})
    index = {"format": "phalanx-shards", "version": 1, "classes": CLASSES}
    index.update(samples=sample, shards=shards)
    (root / "index.json").write_text(json.dumps(index))
    return root


def sample_id(image: bytes, label: int, rng: np.random.Generator) -> int:
    """A transform that yields which sample it was (module level: it pickles)."""
    number = int(image.split(b"-")[1])
    assert label == number % len(CLASSES)
    return number


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("stream") / "data")


@pytest.fixture(autouse=True)
def no_launch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


def dataset(root: Path, **kwargs: Any) -> ShardDataset:
    kwargs.setdefault("transform", sample_id)
    return ShardDataset(LocalShardSource(root), **kwargs)


def flat(batches: Iterable[Any]) -> list[int]:
    return [int(x) for batch in batches for x in batch]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_over_ranks_and_workers(
    root: Path, world_size: int, drop_last: bool
) -> None:
    per_rank = TOTAL // world_size if drop_last else -(-TOTAL // world_size)
    for workers in (0, 1, 2):
        seen: list[int] = []
        for rank in range(world_size):
            ds = dataset(root, rank=rank, world_size=world_size, drop_last=drop_last)
            assert len(ds) == per_rank
            # A plain DataLoader: the dataset alone splits over workers.
            got = flat(iter(DataLoader(ds, batch_size=4, num_workers=workers)))
            assert len(got) == per_rank, (rank, workers)
            loader = StatefulLoader(ds, batch_size=4, num_workers=workers)
            batches = list(loader)
            assert len(batches) == len(loader) == -(-per_rank // 4)
            assert sorted(flat(batches)) == sorted(got)
            seen += got
        assert len(seen) == per_rank * world_size
        counts = collections.Counter(seen)
        if drop_last:
            assert len(counts) == len(seen), "a sample was read twice"
        else:
            assert set(counts) == set(range(TOTAL))
            assert max(counts.values()) <= 2


def test_order_is_deterministic_per_seed_and_epoch(root: Path) -> None:
    def order(**kwargs: Any) -> list[int]:
        epoch = kwargs.pop("epoch", 0)
        loader = StatefulLoader(dataset(root, **kwargs), batch_size=3, num_workers=2)
        loader.set_epoch(epoch)
        return flat(iter(loader))

    first = order(seed=7)
    assert sorted(first) == list(range(TOTAL))
    assert order(seed=7) == first
    assert order(seed=7, epoch=1) != first
    assert order(seed=8) != first
    unshuffled = flat(iter(StatefulLoader(dataset(root, shuffle=False), batch_size=5)))
    assert unshuffled == list(range(TOTAL))


def test_default_items_are_bytes_and_label(root: Path) -> None:
    ds = ShardDataset(LocalShardSource(root), shuffle=False)
    assert ds.classes == CLASSES and ds.num_classes == 5
    assert list(ds)[:2] == [(b"sample-0", 0), (b"sample-1", 1)]


def test_transform_rng_is_per_sample_and_reproducible(root: Path) -> None:
    def draws(workers: int) -> dict[int, float]:
        ds = dataset(root, transform=id_and_draw)
        return {int(i): float(x) for i, x in iter(DataLoader(ds, num_workers=workers))}

    assert draws(0) == draws(2)


def id_and_draw(image: bytes, label: int, rng: np.random.Generator) -> tuple[int, float]:
    return int(image.split(b"-")[1]), float(rng.random())


def run_interrupted(
    root: Path, stop_after: int, first: dict[str, int], then: dict[str, int]
) -> tuple[list[int], list[int]]:
    """Rank 1 of 2: ``stop_after`` batches with loader ``first``, the rest with ``then``."""
    make = dict(rank=1, world_size=2, seed=3)
    a = StatefulLoader(dataset(root, **make), **first)
    a.set_epoch(2)
    head = flat(itertools.islice(iter(a), stop_after))  # exactly stop_after batches
    state = json.loads(json.dumps(a.state_dict()))  # it survives a JSON checkpoint
    assert state["consumed"] == len(head)
    b = StatefulLoader(dataset(root, **make), **then)
    b.load_state_dict(state)
    assert b.epoch == 2
    b.set_epoch(2)  # a training loop's usual call keeps the position
    return head, flat(iter(b))


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_exact(root: Path, workers: int) -> None:
    shape = dict(batch_size=4, num_workers=workers)
    full_loader = StatefulLoader(dataset(root, rank=1, world_size=2, seed=3), **shape)
    full_loader.set_epoch(2)
    full = flat(iter(full_loader))
    for stop_after in (1, 3, 6, len(full_loader)):
        head, tail = run_interrupted(root, stop_after, shape, shape)
        assert head + tail == full, stop_after


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_resume_with_another_loader_shape_keeps_the_order(root: Path) -> None:
    shape = dict(batch_size=4, num_workers=2)
    loader = StatefulLoader(dataset(root, rank=1, world_size=2, seed=3), **shape)
    loader.set_epoch(2)
    full = flat(iter(loader))
    head, tail = run_interrupted(root, 3, shape, dict(batch_size=3, num_workers=3))
    assert head + tail == full
    head, tail = run_interrupted(root, 2, shape, dict(batch_size=5, num_workers=0))
    assert head + tail == full


def test_resume_twice_then_next_epoch(root: Path) -> None:
    def loader() -> StatefulLoader:
        return StatefulLoader(dataset(root), batch_size=3, num_workers=2)

    full = flat(iter(loader()))
    a = loader()
    it = iter(a)
    head = flat([next(it), next(it)])
    b = loader()
    b.load_state_dict(a.state_dict())
    it = iter(b)
    head += flat([next(it), next(it), next(it)])
    c = loader()
    c.load_state_dict(b.state_dict())
    assert head + flat(iter(c)) == full
    c.set_epoch(1)
    fresh = loader()
    fresh.set_epoch(1)
    assert flat(iter(c)) == flat(iter(fresh))


def test_plain_dataset_state_dict_resumes_one_stream(root: Path) -> None:
    full = list(dataset(root))
    ds = dataset(root)
    head = [x for _, x in zip(range(11), ds, strict=False)]
    again = dataset(root)
    again.load_state_dict(ds.state_dict(consumed=11))
    assert head + list(again) == full


def test_state_from_another_job_is_refused(root: Path, tmp_path: Path) -> None:
    state = dataset(root, world_size=2, rank=0).state_dict(consumed=5)
    with pytest.raises(PhalanxError, match="world size 2"):
        dataset(root, world_size=3, rank=0).load_state_dict(state)
    dataset(root, world_size=3, rank=0).load_state_dict({**state, "consumed": 0})  # a boundary
    other = dataset(write_dataset(tmp_path / "other", sizes=(4, 4)))
    with pytest.raises(PhalanxError, match="this one holds 8"):
        other.load_state_dict(state)
    with pytest.raises(PhalanxError, match="malformed"):
        other.load_state_dict({"epoch": 1})
    with pytest.raises(PhalanxError, match="malformed"):
        dataset(root, world_size=2, rank=0).load_state_dict({**state, "batch_size": 0})
    with pytest.raises(PhalanxError, match="consumed"):
        dataset(root).load_state_dict({**state, "world_size": 1, "consumed": 10_000})


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_delivery_matches_a_real_dataloader() -> None:
    """The schedule sampling.py replays is what torch's DataLoader does with 3 workers."""
    lengths = [7, 2, 5]
    shape = LoaderShape(workers=3, batch_size=2)
    batches = list(DataLoader(_Streams(lengths), batch_size=2, num_workers=3))
    got = [(int(b[0][0]), int(b[1][0]), int(b[1][-1]) + 1) for b in batches]
    assert got == delivery(lengths, shape)


class _Streams(torch.utils.data.IterableDataset[tuple[int, int]]):
    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __iter__(self) -> Iterator[tuple[int, int]]:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return ((info.id, i) for i in range(self.lengths[info.id]))


def spec(**kwargs: Any) -> EpochSpec:
    base: dict[str, Any] = dict(shard_sizes=SIZES, seed=1, epoch=0, shuffle=True)
    base.update(shuffle_window=2, rank=0, world_size=1, pad=True)
    return EpochSpec(**{**base, **kwargs})


@pytest.mark.parametrize(
    "old",
    [LoaderShape(workers=3, batch_size=4), LoaderShape(workers=2, batch_size=5, drop_last=True)],
)
def test_plan_covers_the_rest_exactly_after_any_resume(old: LoaderShape) -> None:
    first = plan_streams(spec(), old)
    order = np.concatenate([first[w][a:b] for w, a, b in delivery([len(s) for s in first], old)])
    for consumed in range(1, len(order) + 1):
        for new in (old, LoaderShape(workers=2, batch_size=3), LoaderShape()):
            streams = plan_streams(spec(), new, Resume(consumed=consumed, shape=old))
            batches = delivery([len(s) for s in streams], new)
            rest = np.concatenate([streams[w][a:b] for w, a, b in batches] + [order[:0]])
            expected = order[consumed:].tolist()
            assert rest.tolist() == expected[: len(rest)], (consumed, new)
            # Exact, except that a loader dropping short batches may drop the last one
            # when the resume point is not between batches of the same loader.
            lost = len(expected) - len(rest)
            assert lost == 0 or (new.drop_last and lost < new.batch_size), (consumed, new)


def test_each_worker_reads_a_run_of_whole_shards() -> None:
    """Streaming: over 2 ranks x 2 workers only the 3 cuts split a shard."""
    opened = 0
    for rank in (0, 1):
        s = spec(rank=rank, world_size=2, pad=False)
        shard_of = np.repeat(np.arange(len(SIZES)), SIZES)
        sequence = epoch_sequence(s)
        for stream in plan_streams(s, LoaderShape(workers=2, batch_size=4)):
            opened += len(set(shard_of[sequence[stream]].tolist()))
    assert opened <= len(SIZES) + 3


class CountingSource(LocalShardSource):
    """Local shards, recording every open and how many are held at once."""

    def __init__(self, root: Path, *, damaged: str = "", heal_on_refetch: bool = False) -> None:
        super().__init__(root)
        self.damaged, self.heal = damaged, heal_on_refetch
        self.calls: list[tuple[str, bool]] = []
        self.held = self.most_held = 0
        self._lock = threading.Lock()

    @contextmanager
    def open_shard(
        self, name: str, sha256: str, size: int, *, refetch: bool = False
    ) -> Iterator[Path]:
        with self._lock:
            self.calls.append((name, refetch))
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        try:
            path = self.root / name
            if name == self.damaged and not (refetch and self.heal):
                data = bytearray(path.read_bytes())
                data[600] ^= 0xFF  # padding after the first image: same size, wrong hash
                path = self.root.parent / f"damaged-{os.getpid()}-{threading.get_ident()}-{name}"
                path.write_bytes(bytes(data))
            yield path
        finally:
            with self._lock:
                self.held -= 1


def test_damaged_shard_is_fetched_again_then_named(root: Path) -> None:
    src = CountingSource(root, damaged="shard-000003.tar")
    ds = ShardDataset(src, transform=sample_id)
    with pytest.raises(PhalanxError, match=r"shard-000003\.tar has sha256 .*after fetching it"):
        list(ds)
    assert [c for c in src.calls if c[0] == "shard-000003.tar"] == [
        ("shard-000003.tar", False),
        ("shard-000003.tar", True),
    ]
    assert src.held == 0

    healed = CountingSource(root, damaged="shard-000003.tar", heal_on_refetch=True)
    assert sorted(ShardDataset(healed, transform=sample_id)) == list(range(TOTAL))
    assert healed.calls.count(("shard-000003.tar", True)) == 1

    unverified = CountingSource(root, damaged="shard-000003.tar")
    assert len(list(ShardDataset(unverified, verify=False))) == TOTAL  # size still matches


def test_damaged_shard_in_a_worker_fails_the_loader(root: Path) -> None:
    ds = ShardDataset(CountingSource(root, damaged="shard-000001.tar"), transform=sample_id)
    batches = iter(DataLoader(ds, batch_size=4, num_workers=1))
    message = ""
    try:
        list(batches)
    except PhalanxError as exc:  # the worker's error, re-raised with its type
        message = str(exc)
    assert "shard-000001.tar has sha256" in message
    # Shut the workers down here: after a worker's error torch takes ~5 s per worker
    # to do it, which would otherwise land in whichever later test collects garbage.
    del batches
    gc.collect()


def test_truncated_shard_is_caught_without_verify(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "data")
    shard = root / "shard-000002.tar"
    shard.write_bytes(shard.read_bytes()[:-1024])
    with pytest.raises(PhalanxError, match=r"shard-000002\.tar has \d+ bytes"):
        list(ShardDataset(LocalShardSource(root), verify=False))


def test_prefetch_opens_ahead_and_releases(root: Path) -> None:
    src = CountingSource(root)
    it = iter(ShardDataset(src, shuffle=False, prefetch_shards=2))
    next(it)
    deadline = time.monotonic() + 10
    while len(src.calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(src.calls) == 3  # the shard in use and two ahead, no more
    it.close()  # leaving early gives every pin back
    assert src.held == 0

    src = CountingSource(root)
    assert len(list(ShardDataset(src, shuffle=False, prefetch_shards=0))) == TOTAL
    assert src.most_held == 1 and src.held == 0
    assert [name for name, _ in src.calls] == [f"shard-{k:06d}.tar" for k in range(7)]


def test_pickles_for_spawned_workers(root: Path) -> None:
    ds = dataset(root, rank=1, world_size=2)
    ds.set_epoch(4)
    copy = pickle.loads(pickle.dumps(ds))
    assert list(copy) == list(ds)
    loader = DataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    assert flat(iter(loader)) == list(ds)


def test_rank_and_world_size_from_env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = dataset(root)
    assert (ds.rank, ds.world_size, len(ds)) == (2, 3, 23)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(PhalanxError, match="rank 3 is outside world size 3"):
        dataset(root)
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(PhalanxError, match="RANK='one'"):
        dataset(root)


def test_rank_and_world_size_from_the_process_group(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")  # the group wins over the environment
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        ds = dataset(root)
    finally:
        dist.destroy_process_group()
    assert (ds.rank, ds.world_size) == (0, 1)


def test_bad_arguments_are_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(PhalanxError, match="persistent_workers"):
        StatefulLoader(dataset(root), batch_size=2, num_workers=1, persistent_workers=True)
    with pytest.raises(PhalanxError, match="drop_last=True"):
        dataset(root, world_size=TOTAL + 1, rank=0, drop_last=True)
    with pytest.raises(PhalanxError, match=r"index\.json"):
        dataset(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(PhalanxError, match="phalanx-shards"):
        dataset(tmp_path)


# A script that imports this module (and so conftest) from a process of its own.
_TEST_PATHS = [str(Path(__file__).parent), str(TESTS)]

PREEMPT_SCRIPT = """
import os, signal, sys
sys.path[:0] = {tests!r}
from test_stream import dataset
from phalanx.data.stream import StatefulLoader

got = []
signal.signal(signal.SIGTERM, lambda *_: got.append("SIGTERM"))

def notice(worker_id):
    # A preemption notice to the rank's process group (torchrun's killpg) as workers start.
    os.killpg(os.getpgid(os.getppid()), signal.SIGTERM)

loader = StatefulLoader(dataset({root!r}, seed=1), batch_size=4, num_workers=2,
                        worker_init_fn=notice)
seen = [int(x) for batch in loader for x in batch]
print(len(seen), sorted(seen) == list(range(len(seen))), got[:1])
"""


def test_a_preemption_notice_reaches_the_main_process_not_the_workers(root: Path) -> None:
    """Workers ignore SIGTERM (else the DataLoader raises before the emergency checkpoint)."""
    script = PREEMPT_SCRIPT.format(tests=_TEST_PATHS, root=str(root))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        start_new_session=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    total = sum(SIZES)
    assert proc.stdout.split() == [str(total), "True", "['SIGTERM']"]


class _Broken:
    """A source whose shards cannot be opened (module level: it pickles into workers)."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalShardSource(root)

    def index(self) -> dict[str, Any]:
        return self.inner.index()

    def open_shard(self, name: str, sha256: str, size: int, *, refetch: bool = False) -> Any:
        raise PhalanxError(f"{name}: the store is gone")


FAILING_SCRIPT = """
import sys
sys.path[:0] = {tests!r}
from pathlib import Path
from test_stream import _Broken, sample_id
from phalanx.data.stream import ShardDataset, StatefulLoader

ds = ShardDataset(_Broken(Path({root!r})), transform=sample_id)
for batch in StatefulLoader(ds, batch_size=4, num_workers=2):
    pass
"""


def test_a_failing_worker_fails_the_process_instead_of_hanging_it(root: Path) -> None:
    script = FAILING_SCRIPT.format(tests=_TEST_PATHS, root=str(root))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        start_new_session=True,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "the store is gone" in proc.stderr
