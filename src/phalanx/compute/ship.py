"""A node's job files, shipped to the workspace while the job runs.

On a Ray cluster without a shared file system each node runs the job in a
folder of its own (``files: local``). Its agent scans that folder when the
supervisor polls it (once a second) and returns what changed; the supervisor
writes it into the job's folder in the workspace, where ``job logs``, the
watchdog, the failure analysis, uploads and the next attempt find it.

Two kinds of file:

- *logs* (``user_logs/``, ``system_logs/**.txt``, ``metrics.jsonl``,
  ``mlflow_run.jsonl``) only grow: new
  bytes are appended to the workspace's copy, which also holds earlier
  attempts' lines (a node starts each attempt with an empty folder);
- every other file (records, heartbeats, checkpoints, outputs) is copied
  whole, written next to its destination and renamed into place, so nobody
  reads half a file. A file that grew in place (same inode, earlier bytes
  unchanged, as an event file does) sends only its new bytes. A file the node
  deleted (a checkpoint rotated away) is deleted in the workspace.

A scan sends at most :data:`BATCH_BYTES` (at least one file, of a log that
grew more than that only its first bytes); the agent reports its launcher's
exit only once nothing is left to send.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from phalanx.launch.logtimes import is_index, is_rank_log, stamp_appended

BATCH_BYTES = 64 << 20
_TAIL = 4096
_LOG_DIRS = ("user_logs", "system_logs")


@dataclass(frozen=True)
class Change:
    """One file's change, relative to a shipped root."""

    root: str
    """The root's key (``job``, or ``out:<name>`` for a named output)."""
    path: str
    """POSIX path below the root."""
    data: bytes = b""
    offset: int = -1
    """Where ``data`` goes: ``-1`` the whole file, else at that offset."""
    log: bool = False
    """Append ``data`` to the destination, whatever its size."""
    deleted: bool = False


@dataclass
class _Seen:
    ino: int
    size: int
    mtime_ns: int
    tail: bytes
    """Digest of the bytes before ``size`` (up to 4 KiB): unchanged means it only grew."""


def is_log(path: str) -> bool:
    """Whether ``path`` (below the job root) only grows: a log, or the job's metrics."""
    parts = PurePosixPath(path).parts
    if path in ("metrics.jsonl", "mlflow_run.jsonl"):
        return True
    return bool(parts) and parts[0] in _LOG_DIRS and path.endswith((".txt", ".log", ".jsonl"))


