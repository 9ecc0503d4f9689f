"""The checkpoint folder on disk: names, durable writes, commit, retire, sweep, prune.

Every change a reader could see is one ``rename`` or one file appearing, and
each is fsynced before the next step depends on it. The rules that make a
crash at any instant harmless:

* a checkpoint is written in full under ``.tmp-…`` and renamed to
  ``step_<step>`` only when its files and manifest are durable;
* it counts only once its empty ``COMMITTED`` marker exists, written last;
* it stops counting when ``COMMITTED`` is removed, first, before anything else
  of it is touched; it is then renamed to ``.trash-…`` and removed.

Readers look at ``step_*`` folders holding ``COMMITTED`` and at nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import sys
import threading
import time
from logging import Logger
from pathlib import Path
from typing import Any, BinaryIO

from phalanx.train.heartbeat import heartbeat

STEP_PREFIX = "step_"
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
MANIFEST = "manifest.json"
COMMITTED = "COMMITTED"

STALE_AFTER_S = 300.0
"""A ``.tmp-`` folder of a writer this process cannot check, or an uncommitted
``step_`` folder, is left alone until nothing in it has changed for this long.
Writes go out in chunks of at most ``_CHUNK`` bytes, so a live writer's newest
modification time stays recent."""

_CHUNK = 64 << 20
_STEP_RE = re.compile(r"^step_(\d+)$")
_TMP_RE = re.compile(r"^\.tmp-step_\d+-(?P<space>[0-9a-f]{8})\.(?P<pid>\d+)-[0-9a-f]+$")


def _pid_space() -> str:
    """Where a pid names one process: this host and its PID namespace, as 8 hex digits.

    Containers sharing the host's name (``--network host``) have PID
    namespaces of their own; there, the other's pid says nothing.
    """
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    # Hashed: short, and free of the odd characters a host name may hold.
    return hashlib.sha256(f"{socket.gethostname()}/{namespace}".encode()).hexdigest()[:8]


_PID_SPACE = _pid_space()


def step_dirname(step: int) -> str:
    """``step_000000000042``: zero-padded so that names sort like steps."""
    return f"{STEP_PREFIX}{step:012d}"


def step_of(name: str) -> int | None:
    """The step a ``step_<step>`` folder name stands for; ``None`` for any other name."""
    match = _STEP_RE.match(name)
    return int(match.group(1)) if match else None


def tmp_dirname(step: int) -> str:
    """A private folder to write ``step`` into, naming its writer (pid space and pid)."""
    return f"{TMP_PREFIX}step_{step:012d}-{_PID_SPACE}.{os.getpid()}-{secrets.token_hex(4)}"


def committed_steps(directory: Path) -> dict[int, Path]:
    """Committed checkpoints by step, in step order; ``{}`` when the folder is absent."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        match = _STEP_RE.match(name)
        if match and (directory / name / COMMITTED).is_file():
            found[int(match.group(1))] = directory / name
    return dict(sorted(found.items()))


