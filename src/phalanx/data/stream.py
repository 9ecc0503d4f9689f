"""Stream a sharded dataset into DataLoader workers: every rank equal, resumable mid-epoch.

A training script::

    from phalanx.data.stream import LocalShardSource, ShardDataset, StatefulLoader

    ds = ShardDataset(LocalShardSource(root), seed=0, transform=decode)  # rank from the env
    loader = StatefulLoader(ds, batch_size=256, num_workers=8)
    steps_per_epoch = len(loader)                  # the same on every rank
    if ckpt:                                       # saved from any rank: all ranks agree
        loader.load_state_dict(ckpt["loader"])
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)                    # keeps a loaded mid-epoch position
        for images, labels in loader:
            ...
            ckpt = {"loader": loader.state_dict(), ...}

**Which samples go where** is :mod:`phalanx.data.sampling`'s job; in short:
the shards are permuted per ``(seed, epoch)``; the resulting sample sequence is
padded (repeating its start) or truncated to a multiple of the world size and
cut into one contiguous run per rank, then per DataLoader worker at whole
batches; each worker shuffles samples within windows of ``shuffle_window``
consecutive shards. Each worker therefore reads its own shards front to back,
every rank gets ``len(ds)`` samples, and the union over ranks and workers is
every sample exactly once (plus the pad). A DataLoader takes one batch from
each worker in turn, so what a rank sees is reproducible for a given
``(seed, epoch, world_size, num_workers, batch_size)``.

**Resume.** Workers run in other processes, so the dataset cannot see what was
consumed. :class:`StatefulLoader` counts the batches it hands out and replays
the schedule to turn that count into each worker's position; a restored loader
continues the interrupted sequence sample for sample (with a different
``num_workers`` or ``batch_size`` too: the rest is re-dealt in the same
order). With a plain DataLoader of ``num_workers`` 0 or 1,
``ds.state_dict(consumed=n)`` with ``n`` samples seen does the same.
``persistent_workers`` and ``in_order=False`` are not supported: the first
hides ``set_epoch`` from the workers, the second makes the order depend on timing.
A plain DataLoader works too, but does not tell the dataset its batch size, so
each of its workers may end on a short batch (more batches than its ``len``).

**Bytes** come from a :class:`ShardSource`; the dataset holds only that, so it
pickles into worker processes. In each worker a background thread opens the
next ``prefetch_shards`` shards before they are needed (so downloads overlap
decoding) and closes each as soon as its last sample is read. A shard whose
size or SHA-256 is wrong, or that does not parse, is fetched once more, then
fails with a :class:`PhalanxError` naming it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from phalanx.data.sampling import (
    EpochSpec,
    LoaderShape,
    Resume,
    batch_sizes,
    epoch_sequence,
    plan_streams,
    sample_seed,
    samples_per_rank,
)
from phalanx.data.shardfiles import (
    LocalShardSource,
    OpenShard,
    Prefetcher,
    ShardSource,
    open_checked,
    parse_index,
)
from phalanx.errors import PhalanxError

__all__ = [
    "LocalShardSource",
    "ShardDataset",
    "ShardSource",
    "StatefulLoader",
    "Transform",
    "ignore_sigterm",
    "start_workers",
]

Transform = Callable[[bytes, int, np.random.Generator], Any]
"""Turns ``(jpeg_bytes, label, rng)`` into what the dataset yields; ``rng`` is per sample."""

_STATE_KEYS = ("epoch", "seed", "consumed", "workers", "batch_size", "drop_last", "world_size")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise PhalanxError(f"environment variable {name}={raw!r} is not an integer") from None


class ShardDataset(IterableDataset[Any]):
    """A rank's share of a sharded dataset, streamed shard by shard.

    Args:
        source: Where the index and shards come from.
        shuffle: Permute shards and shuffle samples, per ``(seed, epoch)``.
        seed: Base seed (>= 0), the same on every rank.
        shuffle_window: Consecutive shards whose samples are shuffled together; more
            mixes better but keeps more shards open per worker.
        drop_last: ``True`` truncates to a multiple of the world size; ``False`` or
            ``None`` (the default) pads by repeating samples from the epoch's start.
        transform: Applied to ``(jpeg_bytes, label, rng)``; ``None`` yields that pair.
            Must pickle (a module-level function) for DataLoader workers.
        rank: This rank; default from the process group, else ``$RANK``, else 0.
        world_size: Number of ranks; default from the process group, else
            ``$WORLD_SIZE``, else 1.
        prefetch_shards: Shards each worker opens ahead of the one it reads.
        verify: Check each opened shard's SHA-256 (sizes are always checked). ``None``
            (the default): unless the source already does (``source.verifies_sha256``,
            as the node cache does when it downloads), so a warm epoch hashes nothing.

    Raises:
        PhalanxError: The index is malformed, the rank is out of range, or dropping
            would leave a rank with no samples.
    """

    def __init__(
        self,
        source: ShardSource,
        *,
        shuffle: bool = True,
        seed: int = 0,
        shuffle_window: int = 4,
        drop_last: bool | None = None,
        transform: Transform | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        prefetch_shards: int = 2,
        verify: bool | None = None,
    ) -> None:
        super().__init__()
        if seed < 0 or shuffle_window < 1 or prefetch_shards < 0:
            raise PhalanxError(
                f"ShardDataset: seed ({seed}) and prefetch_shards ({prefetch_shards}) must be "
                f">= 0 and shuffle_window ({shuffle_window}) >= 1"
            )
        group = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if group else _env_int("RANK", 0)
        if world_size is None:
            world_size = dist.get_world_size() if group else _env_int("WORLD_SIZE", 1)
        if not 0 <= rank < world_size:
            raise PhalanxError(f"ShardDataset: rank {rank} is outside world size {world_size}")
        self._source = source
        self._classes, self._shards = parse_index(source.index())
        sizes = np.asarray([s.samples for s in self._shards], dtype=np.int64)
        self._ends = np.cumsum(sizes)
        self._starts = self._ends - sizes
        self._pad = not drop_last
        if samples_per_rank(int(self._ends[-1]), world_size, pad=self._pad) == 0:
            raise PhalanxError(
                f"ShardDataset: {self._ends[-1]} samples cannot be split over {world_size} "
                f"ranks with drop_last=True; pad instead (drop_last=False)"
            )
        self.shuffle, self.shuffle_window = shuffle, shuffle_window
        if verify is None:
            verify = not getattr(source, "verifies_sha256", False)
        self.transform, self.prefetch_shards, self.verify = transform, prefetch_shards, verify
        self.rank, self.world_size = rank, world_size
        self._seed, self._epoch = seed, 0
        self._resume: Resume | None = None  # a loaded mid-epoch position in self._epoch
        self._loader: LoaderShape | None = None  # set by StatefulLoader

    @property
    def classes(self) -> list[str]:
        """Class names; a label is an index into this list."""
        return list(self._classes)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self._classes)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._epoch

    @property
    def seed(self) -> int:
        """The base seed."""
        return self._seed

    def __len__(self) -> int:
        """Samples this rank reads per epoch, the same on every rank."""
        return self._spec().per_rank

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next; a loaded position in another epoch is dropped."""
        if epoch < 0:
            raise PhalanxError(f"ShardDataset.set_epoch: epoch must be >= 0, got {epoch}")
        if epoch != self._epoch:
            self._resume = None
        self._epoch = epoch

    def state_dict(self, consumed: int = 0) -> dict[str, Any]:
        """The position after this rank has consumed ``consumed`` samples of the epoch.

        ``consumed`` counts from the epoch's start (a loaded state's samples
        included), in the order delivered. The order depends on the loader; this
        assumes one stream (a DataLoader with ``num_workers`` 0 or 1, or plain
        iteration) unless :class:`StatefulLoader`, which fills ``consumed`` in,
        drives the dataset.
        """
        # A resumed epoch keeps the order it has followed so far.
        shape = self._resume.shape if self._resume else self._loader or LoaderShape()
        return {
            "epoch": self._epoch,
            "seed": self._seed,
            "consumed": consumed,
            "workers": shape.workers,
            "batch_size": shape.batch_size,
            "drop_last": shape.drop_last,
            "world_size": self.world_size,
            "samples": int(self._ends[-1]),
        }

    def _consumed_before(self) -> int:
        """Samples of this epoch consumed before the next pass (a loaded position)."""
        return self._resume.consumed if self._resume else 0

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; the next iteration reads the rest of its epoch.

        Raises:
            PhalanxError: ``state`` is malformed, belongs to another dataset, or is
                mid-epoch under another world size.
        """
        try:
            values = {k: int(state[k]) for k in (*_STATE_KEYS, "samples")}
            shape = LoaderShape(
                workers=values["workers"],
                batch_size=values["batch_size"],
                drop_last=bool(values["drop_last"]),
            )
            if min(values.values()) < 0:
                raise ValueError("negative value")
        except (KeyError, TypeError, ValueError) as exc:
            raise PhalanxError(
                f"loader state is malformed ({exc!r}); expected {_STATE_KEYS}"
            ) from exc
        if values["samples"] != self._ends[-1]:
            raise PhalanxError(
                f"loader state is for a dataset of {values['samples']} samples, this one holds "
                f"{self._ends[-1]}; resume with the dataset the checkpoint was trained on"
            )
        if values["consumed"] and values["world_size"] != self.world_size:
            raise PhalanxError(
                f"loader state is mid-epoch with world size {values['world_size']}, this job "
                f"has {self.world_size}; resume from a checkpoint taken at an epoch boundary"
            )
        self._seed, self._epoch = values["seed"], values["epoch"]
        self._resume = None
        if values["consumed"]:
            self._resume = Resume(consumed=values["consumed"], shape=shape)
        plan_streams(self._spec(), shape, self._resume)  # fail now if it does not fit

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        spec = self._spec()
        yield from self._read(spec, plan_streams(spec, self._shape(workers), self._resume)[worker])

    def _spec(self) -> EpochSpec:
        return EpochSpec(
            shard_sizes=tuple(s.samples for s in self._shards),
            seed=self._seed,
            epoch=self._epoch,
            shuffle=self.shuffle,
            shuffle_window=self.shuffle_window,
            rank=self.rank,
            world_size=self.world_size,
            pad=self._pad,
        )

    def _shape(self, workers: int) -> LoaderShape:
        """The shape of a loader with ``workers`` streams, batching as best known."""
        known = self._loader or (self._resume.shape if self._resume else LoaderShape())
        return LoaderShape(workers=workers, batch_size=known.batch_size, drop_last=known.drop_last)

    def _begin_pass(self, loader: LoaderShape, *, restart: bool) -> np.ndarray:
        """Prepare a pass for ``loader`` (from the epoch's start if ``restart``).

        Returns:
            The samples of the epoch consumed once ``k`` batches of the pass have
            been delivered, for ``k = 0 … batches``.
        """
        if restart:
            self._resume = None
        self._loader = loader  # pickled into the workers: the batch size fixes their split
        streams = plan_streams(self._spec(), loader, self._resume)
        sizes = batch_sizes([len(s) for s in streams], loader)
        base = self._resume.consumed if self._resume else 0
        return base + np.concatenate(([0], np.cumsum(sizes)))

    def _read(self, spec: EpochSpec, positions: np.ndarray) -> Iterator[Any]:
        """Yield the samples at ``positions``, opening each shard once, ahead of use."""
        ids = epoch_sequence(spec)[positions % spec.total]
        shard = np.searchsorted(self._ends, ids, side="right")
        local = ids - self._starts[shard]
        used, first = np.unique(shard, return_index=True)
        _, last_reversed = np.unique(shard[::-1], return_index=True)
        last = dict(zip(used.tolist(), (len(shard) - 1 - last_reversed).tolist(), strict=True))
        order = used[np.argsort(first)].tolist()  # shards in order of first use
        slot = {s: i for i, s in enumerate(order)}
        prefetch = Prefetcher(
            lambda i: open_checked(self._source, self._shards[order[i]], self.verify),
            len(order),
            self.prefetch_shards,
        )
        reading: dict[int, OpenShard] = {}
        try:
            for pos, (s, j, q) in enumerate(
                zip(shard.tolist(), local.tolist(), positions.tolist(), strict=True)
            ):
                if s not in reading:
                    reading[s] = prefetch.get(slot[s])
                image, label = reading[s].read(j)
                if last[s] == pos:
                    reading.pop(s).close()
                    prefetch.release(slot[s])
                if self.transform is None:
                    yield image, label
                else:
                    rng = np.random.default_rng(sample_seed(self._seed, self._epoch, q))
                    yield self.transform(image, label, rng)
        finally:
            for r in reading.values():
                r.close()
            prefetch.close()


class _WorkerInit:
    """Moves a DataLoader worker out of its rank's process group, then runs the user's
    ``worker_init_fn``.

    A preemption notice is SIGTERM to the rank's whole process group (torchrun's
    ``killpg``); a worker that died of it would make the DataLoader raise in the main
    process before that process could save its emergency checkpoint. In a group of its
    own the worker never gets the notice, yet a SIGTERM sent to it alone (Python ending
    its children at exit) still ends it, and it ends by itself when its parent is gone.
    """

    def __init__(self, user: Callable[[int], None] | None) -> None:
        self.user = user

    def __call__(self, worker_id: int) -> None:
        # SIGTERM is blocked since the fork (see start_workers). Ignored while it is
        # unblocked, a notice that reached the old group meanwhile is dropped.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self.user is not None:
            self.user(worker_id)


def start_workers(loader: DataLoader[Any]) -> Iterator[Any]:
    """``iter(loader)``, with SIGTERM held back while its worker processes start.

    A worker forked just as a preemption notice arrives would die of it before its
    ``worker_init_fn`` could ignore it; blocked here, the signal stays pending: the
    worker drops it, this process handles it once the workers are up. Pair with a
    ``worker_init_fn`` that ignores SIGTERM and unblocks it (``StatefulLoader``'s does).
    """
    if threading.current_thread() is not threading.main_thread():
        return iter(loader)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return iter(loader)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_sigterm(worker_id: int) -> None:
    """A ``worker_init_fn`` for :func:`start_workers` with a plain DataLoader: the worker
    leaves the rank's process group, so a preemption notice reaches only the rank."""
    _WorkerInit(None)(worker_id)


class StatefulLoader:
    """A DataLoader over a :class:`ShardDataset` that can save and restore its position.

    It counts the batches it yields, so :meth:`state_dict` is exact between any
    two batches, whatever ``num_workers``. In lockstep data-parallel training
    every rank's state is the same, so saving rank 0's is enough.

    Args:
        dataset: The dataset to load.
        batch_size: Samples per batch.
        num_workers: DataLoader worker processes (0 reads in this process).
        drop_last: Drop the rank's short last batch.
        **loader_kwargs: Passed on to :class:`torch.utils.data.DataLoader`
            (``collate_fn``, ``pin_memory``, ``prefetch_factor``, ...).

    Raises:
        PhalanxError: An argument that would break the order or the epochs.
    """

    def __init__(
        self,
        dataset: ShardDataset,
        *,
        batch_size: int,
        num_workers: int = 0,
        drop_last: bool = False,
        **loader_kwargs: Any,
    ) -> None:
        unsupported = {"shuffle", "sampler", "batch_sampler"} & loader_kwargs.keys()
        if loader_kwargs.get("persistent_workers"):
            unsupported.add("persistent_workers")
        if loader_kwargs.get("in_order") is False:
            unsupported.add("in_order=False")
        if unsupported:
            raise PhalanxError(
                f"StatefulLoader: {', '.join(sorted(unsupported))} is not supported; the "
                f"dataset orders, shuffles and splits the samples itself"
            )
        if batch_size < 1 or num_workers < 0:
            raise PhalanxError("StatefulLoader: batch_size must be >= 1 and num_workers >= 0")
        self.dataset = dataset
        self.batch_size, self.num_workers, self.drop_last = batch_size, num_workers, drop_last
        self._kwargs = loader_kwargs
        self._shape = LoaderShape(
            workers=max(1, num_workers), batch_size=batch_size, drop_last=drop_last
        )
        # Samples consumed after k batches of the current pass, or None before one starts.
        self._done: np.ndarray | None = None
        self._epoch = self._yielded = 0
        self._finished = False

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads."""
        return self.dataset.epoch

    def __len__(self) -> int:
        """Batches per epoch, the same on every rank."""
        per_rank = len(self.dataset)
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next (a loaded position in that epoch is kept)."""
        if epoch != self.dataset.epoch:
            self._done, self._finished = None, False
        self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        ds = self.dataset
        # A finished pass run again reads its epoch from the start.
        self._done = ds._begin_pass(self._shape, restart=self._finished)
        self._epoch, self._yielded, self._finished = ds.epoch, 0, False
        kwargs = dict(self._kwargs)
        kwargs["worker_init_fn"] = _WorkerInit(kwargs.get("worker_init_fn"))
        loader = DataLoader(
            ds,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            drop_last=self.drop_last,
            **kwargs,
        )
        for batch in start_workers(loader):
            self._yielded += 1
            yield batch
        self._finished = True

    def state_dict(self) -> dict[str, Any]:
        """The position after the batches yielded so far; pass to :meth:`load_state_dict`."""
        if self._done is None or self._epoch != self.dataset.epoch:
            return self.dataset.state_dict(self.dataset._consumed_before())
        return self.dataset.state_dict(int(self._done[self._yielded]))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next pass reads the rest of its epoch."""
        self.dataset.load_state_dict(state)
        self._done, self._yielded, self._finished = None, 0, False