class Scanner:
    """What changed in a node's folders since the last scan.

    Args:
        roots: Key → folder on this node.
        skip: Top-level names of the ``job`` root that are not shipped (code, mounts).
    """

    def __init__(self, roots: Mapping[str, Path], skip: frozenset[str] = frozenset()) -> None:
        self.roots = dict(roots)
        self.skip = skip
        self._seen: dict[tuple[str, str], _Seen] = {}

    def know(self, root: str) -> None:
        """Take every file now under ``root`` as already shipped (seeded from the workspace)."""
        for rel, path in self._files(root):
            st = path.stat()
            tail = _tail(path, st.st_size)
            self._seen[(root, rel)] = _Seen(st.st_ino, st.st_size, st.st_mtime_ns, tail)

    def forget(self, keys: list[tuple[str, str]]) -> None:
        """Send these files whole next time (the workspace's copy did not match)."""
        for root, path in keys:
            self._seen.pop((root, path), None)

    def scan(self, budget: int = BATCH_BYTES) -> tuple[list[Change], bool]:
        """The changes since the last scan; the flag says some were left for the next."""
        changes: list[Change] = []
        present: set[tuple[str, str]] = set()
        sent = 0
        more = False
        for root in self.roots:
            for rel, path in self._files(root):
                key = (root, rel)
                present.add(key)
                if more:
                    continue
                try:
                    found = self._change(root, rel, path, limit=max(1, budget - sent))
                except OSError:
                    continue  # gone or unreadable between listing and reading: next scan
                if found is None:
                    continue
                change, seen, cut = found
                if changes and sent + len(change.data) > budget:
                    more = True  # left as it was: sent by a later scan
                    continue
                self._seen[key] = seen
                changes.append(change)
                sent += len(change.data)
                more = cut  # the rest of a log cut short goes with a later scan
        if not more:
            for key in [k for k in self._seen if k not in present]:
                del self._seen[key]
                if not is_log(key[1]):
                    changes.append(Change(key[0], key[1], deleted=True))
        return changes, more

    def _change(
        self, root: str, rel: str, path: Path, limit: int
    ) -> tuple[Change, _Seen, bool] | None:
        """What changed in one file, and whether some was left: of a log (it only
        grows) at most ``limit`` bytes are read."""
        st = path.stat()
        seen = self._seen.get((root, rel))
        if seen and (seen.ino, seen.size, seen.mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns):
            return None
        log = is_log(rel)
        grew = (
            seen is not None
            and seen.ino == st.st_ino
            and st.st_size > seen.size  # same size, new time: rewritten, sent whole
            and _tail(path, seen.size) == seen.tail
        )
        offset = seen.size if (grew and seen is not None) else 0
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(min(st.st_size - offset, limit) if log else st.st_size - offset)
        size = offset + len(data)
        now = _Seen(st.st_ino, size, st.st_mtime_ns, _tail(path, size))
        if log:
            return Change(root, rel, data, offset, log=True), now, size < st.st_size
        return Change(root, rel, data, offset if grew else -1), now, False

    def _files(self, root: str) -> Iterator[tuple[str, Path]]:
        base = self.roots[root]
        for folder, dirs, files in os.walk(base):
            here = Path(folder)
            if here == base:
                dirs[:] = [d for d in dirs if d not in self.skip]
            for name in files:
                path = here / name
                rel = path.relative_to(base).as_posix()
                if _private(root, rel) or path.is_symlink() or not path.is_file():
                    continue
                yield rel, path


def _private(root: str, rel: str) -> bool:
    """A file that stays on its node: a container's environment file (0600, the job's
    variables), which the sweep removes there; a rank log's time index, whose offsets
    are the node's log's (the workspace's copy is stamped as its bytes arrive). A file
    of the job's own by a similar name (an output ``.x.times``) is shipped."""
    folder, _, name = rel.rpartition("/")
    return (name.startswith(".container_") and name.endswith(".env")) or (
        root == "job" and folder == "user_logs" and is_index(name)
    )


def _tail(path: Path, size: int) -> bytes:
    start = max(0, size - _TAIL)
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.sha256(f.read(size - start)).digest()


def apply(changes: list[Change], roots: Mapping[str, Path]) -> list[tuple[str, str]]:
    """Write ``changes`` under their roots in the workspace.

    Returns:
        The files whose copy here did not match the offset sent: the node must send them
        whole (:meth:`Scanner.forget`).
    """
    resend: list[tuple[str, str]] = []
    for change in changes:
        base = roots.get(change.root)
        rel = PurePosixPath(change.path)
        if base is None or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            continue  # not ours to write
        dest = base.joinpath(*rel.parts)
        if change.deleted:
            dest.unlink(missing_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if change.log:
            with open(dest, "ab") as f:
                before = f.seek(0, os.SEEK_END)
                f.write(change.data)
            if rel.parts[0] == "user_logs" and len(rel.parts) == 2 and is_rank_log(rel.name):
                # A rank's log: its lines' time is when they arrived here (the node's
                # own index counts the node's bytes, not this copy's).
                with contextlib.suppress(OSError):
                    stamp_appended(dest, before, before + len(change.data), time.time())
        elif change.offset >= 0:
            if not dest.is_file() or dest.stat().st_size != change.offset:
                resend.append((change.root, change.path))
                continue
            with open(dest, "ab") as f:
                f.write(change.data)
        else:
            part = dest.with_name(f".{dest.name}.shipping")
            part.write_bytes(change.data)
            os.replace(part, dest)
    return resend
