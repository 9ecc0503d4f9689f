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
"""Kept in the local folder: what was sent, by size and modification time."""


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


def upload_folder(folder: Path, dest: Location, *, workers: int = 8) -> UploadReport:
    """Send every file under ``folder`` that is new or changed to ``dest``, keeping the layout.

    Each object is written whole by the store (a reader sees the old or the new
    file, never part of one). Files still being written may be sent again by the
    next call, which sees their new size or time.

    Raises:
        PhalanxError: the store refuses or cannot be reached.
    """
    with _lock_for(folder):
        manifest_path = folder / MANIFEST
        try:
            sent: dict[str, list[int]] = json.loads(read_bytes(manifest_path))
        except (OSError, json.JSONDecodeError):
            sent = {}
        todo: list[tuple[str, list[int]]] = []
        unchanged = 0
        for path in sorted(folder.rglob("*")):
            # The folder may be a walled-off job's, read here as root: links are never
            # followed (a link to the server's secrets is not sent anywhere).
            try:
                st = path.lstat()
            except OSError:
                continue  # removed since the listing
            if not stat.S_ISREG(st.st_mode) or path.name == MANIFEST:
                continue
            rel = path.relative_to(folder).as_posix()
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
            tmp = manifest_path.with_name(f".{MANIFEST}.tmp")
            write_new(tmp, json.dumps(sent, sort_keys=True).encode(), 0o644)
            os.replace(tmp, manifest_path)
        return UploadReport(uploaded=len(sizes), unchanged=unchanged, bytes=sum(sizes))
