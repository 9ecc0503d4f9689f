"""Copying a local folder to a datastore, sending only what changed since the last copy."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

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
            sent: dict[str, list[int]] = json.loads(manifest_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            sent = {}
        todo: list[tuple[str, Path, list[int]]] = []
        unchanged = 0
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.name == MANIFEST:
                continue
            rel = path.relative_to(folder).as_posix()
            # Work in progress (a checkpoint's .tmp-* staging folder, a writer's .tmp file).
            if any(part.startswith(".tmp") for part in rel.split("/")):
                continue
            st = path.stat()
            stamp = [st.st_size, st.st_mtime_ns]
            if sent.get(rel) == stamp:
                unchanged += 1
            else:
                todo.append((rel, path, stamp))

        def put(item: tuple[str, Path, list[int]]) -> int:
            rel, path, stamp = item
            target = dest.child(rel)
            with storage_errors(target.url, action="write"):
                dest.fs.makedirs(target.path.rpartition("/")[0], exist_ok=True)
                dest.fs.put_file(str(path), target.path)
            sent[rel] = stamp
            return stamp[0]

        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                sizes = list(pool.map(put, todo))
        finally:
            tmp = manifest_path.with_name(f".{MANIFEST}.tmp")
            tmp.write_text(json.dumps(sent, sort_keys=True))
            os.replace(tmp, manifest_path)
        return UploadReport(uploaded=len(sizes), unchanged=unchanged, bytes=sum(sizes))
