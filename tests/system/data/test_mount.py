"""The read-only FUSE mount: real mounts served by forked children, real readers.

The store is a local folder behind ``CountingFS``, which logs every download so a test
counts them; one test mounts an Azurite container through adlfs.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from fsspec.implementations.local import LocalFileSystem

import servers
from phalanx.errors import PhalanxError
from phalanx.storage import mount as mount_module
from phalanx.storage.cache import NodeCache
from phalanx.storage.location import Location
from phalanx.storage.mount import MountHandle, cleanup_stale, fuse_available, start_mount

FILES = {
    "a.txt": b"alpha\n",
    "sub/b.bin": os.urandom(300_000),
    "sub/deeper/c.txt": b"c" * 10,
    "sub/deeper/empty.txt": b"",
    "big.bin": os.urandom(5_000_000),
}


class CountingFS(LocalFileSystem):
    """The local file system, logging each download (``get_file``) to ``log``."""

    def __init__(self, log: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.log = Path(log)

    def get_file(self, path1: str, path2: str, callback: Any = None, **kwargs: Any) -> None:
        with self.log.open("a") as f:
            f.write(f"{path1}\n")
        super().get_file(path1, path2, callback=callback, **kwargs)


@dataclass
class Mounted:
    store: Path
    mnt: Path
    cache: NodeCache
    handle: MountHandle
    downloads: Path
    log: Path

    def fetched(self) -> list[str]:
        text = self.downloads.read_text() if self.downloads.exists() else ""
        return [line[len(str(self.store)) + 1 :] for line in text.splitlines()]


def in_mount_table(path: Path) -> bool:
    with open("/proc/self/mountinfo") as table:
        return any(line.split()[4] == str(path) for line in table)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def make_store(root: Path) -> Path:
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty").mkdir()
    return root


def tree(root: Path) -> tuple[dict[str, int], set[str]]:
    files, dirs = {}, set()
    for top, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(top, root)
        dirs.update(os.path.normpath(os.path.join(rel, d)) for d in dirnames)
        for name in filenames:
            files[os.path.normpath(os.path.join(rel, name))] = Path(top, name).stat().st_size
    return files, dirs


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mounted]:
    store = make_store(tmp_path / "store")
    downloads, log, mnt = tmp_path / "downloads.log", tmp_path / "mount.log", tmp_path / "mnt"
    loc = Location(CountingFS(str(downloads)), str(store), f"file://{store}")
    cache = NodeCache(tmp_path / "cache")
    handle = start_mount(loc, mnt, cache, log_path=log)
    try:
        yield Mounted(store, mnt, cache, handle, downloads, log)
    finally:
        handle.unmount()
    assert not in_mount_table(mnt) and not os.path.ismount(mnt)
    assert handle.process.exitcode is not None


def test_fuse_available_here() -> None:
    assert fuse_available() is None


def test_listing_matches_the_store_without_downloading(mounted: Mounted) -> None:
    assert tree(mounted.mnt) == tree(mounted.store)
    st, remote = os.stat(mounted.mnt / "sub/b.bin"), os.stat(mounted.store / "sub/b.bin")
    assert abs(st.st_mtime - remote.st_mtime) < 1e-3
    assert st.st_mode & 0o777 == 0o444 and os.stat(mounted.mnt / "sub").st_mode & 0o777 == 0o555
    assert mounted.fetched() == []
    assert mounted.cache.usage().entries == 0
    mounted.handle.unmount()
    assert mounted.handle.process.exitcode == 0  # ended by the unmount, not by a signal


def test_first_read_fetches_that_file_once(mounted: Mounted) -> None:
    assert (mounted.mnt / "sub/b.bin").read_bytes() == FILES["sub/b.bin"]
    usage = mounted.cache.usage()
    assert (usage.entries, usage.bytes) == (1, len(FILES["sub/b.bin"]))
    with (mounted.mnt / "sub/b.bin").open("rb") as f:
        assert mounted.cache.usage().pinned == 1  # pinned while open
        f.seek(123_456)
        assert f.read(1000) == FILES["sub/b.bin"][123_456:124_456]
    wait_for(lambda: mounted.cache.usage().pinned == 0, "the pin to go with the last handle")
    assert (mounted.mnt / "sub/deeper/empty.txt").read_bytes() == b""
    assert mounted.fetched() == ["sub/b.bin", "sub/deeper/empty.txt"]


def test_writes_are_refused_and_unknown_names_missing(mounted: Mounted) -> None:
    mnt = mounted.mnt
    attempts: list[Callable[[], object]] = [
        lambda: (mnt / "new.txt").write_bytes(b"x"),
        lambda: open(mnt / "a.txt", "r+b"),  # noqa: SIM115
        lambda: open(mnt / "a.txt", "ab"),  # noqa: SIM115
        lambda: (mnt / "a.txt").unlink(),
        lambda: (mnt / "newdir").mkdir(),
        lambda: (mnt / "sub").rmdir(),
        lambda: os.rename(mnt / "a.txt", mnt / "b.txt"),
        lambda: os.chmod(mnt / "a.txt", 0o777),
        lambda: os.truncate(mnt / "a.txt", 0),
        lambda: os.symlink("a.txt", mnt / "link"),
        lambda: os.utime(mnt / "a.txt"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EROFS, attempt
    with pytest.raises(FileNotFoundError):
        (mnt / "nope.txt").read_bytes()
    assert (mnt / "a.txt").read_bytes() == FILES["a.txt"]


def test_fetch_failure_reads_as_eio_and_logs_why(mounted: Mounted) -> None:
    (mounted.store / "a.txt").write_bytes(b"changed size after the listing")
    with pytest.raises(OSError) as info:
        (mounted.mnt / "a.txt").read_bytes()
    assert info.value.errno == errno.EIO
    [line] = mounted.log.read_text().splitlines()
    assert f"file://{mounted.store}: cannot read /a.txt (EIO)" in line and "expected 6" in line


def test_four_threads_read_one_file_correctly(mounted: Mounted) -> None:
    big, problems = FILES["big.bin"], []

    def reader(seed: int) -> None:
        with (mounted.mnt / "big.bin").open("rb") as f:
            for i in range(40):
                offset = (seed * 7919 + i * 104_729) * 13 % len(big)
                f.seek(offset)
                if f.read(65_536 + i * 1000) != big[offset : offset + 65_536 + i * 1000]:
                    problems.append((seed, offset))
        if (mounted.mnt / "big.bin").read_bytes() != big:
            problems.append((seed, "whole"))

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads) and problems == []
    assert mounted.fetched() == ["big.bin"]


def _read_all(mnt: str) -> None:
    ok = all(Path(mnt, rel).read_bytes() == data for rel, data in FILES.items())
    os._exit(0 if ok else 1)


def test_two_processes_read_concurrently(mounted: Mounted) -> None:
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_read_all, args=(str(mounted.mnt),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=20)
        if p.is_alive():  # hung: fail the test, leave nothing behind
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(mounted.fetched()) == sorted(FILES)


def test_unmount_after_the_server_is_killed(mounted: Mounted) -> None:
    assert (mounted.mnt / "a.txt").read_bytes() == FILES["a.txt"]
    assert mounted.handle.process.pid is not None
    os.kill(mounted.handle.process.pid, signal.SIGKILL)
    mounted.handle.unmount()
    assert not in_mount_table(mounted.mnt)
    assert mounted.handle.process.exitcode == -signal.SIGKILL


def test_busy_mount_is_unmounted_lazily(mounted: Mounted) -> None:
    with (mounted.mnt / "a.txt").open("rb"):
        started = time.monotonic()
        mounted.handle.unmount()
        assert not in_mount_table(mounted.mnt)
        assert time.monotonic() - started < 5


def test_cleanup_stale_removes_a_dead_mount(mounted: Mounted) -> None:
    # Kill libfuse's auto-unmount watcher first, so the mount really outlives its server.
    mnt, server = mounted.mnt, mounted.handle.process.pid
    watchers = [
        p for p in psutil.process_iter(["cmdline"]) if str(mnt) in " ".join(p.info["cmdline"] or [])
    ]
    assert watchers and server is not None
    for watcher in watchers:
        watcher.kill()
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: not mounted.handle.process.is_alive(), "the server to die")
    assert in_mount_table(mnt)
    with pytest.raises(OSError) as info:
        os.listdir(mnt)
    assert info.value.errno == errno.ENOTCONN
    with pytest.raises(PhalanxError, match="already a mount point"):
        start_mount(Location(LocalFileSystem(), str(mounted.store), "file://x"), mnt, mounted.cache)
    assert cleanup_stale(mnt) is True
    assert not in_mount_table(mnt) and os.listdir(mnt) == []
    assert cleanup_stale(mnt) is False


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    loc = Location(LocalFileSystem(), str(tmp_path / "nothing"), "file:///nothing")
    with pytest.raises(PhalanxError, match="file:///nothing not found"):
        start_mount(loc, tmp_path / "mnt", NodeCache(tmp_path / "cache"))
    assert not in_mount_table(tmp_path / "mnt")


def test_a_mount_that_fails_says_where_to_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(ops: object, mountpoint: Path) -> None:
        raise RuntimeError(3)  # what mfusepy raises when libfuse cannot mount

    monkeypatch.setattr(mount_module, "_serve", broken)  # the forked child inherits it
    store, log = make_store(tmp_path / "store"), tmp_path / "mount.log"
    loc = Location(LocalFileSystem(), str(store), f"file://{store}")
    with pytest.raises(PhalanxError, match=f"exited with code 1; see {log} for why"):
        start_mount(loc, tmp_path / "mnt", NodeCache(tmp_path / "cache"), log_path=log)
    assert "libfuse exited with 3" in log.read_text()


def test_azure_container_folder(tmp_path: Path, azurite: servers.Azurite) -> None:
    from adlfs import AzureBlobFileSystem

    files = {"ds/x.txt": b"from azure", "ds/deep/y.bin": os.urandom(200_000), "other.txt": b"-"}
    azurite.container("mountdata")
    azurite.upload("mountdata", files)
    fs = AzureBlobFileSystem(connection_string=azurite.connection_string)
    loc = Location(fs, "mountdata/ds", f"az://{servers.AZURITE_ACCOUNT}/mountdata/ds")
    cache, mnt = NodeCache(tmp_path / "cache"), tmp_path / "mnt"
    with start_mount(loc, mnt, cache, log_path=tmp_path / "mount.log"):
        assert tree(mnt) == ({"x.txt": 10, "deep/y.bin": 200_000}, {"deep"})
        assert cache.usage().entries == 0
        assert (mnt / "deep/y.bin").read_bytes() == files["ds/deep/y.bin"]
        assert (mnt / "deep/y.bin").read_bytes() == files["ds/deep/y.bin"]
        assert cache.usage().entries == 1
    assert not in_mount_table(mnt)
