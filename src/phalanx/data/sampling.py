"""Which samples each rank and DataLoader worker reads, in which order: pure index math.

Nothing here touches files; :mod:`phalanx.data.stream` turns the index arrays
into bytes. The scheme, for one epoch:

1. **Shard order.** The shards are permuted by a generator seeded from
   ``(seed, epoch)``; listing every shard's samples in that order gives the
   epoch's *sequence* ``S`` of ``N`` sample ids (shard-contiguous).
2. **Equal ranks.** ``S`` is cut to ``T`` positions, a multiple of the world
   size: padded by repeating ``S`` from its start (``T = ceil(N/ws)*ws``), or
   truncated (``T = floor(N/ws)*ws``). Position ``q`` holds sample
   ``S[q % N]``; rank ``r`` owns the contiguous positions
   ``[r*P, (r+1)*P)`` with ``P = T/ws``, so each rank reads a run of whole
   shards and only shards at the boundaries are shared.
3. **Workers.** A rank's positions are cut into contiguous parts, one per
   DataLoader worker, at whole batches (when the batch size is known), so
   only the rank's last batch can be short and the DataLoader's length is
   exact.
4. **Sample shuffle.** Inside a worker's part, the samples of every
   ``shuffle_window`` consecutive shards are shuffled together (a generator
   seeded from the seed, the epoch and where the part starts). A worker thus
   streams its shards in order with about ``shuffle_window`` of them open.
5. **Delivery.** A DataLoader takes one batch from each worker in turn,
   skipping exhausted workers (:func:`delivery`), so what a rank sees is fixed
   by the scheme and the :class:`LoaderShape`.

Union over ranks and workers: every position ``0 … T-1`` exactly once, hence
every sample exactly once (drop: minus the tail of ``S``; pad: the first
``T-N`` of ``S`` twice).

**Resume.** A :class:`Resume` says "the first ``consumed`` samples this rank's
loader delivered, with this shape, are done". Replaying the schedule maps that
count to an offset in each worker's part; the rest of the epoch is the parts'
suffixes, handed to the new workers rotated so that a DataLoader of the same
shape continues the interrupted order exactly. A loader of another shape gets
the remaining samples, in that same order, in batch-sized chunks dealt round
robin, which a DataLoader delivers in that order too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from phalanx.errors import PhalanxError

__all__ = [
    "EpochSpec",
    "LoaderShape",
    "Resume",
    "batch_sizes",
    "delivery",
    "epoch_sequence",
    "plan_streams",
    "sample_seed",
    "samples_per_rank",
]

# Separate generator streams for the three uses of (seed, epoch).
_SHARD_ORDER, _WINDOW, _SAMPLE = 0, 1, 2


@dataclass(frozen=True, kw_only=True)
class LoaderShape:
    """How a DataLoader consumes one rank's samples; the delivered order depends on it.

    Attributes:
        workers: Sample streams: the DataLoader's ``num_workers``, or 1 for 0.
        batch_size: Samples per batch.
        drop_last: Whether the DataLoader drops each worker's short last batch.
    """

    workers: int = 1
    batch_size: int = 1
    drop_last: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1 or self.batch_size < 1:
            raise ValueError(f"workers and batch_size must be >= 1, got {self}")


@dataclass(frozen=True, kw_only=True)
class Resume:
    """A rank's position mid-epoch.

    Attributes:
        consumed: Samples the rank's loader delivered this epoch, in delivery order.
        shape: The shape of the loader that delivered them.
    """

    consumed: int
    shape: LoaderShape


@dataclass(frozen=True, kw_only=True)
class EpochSpec:
    """Everything that fixes one rank's samples for one epoch.

    Attributes:
        shard_sizes: Samples per shard, in index order.
        seed: Base seed, >= 0.
        epoch: Epoch number, >= 0.
        shuffle: Whether to permute shards and shuffle samples.
        shuffle_window: Consecutive shards whose samples are shuffled together.
        rank: This rank.
        world_size: Number of ranks.
        pad: Pad to a multiple of the world size (else truncate).
    """

    shard_sizes: tuple[int, ...]
    seed: int
    epoch: int
    shuffle: bool
    shuffle_window: int
    rank: int
    world_size: int
    pad: bool

    @property
    def total(self) -> int:
        """Samples in the dataset."""
        return sum(self.shard_sizes)

    @property
    def per_rank(self) -> int:
        """Samples each rank reads per epoch."""
        return samples_per_rank(self.total, self.world_size, pad=self.pad)


def samples_per_rank(total: int, world_size: int, *, pad: bool) -> int:
    """Samples each of ``world_size`` ranks reads per epoch from ``total``."""
    return -(-total // world_size) if pad else total // world_size


def sample_seed(seed: int, epoch: int, position: int) -> np.random.SeedSequence:
    """The seed of a sample's transform generator.

    It depends on the sample's padded position, not on ranks, workers or resume,
    so augmentation is reproducible however the epoch is read.
    """
    return np.random.SeedSequence([seed, epoch, _SAMPLE, position])


def epoch_sequence(spec: EpochSpec) -> np.ndarray:
    """The epoch's sample ids in shard order, before padding (``S`` above)."""
    sizes = np.asarray(spec.shard_sizes, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    order = np.arange(len(sizes))
    if spec.shuffle:
        rng = np.random.default_rng([spec.seed, spec.epoch, _SHARD_ORDER])
        order = rng.permutation(len(sizes))
    if len(order) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(starts[k], starts[k] + sizes[k]) for k in order])


