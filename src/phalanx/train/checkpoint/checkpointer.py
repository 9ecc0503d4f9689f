"""``Checkpointer``: save, prune and load the checkpoints of one job's folder.

The folder is local (or shared) here; on an object store, :mod:`._remote` moves
the same files in an order that keeps the same guarantees.
"""

from __future__ import annotations

import operator
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

from phalanx.errors import PhalanxError
from phalanx.train.checkpoint import _fs, _manifest
from phalanx.train.checkpoint._full import FOLDER_HINT, reraise_if_full
from phalanx.train.checkpoint._manifest import FileEntry, InvalidCheckpoint, describe
from phalanx.train.checkpoint._state import Stager, check
from phalanx.train.log import get_logger

if TYPE_CHECKING:
    from phalanx.train.checkpoint._remote import RemoteFolder

__all__ = ["CHECKPOINT_DIR_ENV", "Checkpointer", "LoadedCheckpoint"]

CHECKPOINT_DIR_ENV = "PHALANX_CHECKPOINT_DIR"
STATE_FILE = "state.pt"

MapLocation = str | torch.device | dict[str, str] | Callable[..., Any] | None

log = get_logger("phalanx.checkpoint")


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint read back by :meth:`Checkpointer.load_latest`.

    Attributes:
        step: The step it was saved at.
        state: What was given to ``save()``, tensors on ``map_location``.
        path: Its folder, ``<directory>/step_<step:012d>``; a ``str`` (its URI)
            when the directory is on an object store.
    """

    step: int
    state: dict[str, Any] = field(repr=False)
    path: Path | str


def _default_rank() -> int:
    raw = os.environ.get("RANK", "").strip()
    try:
        return int(raw) if raw else 0
    except ValueError:
        raise PhalanxError(f"environment variable RANK={raw!r} is not an integer") from None


class Checkpointer:
    """Atomic, verified, pruned checkpoints in one folder; see :mod:`phalanx.train.checkpoint`.

    Args:
        directory: The folder; default ``$PHALANX_CHECKPOINT_DIR`` (set by
            phalanx, the same in every attempt), else ``./checkpoints``. A
            URI (``azureml://datastores/<name>/paths/<path>``, ``az://…``,
            ``s3://…``) keeps the checkpoints on that store: see :mod:`._remote`.
        keep_last: Committed checkpoints to keep, at least 2, so that a
            corrupt newest one leaves one to fall back to.
        async_save: Copy the state to CPU in ``save()`` and write it in a
            background thread.
        rank: This process's global rank, default ``$RANK`` or 0. Only rank 0
            writes with :meth:`save`; every rank may load.

    Attributes:
        directory: The folder as a ``Path``, or the URI (a ``str``) of one on
            an object store.

    Raises:
        ValueError: ``keep_last`` is below 2, or ``rank`` is negative.
        PhalanxError: ``directory`` is a URI that names no datastore phalanx
            knows, or whose endpoint does not answer.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        keep_last: int = 3,
        async_save: bool = False,
        rank: int | None = None,
    ) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 2:
            raise ValueError(
                f"keep_last must be an integer of at least 2 (the newest checkpoint and "
                f"one to fall back to if it is damaged); got {keep_last!r}"
            )
        if directory is None:
            directory = os.environ.get(CHECKPOINT_DIR_ENV, "").strip() or "checkpoints"
        self.keep_last = keep_last
        self.async_save = async_save
        self.rank = _default_rank() if rank is None else rank
        if self.rank < 0:
            raise ValueError(f"rank must be >= 0; got {self.rank}")
        self.directory: Path | str
        self._remote: RemoteFolder | None
        found = _open(directory)
        if isinstance(found, Path):
            self.directory, self._remote = found, None
        else:
            self.directory, self._remote = found.uri, found
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._stager = Stager()
        self._committed: set[int] = set()  # steps this instance committed
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"Checkpointer({str(self.directory)!r}, keep_last={self.keep_last}, "
            f"async_save={self.async_save}, rank={self.rank})"
        )

    # Saving ------------------------------------------------------------------

    def save(self, state: Mapping[str, Any], step: int) -> None:
        """Save ``state`` as the checkpoint of ``step``; on ranks other than 0, do nothing.

        Not a collective: ranks may call it at different times, or only rank 0.
        First waits for the previous asynchronous save, if any, so at most one
        save is in flight; if that one failed, its error is raised here and
        this save is not attempted (a second call would be). A step this
        Checkpointer already saved is skipped (an emergency save right after a
        regular one); a step saved earlier by another process, e.g. a previous
        attempt, is replaced.

        Args:
            state: Plain data: tensors, state_dicts, numbers, strings, and
                dicts, lists and tuples of these (see :func:`rng_state`).
            step: The training step, ``>= 0``; the newest step is loaded first.

        Raises:
            TypeError: A value in ``state`` would not load with ``weights_only``.
            ValueError: ``step`` is negative.
            RuntimeError: The Checkpointer is closed.
            CheckpointDiskFull: The checkpoint did not fit on its disk (this
                synchronous save, or the previous asynchronous one); the
                unfinished checkpoint is already removed. An ``OSError`` too.
            OSError: The write failed (synchronous save), or the previous
                asynchronous save failed with it.
        """
        step = operator.index(step)
        if step < 0:
            raise ValueError(f"step must be >= 0; got {step}")
        if self._closed:
            raise RuntimeError("save() on a closed Checkpointer")
        if self.rank != 0:
            return
        self.wait()
        if step in self._committed:
            log.debug("step %d is already saved in %s; skipping", step, self.directory)
            return
        if self.async_save:
            snapshot = self._stager.snapshot(state)
            self._pending.append(self._pool().submit(self._write_then_prune, snapshot, step))
        else:
            self._write(check(state), step)
            self._pending.append(self._pool().submit(self._prune, step))

    def wait(self) -> None:
        """Block until the pending save (and its pruning) is done and durable.

        Raises:
            Exception: Whatever the background save raised; raised once.
        """
        pending, self._pending = self._pending, []
        error: BaseException | None = None
        for future in pending:
            try:
                future.result()
            except BaseException as e:  # the first failure wins; later ones are logged
                if error is None:
                    error = e
                else:
                    log.error("checkpoint background work failed: %s", describe(e))
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the pending save and stop the background thread; safe to call again."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as e:  # the exception already leaving the block matters more
            log.error("checkpoint save failed while handling another error: %s", describe(e))

    def _pool(self) -> ThreadPoolExecutor:
        # One thread: writes happen in order, and at most one is in flight.
        # Not a daemon: a script that ends without close() still gets its last
        # asynchronous checkpoint, because the interpreter joins the thread.
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="phalanx-checkpoint")
        return self._executor

    def _write(self, state: dict[str, Any], step: int) -> None:
        start = time.perf_counter()
        if isinstance(self.directory, str):
            # Staged by the same code as locally, then uploaded in commit order.
            with tempfile.TemporaryDirectory(prefix="phalanx-checkpoint-") as staging:
                hint = (
                    f" (staging it in {staging}, which needs room for one checkpoint: "
                    "point TMPDIR at a bigger disk)"
                )
                # Checked before the staging folder goes, while it still takes its room.
                with reraise_if_full(step, self._store.uri, Path(staging), hint):
                    size = _write_files(Path(staging), state, step)
                replaced = self._store.upload(Path(staging), step, [STATE_FILE])
            name = self._store.step_uri(step)
        else:
            size, replaced = self._write_local(self.directory, state, step)
            name = _fs.step_dirname(step)
        self._committed.add(step)
        log.info(
            "saved checkpoint %s (%.1f MB, %.2f s%s)",
            name,
            size / 1e6,
            time.perf_counter() - start,
            ", replacing an earlier one" if replaced else "",
        )

    @staticmethod
    def _write_local(directory: Path, state: dict[str, Any], step: int) -> tuple[int, bool]:
        """Write and commit a checkpoint; its size and whether it replaced one."""
        fresh = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if fresh:
            _fs.fsync_dir(directory.parent)
        _fs.sweep(directory, log)
        tmp = directory / _fs.tmp_dirname(step)
        final = directory / _fs.step_dirname(step)
        try:
            # Inside the try that removes the unfinished folder, so the free space
            # is checked while that folder still takes its room.
            with reraise_if_full(step, str(directory), directory, FOLDER_HINT):
                tmp.mkdir()
                size = _write_files(tmp, state, step)
                _fs.fsync_dir(tmp)
                replaced = final.exists()
                _fs.commit(tmp, final, log)
        except BaseException:
            _fs.remove_tree(tmp, log)
            raise
        return size, replaced

    def _prune(self, step: int) -> None:
        try:
            if isinstance(self.directory, str):
                self._store.prune(self.keep_last, step, log)
            else:
                _fs.prune(self.directory, self.keep_last, step, log)
        except Exception as e:
            # Pruning must never fail a save, nor kill the thread that prunes
            # after the next commit, which tries again.
            log.warning("pruning old checkpoints in %s failed: %s", self.directory, describe(e))

    def _write_then_prune(self, state: dict[str, Any], step: int) -> None:
        self._write(state, step)
        self._prune(step)

    # Loading -----------------------------------------------------------------

    @property
    def _store(self) -> RemoteFolder:
        assert self._remote is not None, "set whenever the directory is a URI"
        return self._remote

    def list_steps(self) -> list[int]:
        """The steps of the committed checkpoints, oldest first (not verified).

        Raises:
            PhalanxError: The object store holding the folder refused or failed.
        """
        if isinstance(self.directory, str):
            return list(self._store.committed_steps())
        return list(_fs.committed_steps(self.directory))

    def load_latest(
        self, map_location: MapLocation = "cpu", *, agree: bool | None = None
    ) -> LoadedCheckpoint | None:
        """The newest checkpoint that passes every check, or ``None`` if there is none.

        Each candidate, newest first, must have a readable manifest whose
        sizes and sha256 match its files, and its state must load with
        ``torch.load(weights_only=True)``. One that fails is skipped with a
        WARNING naming it and the reason. It does not wait for this
        Checkpointer's own pending save; call :meth:`wait` first for that.

        With a process group, ranks *agree*: they take rank 0's list of
        candidates and skip a candidate together if it fails on any rank, so
        every rank resumes from the same step (a rank that fell back alone
        would train from other weights). That makes the call a collective:
        every rank must make it. ``agree=False`` loads independently.

        Args:
            map_location: Where tensors go, as for :func:`torch.load`.
            agree: Agree across ranks; by default, when a process group exists.

        Raises:
            OSError: Only when the folder itself cannot be listed (a missing
                folder is no checkpoint, not an error).
            PhalanxError: The object store holding the folder refused or
                failed (raised on every rank when they agree): that is no
                reason to fall back to an older checkpoint.
        """
        group = _agreeing_group(agree)
        # A store can fail for one rank only (its network): then every rank
        # raises, rather than one waiting alone or all falling back a step.
        share_failures = group and self._remote is not None
        candidates = self._candidates(group)
        for step, folder in reversed(candidates):
            failure: Exception | None = None
            try:
                state: dict[str, Any] | None = self._read(folder, step, map_location)
            except InvalidCheckpoint as e:
                log.warning("checkpoint %s is unusable (%s); trying the one before it", folder, e)
                state = None
            except Exception as e:
                if not share_failures:
                    raise
                failure, state = e, None
            if share_failures and not _everywhere(failure is None):
                raise failure or PhalanxError(
                    f"loading checkpoint {folder} failed on another rank; its log says why"
                )
            if group and not _everywhere(state is not None):
                if state is not None:
                    log.warning(
                        "checkpoint %s failed on another rank; trying the one before", folder
                    )
                continue
            if state is None:
                continue
            log.info("loaded checkpoint %s", folder)
            # Saving this step again (a preemption right after the resume) would only
            # rewrite it, and on an object store delete the good copy first.
            self._committed.add(step)
            return LoadedCheckpoint(step=step, state=state, path=folder)
        if candidates:
            log.warning("no usable checkpoint among the %d in %s", len(candidates), self.directory)
        return None

    def _candidates(self, group: bool) -> list[tuple[int, Path | str]]:
        """The committed checkpoints, oldest first; rank 0's when ranks agree."""
        if isinstance(self.directory, str):
            store = self._store
            return [*_from_rank_0(lambda: list(store.committed_steps().items()), group)]
        local = list(_fs.committed_steps(self.directory).items())
        return [*(_broadcast_from_rank_0(local) if group else local)]

    def _read(self, folder: Path | str, step: int, map_location: MapLocation) -> dict[str, Any]:
        """The state of one candidate; from an object store, through a local copy."""
        if isinstance(folder, Path):
            return self._load(folder, step, map_location)
        with tempfile.TemporaryDirectory(prefix="phalanx-checkpoint-") as copy:
            self._store.download(step, Path(copy))
            return self._load(Path(copy), step, map_location)

    @staticmethod
    def _load(folder: Path, step: int, map_location: MapLocation) -> dict[str, Any]:
        manifest = _manifest.read(folder, step)
        if manifest.kind != _manifest.REPLICATED:
            raise InvalidCheckpoint("it is sharded; load it with load_sharded_latest()")
        if STATE_FILE not in manifest.files:
            raise InvalidCheckpoint("the manifest lists no state.pt")
        try:
            _manifest.verify(folder, manifest, [n for n in manifest.files if n != STATE_FILE])
            with _manifest.open_verified(folder, STATE_FILE, manifest.files[STATE_FILE]) as f:
                state = torch.load(f, map_location=map_location, weights_only=True)
        except InvalidCheckpoint:
            raise
        except Exception as e:
            # weights_only refuses any pickle that would build or call something
            # other than plain data: such a file is treated like a damaged one.
            raise InvalidCheckpoint(f"state.pt does not load: {describe(e)}") from None
        if not isinstance(state, dict):
            raise InvalidCheckpoint(f"state.pt holds a {type(state).__name__}, not a dict")
        return state

    # Sharded -----------------------------------------------------------------

    def save_sharded(self, state: Mapping[str, Any], step: int) -> None:
        """Save with ``torch.distributed.checkpoint``: every rank writes its part.

        A collective: every rank must call it with the same step. Synchronous.
        Needs an initialised process group when there is more than one process.
        A step already in the folder is replaced.

        Raises:
            CheckpointDiskFull: The folder's disk is full (raised on every rank).
            RuntimeError: The save failed on some rank, or some rank's state
                holds a value ``weights_only`` would refuse (raised on every
                rank), or there are several processes but no process group.
            PhalanxError: The directory is on an object store (not supported yet).
        """
        from phalanx.train.checkpoint import _sharded

        step = operator.index(step)
        if step < 0:
            raise ValueError(f"step must be >= 0; got {step}")
        if self._closed:
            raise RuntimeError("save_sharded() on a closed Checkpointer")
        if isinstance(self.directory, str):
            raise _sharded_needs_a_folder(self.directory)
        self._need_group("save_sharded")
        self.wait()
        if _sharded.save(self.directory, state, step, log):
            log.info("saved sharded checkpoint %s", _fs.step_dirname(step))
            self._pending.append(self._pool().submit(self._prune, step))

    def load_sharded_latest(self, state: dict[str, Any]) -> LoadedCheckpoint | None:
        """Load the newest valid sharded checkpoint into ``state``, in place. A collective.

        ``state`` gives the structure to fill, as for ``dcp.load``: its tensors
        (or DTensors) receive the saved values, its other values are replaced.
        Checks and fallback are as for :meth:`load_latest`; all ranks agree
        on the checkpoint they load.

        Returns:
            The checkpoint loaded (its ``state`` is ``state``), or ``None``.

        Raises:
            PhalanxError: The directory is on an object store (not supported yet).
        """
        from phalanx.train.checkpoint import _sharded

        if isinstance(self.directory, str):
            raise _sharded_needs_a_folder(self.directory)
        self._need_group("load_sharded_latest")
        found = _sharded.load_latest(self.directory, state, log)
        if found is None:
            return None
        step, folder = found
        log.info("loaded sharded checkpoint %s", folder)
        return LoadedCheckpoint(step=step, state=state, path=folder)

    def _need_group(self, what: str) -> None:
        import torch.distributed as dist

        if self.rank != 0 and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                f"{what}() on rank {self.rank} needs the process group; call "
                "phalanx.train.init() first"
            )


