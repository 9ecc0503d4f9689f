"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP).

For states too large for one rank to gather and write (FSDP, DTensor), every
rank writes its own part. The folder is a DCP checkpoint (``.metadata`` plus
``__<rank>_<n>.distcp`` files) with phalanx's manifest and marker added:

1. rank 0 creates ``.tmp-…`` and broadcasts its name; every rank writes into
   it with ``dcp.save``;
2. each rank hashes the files it wrote and sends the hashes to rank 0 (this
   gather is also the barrier: every part is on disk);
3. rank 0 writes the manifest, renames the folder and writes ``COMMITTED``,
   then broadcasts the outcome, so a failure on rank 0 raises on every rank
   instead of leaving the others waiting.

Loading checks each file against the manifest (the files spread over the
ranks), agrees on the verdict across ranks so all of them load the same step,
and reads with DCP. DCP's own reader unpickles ``.metadata`` with plain
``pickle`` and non-tensor values with ``weights_only=False``; phalanx reads
the first with an unpickler that builds only DCP's metadata classes, and
checks the second with ``weights_only=True`` first, so a crafted checkpoint
runs no code here either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import os
import pathlib
import pickle
import re
import sys
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from logging import Logger
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from phalanx.train.checkpoint import _fs, _manifest
from phalanx.train.checkpoint._full import FOLDER_HINT, CheckpointDiskFull, disk_full_errno
from phalanx.train.checkpoint._manifest import FileEntry, InvalidCheckpoint, describe
from phalanx.train.checkpoint._state import check

METADATA = ".metadata"
_RANK_FILE = re.compile(r"^__(\d+)_")
_PATHS = ("Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")


@contextlib.contextmanager
def _quiet_single_process(distributed: bool) -> Iterator[None]:
    """Silence DCP's warning that it assumes one process: here that is no guess."""
    with warnings.catch_warnings():
        if not distributed:
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


def _group() -> tuple[bool, int, int]:
    """Whether a process group exists, this rank, and the world size."""
    if dist.is_available() and dist.is_initialized():
        return True, dist.get_rank(), dist.get_world_size()
    return False, 0, 1


def _broadcast(value: Any, distributed: bool) -> Any:
    if not distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _all_gather(value: Any, distributed: bool, world: int) -> list[Any]:
    if not distributed:
        return [value]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value)
    return out


def _assigned(names: list[str], rank: int, world: int) -> list[str]:
    """The files this rank hashes: the ones it wrote (DCP's ``__<rank>_`` prefix),
    which its page cache likely still holds, and a fair share of the rest."""
    mine = []
    for i, name in enumerate(sorted(names)):
        match = _RANK_FILE.match(name)
        owner = int(match.group(1)) if match and int(match.group(1)) < world else i % world
        if owner == rank:
            mine.append(name)
    return mine


def _describe_dcp(error: BaseException) -> str:
    """DCP's exception names the failed ranks; say what failed on each."""
    failures = getattr(error, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return describe(error)
    parts = []
    for rank, failure in sorted(failures.items()):
        inner = failure[0] if isinstance(failure, tuple) else failure
        parts.append(f"rank {rank}: {describe(inner)}")
    return "; ".join(parts)


def _hash(path: Path) -> FileEntry:
    with open(path, "rb") as f:
        size, sha = _fs.sha256_of(f)
    return FileEntry(size, sha)


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata dataclasses and enums, sizes, dtypes, paths; nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        found: Any = None
        if module == "torch":
            value = getattr(torch, name, None)
            if value is torch.Size or isinstance(value, (torch.dtype, torch.layout)):
                found = value
        elif module == "torch.serialization" and name == "_get_layout":
            found = torch.serialization._get_layout
        elif module == "pathlib" and name in _PATHS:
            found = getattr(pathlib, name)
        elif module == "collections" and name == "OrderedDict":
            found = OrderedDict
        elif module.startswith("torch.distributed.checkpoint.") and "." not in name:
            # Only modules already imported: an attacker's module name imports nothing.
            cls = getattr(sys.modules.get(module), name, None)
            if (
                isinstance(cls, type)
                and cls.__module__ == module
                and (dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum))
            ):
                found = cls
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in DCP metadata")
        return found


def _read_metadata(path: Path) -> Any:
    with open(path, "rb") as f:
        return _MetadataUnpickler(f).load()


def _reader(folder: Path) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("rank") is not None:
                raise FileNotFoundError("a phalanx checkpoint has no rank-local metadata")
            metadata = _read_metadata(Path(self.path) / METADATA)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(folder)


def _planner() -> Any:
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            torch.load(value, weights_only=True)  # refuses anything but plain data
            value.seek(0)
            super().load_bytes(read_item, value)

    return SafePlanner()


