"""The node cache's on-disk pieces: entry folders, their metadata, locks and scans.

:class:`~phalanx.storage.cache.NodeCache` is built on these. An entry is a
folder ``<root>/<2 hex>/<sha256 of the URL>/`` holding the copy under its
remote file name, ``_meta.json`` (what it is a copy of, and the stamp it had
when last verified), ``_lock`` (held exclusively while a process checks or
downloads it), ``_pin`` (held shared by every reader) and, while downloading,
``_tmp.<bytes>.<id>``. Locks are ``flock``: they vanish with a killed process.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.storage.transfer import RemoteInfo

LOCK, PIN, META, LEDGER, TMP = "_lock", "_pin", "_meta.json", "_ledger.json", "_tmp"


@dataclass
class Ledger:
    """Bytes cached plus reserved by downloads in progress, and the reserved part alone."""

    bytes: int = 0
    pending: int = 0


@dataclass(frozen=True)
class Entry:
    """One entry folder as a scan found it."""

    folder: Path
    data: Path | None
    size: int
    reserved: int
    """Bytes announced by live downloads into the folder."""
    used_ns: int


@dataclass(frozen=True)
class Meta:
    url: str
    remote: RemoteInfo
    stamp: tuple[int, int, int]
    """Size, mtime_ns and inode of the copy when it was last verified."""
    sha256: str | None

    @classmethod
    def load(cls, folder: Path) -> Meta | None:
        try:
            raw = json.loads((folder / META).read_text())
            size, mtime_ns, ino = (int(x) for x in raw["stamp"])
            return cls(
                raw["url"], RemoteInfo(**raw["remote"]), (size, mtime_ns, ino), raw["sha256"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing or torn: the entry is simply not valid

    def save(self, folder: Path) -> None:
        body = {"url": self.url, "remote": self.remote.to_json(), "stamp": list(self.stamp)}
        write_json(folder / META, {**body, "sha256": self.sha256})
        touch(folder)


def acquire(path: Path, *, shared: bool, timeout: float) -> int | None:
    """An fd holding ``flock`` on ``path`` (created if missing), or ``None`` after ``timeout``.

    ``timeout=0`` tries once. An evictor deletes lock files while holding them, so a lock won
    on a file no longer at ``path`` is worthless: drop it and lock the new file.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            if timeout == 0:
                return None
            path.parent.mkdir(parents=True, exist_ok=True)  # evicted meanwhile: recreate
            continue
        try:
            while True:
                try:
                    fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        os.close(fd)
                        return None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
            held, now = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def remove_entry(folder: Path) -> bool:
    """Delete an entry unless it is pinned or locked; whether it was deleted."""
    lock = acquire(folder / LOCK, shared=False, timeout=0)
    if lock is None:
        return False
    try:
        pin = acquire(folder / PIN, shared=False, timeout=0)
        if pin is None:
            return False
        try:
            for name in os.listdir(folder):
                if name not in (LOCK, PIN):
                    (folder / name).unlink(missing_ok=True)
            # Unlinked while held: a waiter then finds its lock stale and starts over.
            (folder / PIN).unlink(missing_ok=True)
            (folder / LOCK).unlink(missing_ok=True)
            with suppress(OSError):  # someone just started a new entry here: leave it
                folder.rmdir()
        finally:
            os.close(pin)
    finally:
        os.close(lock)
    return True


def scan(root: Path) -> list[Entry]:
    """Every entry folder under ``root``, removing stale temp files on the way."""
    entries = []
    for shard in subdirs(root):
        if len(shard.name) != 2 or shard.name.strip("0123456789abcdef"):
            continue  # not a shard: jobs keep other folders here (downloads/)
        for folder in subdirs(shard):
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            data = next((folder / n for n in names if not n.startswith("_")), None)
            tmps = [n for n in names if n.startswith(TMP)]
            reserved = 0
            if tmps:
                fd = acquire(folder / LOCK, shared=False, timeout=0)
                if fd is None:  # a live download: count what it announced
                    reserved = sum(announced(n) for n in tmps)
                else:  # its writer died
                    for name in tmps:
                        (folder / name).unlink(missing_ok=True)
                    os.close(fd)
            size = used = 0
            with suppress(OSError):
                size = data.stat().st_size if data else 0
                used = (folder / META).stat().st_mtime_ns
            entries.append(Entry(folder, data, size, reserved, used))
    return entries


def subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as it:
            return [Path(e.path) for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def announced(tmp_name: str) -> int:
    parts = tmp_name.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def data_name(url: str) -> str:
    """The copy's file name: the remote base name, so extensions survive."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    name = name.encode()[-120:].decode(errors="ignore")  # within NAME_MAX, extension kept
    return f"data{name}" if not name or name.startswith("_") else name


def stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def touch(folder: Path) -> None:
    # An explicit time: the kernel's own "now" for mtime is coarse (jiffies), too coarse to
    # order accesses made milliseconds apart.
    now = time.time_ns()
    os.utime(folder / META, ns=(now, now))


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.part")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