def _write_files(folder: Path, state: dict[str, Any], step: int) -> int:
    """Write ``state.pt`` and its manifest into ``folder``, both fsynced; the state's size."""
    with open(folder / STATE_FILE, "xb") as f:
        writer = _fs.HashingWriter(f)
        torch.save(state, writer)  # type: ignore[arg-type]  # a write-only file object
        f.flush()
        os.fsync(f.fileno())
    files = {STATE_FILE: FileEntry(writer.size, writer.hexdigest())}
    manifest = _manifest.encode(_manifest.REPLICATED, step, files)
    _fs.write_file(folder / _fs.MANIFEST, manifest)
    return writer.size


def _sharded_needs_a_folder(uri: str) -> PhalanxError:
    return PhalanxError(
        f"{uri}: sharded checkpoints need a local or shared folder for now; give "
        "save_sharded() a Checkpointer on a folder, or save() replicated state here"
    )


def _open(directory: str | os.PathLike[str]) -> Path | RemoteFolder:
    """The folder ``directory`` names: a local one, or one on an object store."""
    if isinstance(directory, str):
        from phalanx.storage.uri import is_uri

        if is_uri(directory):
            from phalanx.train.checkpoint._remote import open_folder

            return open_folder(directory)
        directory = directory.removeprefix("file://")
    return Path(directory).expanduser().absolute()