def save(directory: Path, state: Mapping[str, Any], step: int, log: Logger) -> bool:
    """Write ``state`` as checkpoint ``step``, every rank its part. A collective.

    Returns:
        Whether this process committed the checkpoint (rank 0).

    Raises:
        CheckpointDiskFull: The folder's disk is full (raised on every rank); the
            unfinished checkpoint is removed.
        RuntimeError: The save failed on some rank, or some rank's state holds
            a value ``weights_only`` would refuse; raised on every rank.
    """
    import torch.distributed.checkpoint as dcp

    distributed, rank, world = _group()
    name, problem, full, flat = None, None, None, {}
    try:
        flat = check(state, sharded=True)
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            _fs.sweep(directory, log)
            name = _fs.tmp_dirname(step)
            (directory / name).mkdir()
    except (TypeError, OSError) as e:
        problem, full = f"rank {rank}: {e}", disk_full_errno(e)
    # Every rank learns every rank's problem, so all of them stop (none waits
    # in the next collective); this also orders rank 0's mkdir before any write.
    starts = _all_gather((name, problem, full), distributed, world)
    _raise_if_full(next((f for _, _, f in starts if f), None), step, directory)
    problems = [p for _, p, _ in starts if p]
    if problems:
        raise RuntimeError(f"sharded save of step {step} failed: {'; '.join(problems)}")
    tmp = directory / starts[0][0]
    try:
        with _quiet_single_process(distributed):
            dcp.save(flat, storage_writer=dcp.FileSystemWriter(tmp), no_dist=not distributed)
    except (Exception, dcp.CheckpointException) as e:  # the latter is a BaseException
        # DCP raises on every rank, once every rank is done writing, with every
        # rank's failure; the free space is measured before the folder goes.
        full = disk_full_errno(e, directory)
        if rank == 0:
            _fs.remove_tree(tmp, log)
        _raise_if_full(full, step, directory, e)
        raise

    names = _broadcast(sorted(os.listdir(tmp)) if rank == 0 else None, distributed)
    mine: dict[str, FileEntry] | str
    try:
        mine = {n: _hash(tmp / n) for n in _assigned(names, rank, world)}
    except OSError as e:
        mine = f"rank {rank}: {describe(e)}"
    parts = _all_gather(mine, distributed, world)

    outcome: tuple[str, int | None] | None = None
    if rank == 0:
        try:
            failures = [p for p in parts if isinstance(p, str)]
            if failures:
                raise RuntimeError("; ".join(failures))
            files = {n: e for p in parts if isinstance(p, dict) for n, e in p.items()}
            if METADATA not in files:
                raise RuntimeError("DCP wrote no .metadata")
            _fs.write_file(tmp / _fs.MANIFEST, _manifest.encode(_manifest.SHARDED, step, files))
            _fs.fsync_dir(tmp)
            _fs.commit(tmp, directory / _fs.step_dirname(step), log)
        except Exception as e:
            outcome = describe(e), disk_full_errno(e, directory)
            _fs.remove_tree(tmp, log)
    outcome = _broadcast(outcome, distributed)
    if outcome:
        _raise_if_full(outcome[1], step, directory)
        raise RuntimeError(f"sharded save of step {step} failed: {outcome[0]}")
    return rank == 0


def _raise_if_full(
    code: int | None, step: int, directory: Path, cause: BaseException | None = None
) -> None:
    """Raise :class:`CheckpointDiskFull` when some rank found the disk full (``code``)."""
    if code is None:
        return
    raise CheckpointDiskFull(code, step, str(directory), FOLDER_HINT) from cause


def load_latest(directory: Path, state: dict[str, Any], log: Logger) -> tuple[int, Path] | None:
    """Load the newest valid sharded checkpoint into ``state``, in place. A collective.

    Returns:
        The step and folder loaded, or ``None`` when no checkpoint is usable.
    """
    import torch.distributed.checkpoint as dcp

    distributed, rank, world = _group()
    found = list(_fs.committed_steps(directory).items()) if rank == 0 else None
    candidates: list[tuple[int, Path]] = _broadcast(found, distributed)
    for step, folder in reversed(candidates):
        problem = None
        try:
            manifest = _manifest.read(folder, step)
            if manifest.kind != _manifest.SHARDED:
                raise InvalidCheckpoint("it is not sharded; load it with load_latest()")
            if METADATA not in manifest.files:
                raise InvalidCheckpoint("the manifest lists no .metadata")
            _manifest.verify(folder, manifest, _assigned(list(manifest.files), rank, world))
            if rank == 0:
                with _manifest.open_verified(folder, METADATA, manifest.files[METADATA]) as f:
                    _MetadataUnpickler(f).load()
        except InvalidCheckpoint as e:
            problem = f"rank {rank}: {e}"
        except Exception as e:
            problem = f"rank {rank}: {describe(e)}"
        problems = [p for p in _all_gather(problem, distributed, world) if p]
        if not problems:
            try:
                with _quiet_single_process(distributed):
                    dcp.load(
                        state,
                        storage_reader=_reader(folder),
                        planner=_planner(),
                        no_dist=not distributed,
                    )
                return step, folder
            except (Exception, dcp.CheckpointException) as e:  # the same on every rank
                problems = [_describe_dcp(e)]
        if rank == 0:
            log.warning(
                "checkpoint %s is unusable (%s); trying the one before it",
                folder,
                "; ".join(problems),
            )
    if candidates and rank == 0:
        log.warning("no usable checkpoint among the %d in %s", len(candidates), directory)
    return None
