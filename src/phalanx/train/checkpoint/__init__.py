"""Checkpoints that survive a crash at any instant, and the resume that finds them.

A job's checkpoint folder (``$PHALANX_CHECKPOINT_DIR``) is the same in every
attempt. When a rank fails, phalanx restarts the whole gang as a new attempt
(``$PHALANX_ATTEMPT`` = 2, 3, …), and the script resumes from the newest valid
checkpoint::

    from phalanx.train import Checkpointer, init, rng_state, set_rng_state

    ctx = init()
    ckpt = Checkpointer(keep_last=3, async_save=True)
    start = 0
    if (loaded := ckpt.load_latest()) is not None:        # every rank reads it
        model.load_state_dict(loaded.state["model"])
        optimizer.load_state_dict(loaded.state["optimizer"])
        scheduler.load_state_dict(loaded.state["scheduler"])
        set_rng_state(loaded.state["rng"])
        start = loaded.step + 1
    for step in range(start, steps):
        train_step()
        if step % 1000 == 0:                              # every rank may call; rank 0 writes
            ckpt.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                       "scheduler": scheduler.state_dict(), "rng": rng_state()}, step)
    ckpt.close()                                          # the last async save is durable

Layout::

    <dir>/step_000000001000/     state.pt  manifest.json  COMMITTED
    <dir>/step_000000002000/     …
    <dir>/.tmp-step_000000003000-<pid space>.<pid>-<random>/   being written (ignored by readers)
    <dir>/.trash-step_…/         being deleted (ignored by readers)

What is guaranteed:

* **Atomic.** A checkpoint is written under ``.tmp-…``, fsynced (files, then
  folder), renamed to ``step_<step>``, and only then given its empty
  ``COMMITTED`` marker (fsynced, then the parent folder). Readers consider
  only folders with the marker, so a writer killed at any point leaves the
  previous checkpoints as they were. Leftover ``.tmp-`` folders are removed
  by the next save once their writer is known dead (its pid gone, on this
  host and in this PID namespace) or has touched nothing for 5 minutes: two
  attempts may overlap briefly.
* **Verified.** ``manifest.json`` lists every file's size and sha256.
  ``load_latest()`` checks them, then reads ``state.pt`` with
  ``torch.load(weights_only=True)`` only, so a file that would run code when
  unpickled is refused like a damaged one. A checkpoint that fails any check
  is skipped with a WARNING naming it and why, and the one before it is tried.
  ``save()`` refuses (``TypeError``) a state that would not load that way,
  naming the value, rather than writing a checkpoint that can never be read.
* **Pruned.** After each commit, committed checkpoints beyond the newest
  ``keep_last`` (≥ 2) are deleted in the background, oldest first; the one
  just written is always kept. A deletion removes ``COMMITTED`` first, then
  renames the folder to ``.trash-…`` and removes it. A deletion that fails is
  logged and does not stop later ones.
* **Same step twice.** A step this Checkpointer already saved is skipped (an
  emergency save right after a regular one); a step saved by someone else
  (the previous attempt) is replaced: the old folder is retired first, so the
  step is briefly absent, never half-written.
* **Asynchronous** (``async_save=True``). ``save()`` copies every tensor to
  CPU memory (detached copies: training may change the originals at once)
  and returns; one background thread writes. At most one save is in flight:
  the next ``save()`` first waits for the previous one. Its error, if any, is
  raised by the next ``save()``, ``wait()`` or ``close()``. The copies reuse
  the previous save's buffers, so an async Checkpointer holds one CPU copy
  of the state between saves.
* **Full disk.** A save that runs out of space (``ENOSPC``, or ``EDQUOT`` for
  a quota) removes its unfinished folder at once and raises
  :class:`CheckpointDiskFull` (an ``OSError`` and a
  :class:`~phalanx.errors.PhalanxError`): "no space left on device while saving
  checkpoint step N to DIR", the job's root cause when uncaught, rather than
  torch's ``RuntimeError: … unexpected pos …`` with the reason hidden in its
  chain. The checkpoints before it stay loadable. The same holds for an
  asynchronous save (raised by the next call), a sharded one (on every rank)
  and the staging folder of a save to an object store.
* **Ranks.** Only rank 0 writes replicated state; ``save()`` on other ranks
  returns at once and is no collective, so it cannot hang. For states no
  single rank holds (FSDP, DTensor), ``save_sharded()`` and
  ``load_sharded_latest()`` use ``torch.distributed.checkpoint``: every rank
  writes its part, rank 0 commits (see :mod:`._sharded`).

**On an object store.** The directory (or ``$PHALANX_CHECKPOINT_DIR``) may be
a URI: ``azureml://datastores/<name>/paths/<path>`` of a registered datastore,
or ``az://…``, ``abfs://…``, ``s3://…`` (see :mod:`phalanx.storage.uri`). The
layout and the guarantees above hold, kept by the order of the uploads rather
than by renames (see :mod:`._remote`): each checkpoint is written to a staging
folder in ``$TMPDIR`` (room for one checkpoint), then uploaded, data first,
manifest next, ``COMMITTED`` last; an asynchronous save uploads in its
background thread. Loading downloads a checkpoint to ``$TMPDIR`` and checks it
there. What a writer killed mid-upload leaves has no marker: readers ignore it,
and a later prune removes it once it is stale and older than the newest
checkpoint. A refused credential or an unreachable store raises a one-line
:class:`~phalanx.errors.PhalanxError` (transient errors are retried first), and
is never a reason to fall back to an older checkpoint. A datastore of type
``local`` is used as a plain folder. Sharded checkpoints need a folder for now.

Not reentrant: call it from the training loop, not from a signal handler
(:mod:`phalanx.train.preemption` sets a flag that the loop checks).
"""

from phalanx.train.checkpoint._full import CheckpointDiskFull
from phalanx.train.checkpoint.checkpointer import (
    CHECKPOINT_DIR_ENV,
    Checkpointer,
    LoadedCheckpoint,
)
from phalanx.train.checkpoint.rng import rng_state, set_rng_state

__all__ = [
    "CHECKPOINT_DIR_ENV",
    "CheckpointDiskFull",
    "Checkpointer",
    "LoadedCheckpoint",
    "rng_state",
    "set_rng_state",
]