def _split(length: int, parts: int, batch: int) -> list[tuple[int, int]]:
    """Cut ``range(length)`` into ``parts`` contiguous runs of whole batches, sizes balanced."""
    batches = -(-length // batch)
    cuts = [min(p * batches // parts * batch, length) for p in range(parts + 1)]
    return list(itertools.pairwise(cuts))


def _fresh_streams(spec: EpochSpec, shape: LoaderShape, sequence: np.ndarray) -> list[np.ndarray]:
    """Each worker's positions for an epoch read from its start."""
    base = spec.rank * spec.per_rank
    shard_of = np.repeat(np.arange(len(spec.shard_sizes)), spec.shard_sizes)
    streams = []
    for start, stop in _split(spec.per_rank, shape.workers, shape.batch_size):
        positions = np.arange(base + start, base + stop, dtype=np.int64)
        if spec.shuffle and len(positions) > 1:
            shards = shard_of[sequence[positions % spec.total]]
            runs = np.concatenate(([0], np.cumsum(shards[1:] != shards[:-1])))
            rng = np.random.default_rng([spec.seed, spec.epoch, _WINDOW, base + start])
            # Sort by window, randomly within it: a shuffle that never crosses windows.
            positions = positions[
                np.lexsort((rng.random(len(positions)), runs // spec.shuffle_window))
            ]
        streams.append(positions)
    return streams


def delivery(lengths: list[int], shape: LoaderShape) -> list[tuple[int, int, int]]:
    """The batches a DataLoader delivers from workers with ``lengths`` samples each.

    It asks the workers in turn for one batch each and skips a worker once it is
    exhausted; with ``drop_last`` a worker's short last batch is discarded.

    Returns:
        ``(worker, start, stop)`` per batch, in delivery order; ``start:stop``
        indexes that worker's samples.
    """
    b = shape.batch_size
    counts = [n // b if shape.drop_last else -(-n // b) for n in lengths]
    return [
        (w, r * b, min((r + 1) * b, lengths[w]))
        for r in range(max(counts, default=0))
        for w in range(len(lengths))
        if r < counts[w]
    ]


def batch_sizes(lengths: list[int], shape: LoaderShape) -> np.ndarray:
    """The size of each delivered batch, in delivery order (see :func:`delivery`)."""
    return np.asarray([stop - start for _, start, stop in delivery(lengths, shape)], dtype=np.int64)


def plan_streams(
    spec: EpochSpec, shape: LoaderShape, resume: Resume | None = None
) -> list[np.ndarray]:
    """The padded positions each of ``shape.workers`` workers yields, in order.

    Args:
        spec: The epoch and rank.
        shape: The loader that will read the streams.
        resume: Where the rank stopped in this epoch, or ``None`` to start it.

    Returns:
        One int64 array of positions per worker; position ``q`` is sample
        ``epoch_sequence(spec)[q % spec.total]``.

    Raises:
        PhalanxError: ``resume.consumed`` exceeds what the epoch delivers.
    """
    sequence = epoch_sequence(spec)
    if resume is None or resume.consumed == 0:
        return _fresh_streams(spec, shape, sequence)
    old = _fresh_streams(spec, resume.shape, sequence)
    schedule = delivery([len(s) for s in old], resume.shape)
    offsets = [0] * len(old)
    left = resume.consumed
    first = len(schedule)  # the first batch not wholly consumed
    for i, (w, start, stop) in enumerate(schedule):
        offsets[w] = start + min(left, stop - start)
        left -= min(left, stop - start)
        if offsets[w] < stop:
            first = i
            break
    if left:
        delivered = sum(stop - start for _, start, stop in schedule)
        raise PhalanxError(
            f"the resume state says {resume.consumed} samples were consumed, but this epoch "
            f"delivers {delivered} per rank; the state belongs to another dataset or job"
        )
    turn = schedule[first][0] if first < len(schedule) else 0
    if shape == resume.shape and (first == len(schedule) or offsets[turn] == schedule[first][1]):
        # Same loader, stopped between batches: each worker goes on where it stopped,
        # rotated so the new worker 0 is the one the old loader would have asked next.
        order = [(turn + j) % len(old) for j in range(len(old))]
        return [old[w][offsets[w] :] for w in order]
    remaining = [old[w][max(start, offsets[w]) : stop] for w, start, stop in schedule[first:]]
    rest = np.concatenate(remaining) if remaining else np.zeros(0, dtype=np.int64)
    # Chunk c goes to worker c % workers; a DataLoader delivers chunk c as its c-th batch.
    chunk_worker = (np.arange(len(rest)) // shape.batch_size) % shape.workers
    return [rest[chunk_worker == w] for w in range(shape.workers)]
