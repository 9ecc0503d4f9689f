"""Copying a local folder to a datastore, sending only what changed since the last copy."""

from __future__ import annotations

import json
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from phalanx.nofollow import open_beneath, read_bytes, write_new
from phalanx.storage.errors import storage_errors
from phalanx.storage.location import Location

MANIFEST = ".phalanx-upload.json"
"""What was sent, by size and modification time: in the local folder unless the caller
keeps it elsewhere (a walled-off job's output folder is the job's to write, so its
manifest is kept where the job cannot reach)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class UploadReport:
    uploaded: int
    unchanged: int
    bytes: int


# One upload of a given folder at a time (the periodic sync and the final one may meet).
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(folder: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(folder), threading.Lock())


def upload_folder(
    folder: Path, dest: Location, *, workers: int = 8, manifest: Path | None = None
) -> UploadReport:
    """Send every file under ``folder`` that is new or changed to ``dest``, keeping the layout.

    Each object is written whole by the store (a reader sees the old or the new
    file, never part of one). Files still being written may be sent again by the
    next call, which sees their new size or time. The folder may be a walled-off
    job's, read here as root: it is walked by descriptor and no link is followed, so a
    folder or file swapped for a link to the server's files sends nothing and nothing
    is written through it.

    Args:
        manifest: Where to keep what was sent (default: ``folder/.phalanx-upload.json``).

    Raises:
        PhalanxError: the store refuses or cannot be reached.
    """
    with _lock_for(folder):
        manifest_path = manifest if manifest is not None else folder / MANIFEST
        try:
            sent: dict[str, list[int]] = json.loads(read_bytes(manifest_path))
        except (OSError, json.JSONDecodeError):
            sent = {}
        todo: list[tuple[str, list[int]]] = []
        unchanged = 0
        for rel, st in _files(folder):
            if rel == MANIFEST:
                continue
            # Work in progress (a checkpoint's .tmp-* staging folder, a writer's .tmp file).
            if any(part.startswith(".tmp") for part in rel.split("/")):
                continue
            stamp = [st.st_size, st.st_mtime_ns]
            if sent.get(rel) == stamp:
                unchanged += 1
            else:
                todo.append((rel, stamp))

        def put(item: tuple[str, list[int]]) -> int | None:
            rel, stamp = item
            target = dest.child(rel)
            try:
                fd = open_beneath(folder, rel)  # a folder swapped for a link on the way fails
            except OSError:
                return None  # gone or replaced since the scan: the next upload looks again
            try:
                with storage_errors(target.url, action="write"):
                    dest.fs.makedirs(target.path.rpartition("/")[0], exist_ok=True)
                    # The file this process opened, whatever its path has become since.
                    dest.fs.put_file(f"/proc/self/fd/{fd}", target.path)
            finally:
                os.close(fd)
            sent[rel] = stamp
            return stamp[0]

        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                sizes = [n for n in pool.map(put, todo) if n is not None]
        finally:
            _keep(manifest_path, sent)
        return UploadReport(uploaded=len(sizes), unchanged=unchanged, bytes=sum(sizes))


def _files(folder: Path) -> list[tuple[str, os.stat_result]]:
    """The regular files under ``folder`` (relative names, sorted) with their status;
    none when ``folder`` itself is a link or gone. Walked by descriptor, links left out."""
    try:
        top = os.open(folder, _DIR_FLAGS)
    except OSError:
        return []
    found = []
    try:
        for dirpath, _dirs, names, dir_fd in os.fwalk(".", dir_fd=top):
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue  # removed since the listing
                if stat.S_ISREG(st.st_mode):
                    found.append((os.path.normpath(os.path.join(dirpath, name)), st))
    finally:
        os.close(top)
    return sorted(found, key=lambda item: item[0])


def _keep(manifest: Path, sent: dict[str, list[int]]) -> None:
    """Write the manifest afresh beside itself (a link planted in its place is replaced,
    never followed); its folder must not be a link either."""
    try:
        parent = os.open(manifest.parent, _DIR_FLAGS)
    except OSError:
        return  # the folder is gone or was swapped for a link: the next upload resends
    os.close(parent)
    tmp = manifest.with_name(f".{manifest.name}.tmp")
    write_new(tmp, json.dumps(sent, sort_keys=True).encode(), 0o644)
    os.replace(tmp, manifest)