def _agreeing_group(agree: bool | None) -> bool:
    import torch.distributed as dist

    ready = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if agree and not ready:
        raise ValueError("agree=True needs an initialised process group of more than one rank")
    return ready if agree is None else bool(agree)


def _broadcast_from_rank_0(candidates: list[tuple[int, Path]]) -> list[tuple[int, Path]]:
    import torch.distributed as dist

    box: list[Any] = [[(step, str(folder)) for step, folder in candidates]]
    dist.broadcast_object_list(box, src=0)
    return [(int(step), Path(folder)) for step, folder in box[0]]


def _from_rank_0(
    list_steps: Callable[[], list[tuple[int, str]]], group: bool
) -> list[tuple[int, str]]:
    """Candidates on an object store, listed once (by rank 0) for a group.

    A listing that fails on rank 0 fails on every rank, none left waiting.
    """
    if not group:
        return list(list_steps())
    import torch.distributed as dist

    found: list[tuple[int, str]] | str | None = None
    if dist.get_rank() == 0:
        try:
            found = list_steps()
        except PhalanxError as e:
            found = str(e)
    box: list[Any] = [found]
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], str):
        raise PhalanxError(box[0])
    return [(int(step), str(uri)) for step, uri in box[0]]


def _everywhere(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank (a collective)."""
    import torch.distributed as dist

    device = (
        torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    )
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