def fsync_dir(path: Path) -> None:
    """Make the entries of ``path`` (created, renamed, removed files) durable.

    Some network and FUSE file systems cannot fsync a folder; there the
    rename's own atomicity is all there is, and saving goes on.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


class HashingWriter:
    """A write-only file object that hashes and counts what passes through it.

    ``torch.save`` writes through it, so the manifest's sha256 costs no second
    read of the file. Large buffers go out in chunks, which keeps the file's
    modification time moving while a big tensor is written (see
    :data:`STALE_AFTER_S`).
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _CHUNK):
            chunk = view[start : start + _CHUNK]
            self._hash.update(chunk)
            self._file.write(chunk)
            _alive()
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        self._file.flush()

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def write_file(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` and fsync it."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def sha256_of(file: BinaryIO) -> tuple[int, str]:
    """Size and sha256 of an open file, read from its current position to the end."""
    digest = hashlib.sha256()
    size = 0
    while chunk := file.read(1 << 22):
        digest.update(chunk)
        size += len(chunk)
        _alive()
    return size, digest.hexdigest()


def _alive() -> None:
    """Tell phalanx's hang watchdog that a long save or load is progress.

    From the main thread only: an async writer thread going on would hide a
    training loop that is really stuck.
    """
    if threading.current_thread() is threading.main_thread():
        heartbeat()


def retire(path: Path) -> Path:
    """Take a ``step_`` folder out of sight; returns its ``.trash-`` name.

    ``COMMITTED`` goes first and durably, so a crash anywhere after leaves at
    worst an uncommitted folder, never a committed one with files missing.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path / COMMITTED)
        fsync_dir(path)
    trash = path.parent / f"{TRASH_PREFIX}{path.name}-{secrets.token_hex(4)}"
    os.rename(path, trash)
    return trash


def remove_tree(path: Path, log: Logger) -> bool:
    """Remove a folder; a failure is logged, never raised. Returns whether it is gone."""
    failures: list[str] = []

    def on_error(_func: object, failed: str, exc: Any) -> None:
        error = exc if isinstance(exc, BaseException) else exc[1]  # onexc / onerror
        # Another process removing the same leftover at the same time is fine.
        if not isinstance(error, FileNotFoundError):
            failures.append(f"{failed}: {error}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=on_error)
    else:
        shutil.rmtree(path, onerror=on_error)
    if failures:
        log.warning("could not remove %s: %s", path, "; ".join(failures[:3]))
    return not path.exists()


def commit(tmp: Path, final: Path, log: Logger) -> None:
    """Move a fully written ``tmp`` folder to ``final`` and mark it committed.

    A folder already at ``final`` (the same step saved by an earlier attempt,
    or left uncommitted by a killed writer) is retired first; in between, the
    step is simply absent, and older checkpoints stay valid. If the marker
    cannot be made durable (a full disk), ``final`` is removed again at once
    rather than left for :func:`sweep` to find after :data:`STALE_AFTER_S`.
    """
    if final.exists():
        retire(final)
    try:
        os.rename(tmp, final)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(
                f"{final} appeared while this save was committing it; is another "
                "process saving the same step into the same folder?"
            ) from e
        raise
    try:
        write_file(final / COMMITTED, b"")
        fsync_dir(final)
        fsync_dir(final.parent)
    except BaseException:
        # The caller learns the save failed: the folder must not count, nor keep its room.
        try:
            remove_tree(retire(final), log)
        except OSError as e:
            log.warning("could not remove %s after a failed commit: %s", final, e)
        raise


def _newest_mtime(path: Path) -> float:
    newest = path.stat().st_mtime
    with os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return newest


def _writer_is_dead(name: str) -> bool:
    """Whether a ``.tmp-`` folder's writer is known to be gone: no such pid here."""
    match = _TMP_RE.match(name)
    if not match or match["space"] != _PID_SPACE:
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, but belongs to someone else
        return False
    return False


def sweep(directory: Path, log: Logger) -> None:
    """Remove what killed writers and pruners left behind.

    * ``.trash-*``: always (only ever renamed there to be removed);
    * ``.tmp-*``: when its writer, on this host and in this PID namespace, is
      no longer running, or when nothing in it changed for
      :data:`STALE_AFTER_S` (a writer elsewhere, say the previous attempt's,
      may still be finishing);
    * ``step_*`` without ``COMMITTED``: after :data:`STALE_AFTER_S` (a writer
      killed between its rename and its marker).
    """
    try:
        entries = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    now = time.time()
    for name in entries:
        path = directory / name
        try:
            if name.startswith(TRASH_PREFIX):
                remove_tree(path, log)
            elif name.startswith(TMP_PREFIX):
                if _writer_is_dead(name) or now - _newest_mtime(path) > STALE_AFTER_S:
                    log.info("removing %s, left by an interrupted save", name)
                    remove_tree(path, log)
            elif (
                _STEP_RE.match(name)
                and not (path / COMMITTED).exists()
                and now - _newest_mtime(path) > STALE_AFTER_S
            ):
                log.info("removing %s, never committed", name)
                remove_tree(retire(path), log)
        except FileNotFoundError:
            continue  # removed by someone else meanwhile
        except OSError as e:
            log.warning("could not clean up %s: %s", path, e)


def prune(directory: Path, keep_last: int, keep: int, log: Logger) -> None:
    """Delete committed checkpoints beyond the newest ``keep_last``, oldest first.

    ``keep`` (the step just committed) survives even when newer steps exist,
    e.g. left by an earlier attempt that diverged. A deletion that fails is
    logged and the next one is still tried, so one stuck folder does not stop
    pruning for the rest of the run.
    """
    sweep(directory, log)
    steps = list(committed_steps(directory))
    spare = set(steps[-keep_last:]) | {keep}
    for step in steps:
        if step in spare:
            continue
        path = directory / step_dirname(step)
        try:
            trash = retire(path)
        except FileNotFoundError:
            continue  # another writer pruned it first
        except OSError as e:
            log.warning("could not delete old checkpoint %s: %s", path, e)
            continue
        if remove_tree(trash, log):
            log.debug("deleted old checkpoint %s", path.name)
