"""The node cache and folder downloads, with local folders as the store and real processes.

``StoreFS`` is the local file system dressed as a datastore: it logs every download (so a
test counts them), and can be slow, flaky, or wait until several downloads run at once.
Children are forked, as DataLoader workers are; every child is checked for a clean exit.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

from phalanx.errors import PhalanxError
from phalanx.storage import transfer
from phalanx.storage.cache import NodeCache, parse_size
from phalanx.storage.location import Location, local
from phalanx.storage.transfer import fetch_folder

CTX = mp.get_context("fork")


class StoreFS(LocalFileSystem):
    """A local file system that logs each download; optionally slow, failing, or meeting.

    Args:
        log: File that gets one line per ``get_file`` call.
        delay: Seconds each download takes.
        fail: The first ``fail`` downloads raise ConnectionError.
        meet: Each download waits until this many downloads have started (or fails).
    """

    def __init__(
        self, log: str, delay: float = 0.0, fail: int = 0, meet: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.log, self.delay, self.fail, self.meet = Path(log), delay, fail, meet

    def get_file(self, path1: str, path2: str, callback: Any = None, **kwargs: Any) -> None:
        with self.log.open("a") as f:
            f.write(f"{path1}\n")
        if _count(self.log) <= self.fail:
            raise ConnectionError("connection reset by peer (test)")
        deadline = time.monotonic() + 10
        while _count(self.log) < self.meet:
            assert time.monotonic() < deadline, "downloads did not run at the same time"
            time.sleep(0.01)
        time.sleep(self.delay)
        super().get_file(path1, path2, callback=callback, **kwargs)


def _count(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def store(tmp_path: Path) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    return folder


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "downloads.log"


def put(store: Path, name: str, data: bytes) -> Path:
    path = store / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def at(path: Path, log: Path, **fs_options: Any) -> Location:
    """``path`` as a location on a StoreFS logging to ``log``."""
    return Location(StoreFS(str(log), **fs_options), str(path), f"file://{path}")


def entry_folder(cache: NodeCache, loc: Location) -> Path:
    digest = hashlib.sha256(loc.url.encode()).hexdigest()
    return cache.root / digest[:2] / digest


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def child(target: Callable[..., None], *args: Any) -> Iterator[BaseProcess]:
    """A forked process running ``target(*args)``; killed on the way out if still alive."""
    proc = CTX.Process(target=target, args=args, daemon=True)
    proc.start()
    try:
        yield proc
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)


def _pin_until(root: str, loc: Location, ready: Any, release: Any) -> None:
    with NodeCache(Path(root)).pinned(loc):
        ready.set()
        release.wait(30)


def _fetch_into(root: str, loc: Location, out: Any) -> None:
    path = NodeCache(Path(root)).fetch(loc)
    out.put((str(path), sha(path.read_bytes())))


# -- fetch and integrity ---------------------------------------------------------------------


def test_second_fetch_is_a_hit(tmp_path: Path, store: Path, log: Path) -> None:
    data = os.urandom(1000)
    loc = at(put(store, "train-000.tar", data), log)
    cache = NodeCache(tmp_path / "cache")
    path = cache.fetch(loc)
    assert path.read_bytes() == data
    assert path.name == "train-000.tar"
    assert cache.fetch(loc) == path
    assert cache.fetch(loc, size=1000, etag_check=False) == path
    assert _count(log) == 1
    assert cache.usage().entries == 1 and cache.usage().bytes == 1000


def test_changed_remote_is_fetched_again(tmp_path: Path, store: Path, log: Path) -> None:
    remote = put(store, "a.bin", b"old content")
    loc = at(remote, log)
    cache = NodeCache(tmp_path / "cache")
    cache.fetch(loc)
    remote.write_bytes(b"new content")  # same size: only the identity (mtime) tells
    later = remote.stat().st_mtime_ns + 5_000_000_000
    os.utime(remote, ns=(later, later))
    assert cache.fetch(loc).read_bytes() == b"new content"
    assert _count(log) == 2


def test_truncated_copy_is_fetched_again(tmp_path: Path, store: Path, log: Path) -> None:
    data = os.urandom(4096)
    loc = at(put(store, "a.bin", data), log)
    cache = NodeCache(tmp_path / "cache")
    path = cache.fetch(loc, etag_check=False)
    with path.open("r+b") as f:
        f.truncate(100)
    assert cache.fetch(loc, etag_check=False).read_bytes() == data
    assert _count(log) == 2


def test_corrupted_copy_is_caught_by_sha256(tmp_path: Path, store: Path, log: Path) -> None:
    data = os.urandom(4096)
    loc = at(put(store, "a.bin", data), log)
    cache = NodeCache(tmp_path / "cache")
    path = cache.fetch(loc, sha256=sha(data))

    def corrupt(keep_mtime: bool) -> None:
        before = path.stat()
        with path.open("r+b") as f:
            f.write(bytes([data[0] ^ 0xFF]))
        if keep_mtime:  # bit rot: nothing in the stamp changes
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    corrupt(keep_mtime=False)
    assert cache.fetch(loc, sha256=sha(data)).read_bytes() == data
    assert _count(log) == 2
    corrupt(keep_mtime=True)
    # A hit trusts the stamp (no re-hash of big files on every fetch); verify=True does not.
    assert cache.fetch(loc, sha256=sha(data)).read_bytes() != data
    assert cache.fetch(loc, sha256=sha(data), verify=True).read_bytes() == data
    assert _count(log) == 3


def test_sha256_mismatch_on_the_store(tmp_path: Path, store: Path, log: Path) -> None:
    loc = at(put(store, "a.bin", b"what the store has"), log)
    cache = NodeCache(tmp_path / "cache")
    with pytest.raises(PhalanxError, match=r"a\.bin: downloaded twice and the sha256") as err:
        cache.fetch(loc, sha256=sha(b"what the manifest says"))
    assert loc.url in str(err.value) and "\n" not in str(err.value)
    assert _count(log) == 2
    assert os.listdir(entry_folder(cache, loc)) == ["_lock"]  # no copy, no temp file
    assert cache.usage().bytes == 0


def test_missing_and_flaky_remotes(
    tmp_path: Path, store: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "RETRY_BASE_DELAY", 0.001)
    cache = NodeCache(tmp_path / "cache")
    with pytest.raises(PhalanxError, match=r"missing\.bin not found"):
        cache.fetch(at(store / "missing.bin", log))
    with pytest.raises(PhalanxError, match=r"short\.bin is 5 bytes on the store, expected 6"):
        cache.fetch(at(put(store, "short.bin", b"12345"), log), size=6, etag_check=False)
    flaky = at(put(store, "flaky.bin", b"x" * 10), log, fail=2)
    assert cache.fetch(flaky).read_bytes() == b"x" * 10
    assert _count(log) == 3
    down = at(put(store, "down.bin", b"y"), tmp_path / "down.log", fail=99)
    with pytest.raises(PhalanxError, match=r"down\.bin: the storage endpoint cannot be reached"):
        cache.fetch(down)
    assert _count(tmp_path / "down.log") == transfer.RETRY_ATTEMPTS


# -- eviction and pins -----------------------------------------------------------------------


def test_eviction_is_least_recently_used(tmp_path: Path, store: Path, log: Path) -> None:
    cache = NodeCache(tmp_path / "cache", max_bytes=300)
    locs = {name: at(put(store, name, os.urandom(100)), log) for name in "abcd"}
    paths = {name: cache.fetch(locs[name]) for name in "abc"}
    cache.fetch(locs["a"])  # a is now more recent than b
    paths["d"] = cache.fetch(locs["d"])
    assert {n for n, p in paths.items() if p.exists()} == {"a", "c", "d"}
    assert not entry_folder(cache, locs["b"]).exists()
    usage = cache.usage()
    assert (usage.entries, usage.bytes, usage.max_bytes) == (3, 300, 300)
    assert cache.evict(150) == 200  # room for 150 more under the cap: the two oldest go
    assert [n for n, p in paths.items() if p.exists()] == ["d"]
    assert cache.evict(150) == 0


def test_pin_of_another_process(tmp_path: Path, store: Path, log: Path) -> None:
    root = tmp_path / "cache"
    cache = NodeCache(root, max_bytes=200)
    a, b, c, d = (at(put(store, n, os.urandom(100)), log) for n in "abcd")
    ready, release = CTX.Event(), CTX.Event()
    with child(_pin_until, str(root), a, ready, release) as pinner:
        assert ready.wait(10)
        cache.fetch(b)
        cache.fetch(c)  # a is least recently used, but pinned: b goes
        assert cache.fetch(a, etag_check=False).exists()
        assert not entry_folder(cache, b).exists()
        assert cache.usage().pinned == 1
        small = NodeCache(root, max_bytes=100)
        with pytest.raises(
            PhalanxError, match=r"cannot hold .*d .*pinned.*raise PHALANX_CACHE_MAX"
        ):
            small.fetch(d)  # would need a evicted too
        pinner.kill()  # SIGKILL: no cleanup runs, yet the pin goes with the process
        pinner.join(10)
        assert pinner.exitcode == -signal.SIGKILL
        assert small.fetch(d).exists()
    assert not entry_folder(cache, a).exists()
    assert small.usage().entries == 1


def test_cap_too_small(tmp_path: Path, store: Path, log: Path) -> None:
    big = at(put(store, "big.bin", os.urandom(500)), log)
    with pytest.raises(
        PhalanxError, match=r"cap 100 B\) cannot hold .*big\.bin \(500 B\): it .*MAX"
    ):
        NodeCache(tmp_path / "cache", max_bytes=100).fetch(big)
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(PhalanxError, match=r"must stay free; free disk .*_CACHE_MIN_FREE$"):
        NodeCache(tmp_path / "cache", min_free_bytes=free + 10**15).fetch(big)
    assert _count(log) == 0


def test_clear_keeps_pinned_entries(tmp_path: Path, store: Path, log: Path) -> None:
    cache = NodeCache(tmp_path / "cache")
    a = at(put(store, "a", os.urandom(100)), log)
    b = at(put(store, "b", os.urandom(250)), log)
    cache.fetch(b)
    other = put(cache.root / "downloads", "kept.bin", b"not an entry")  # jobs' folders live here
    with cache.pinned(a) as path:
        assert cache.clear() == 250
        assert path.exists() and cache.usage().entries == 1
    assert cache.clear() == 100
    assert cache.usage().entries == 0
    assert not any(entry_folder(cache, loc).exists() for loc in (a, b))
    assert other.read_bytes() == b"not an entry"


# -- several processes -----------------------------------------------------------------------


def test_one_download_for_two_processes(tmp_path: Path, store: Path, log: Path) -> None:
    data = os.urandom(10_000)
    loc = at(put(store, "shared.bin", data), log, delay=0.5)
    out = CTX.Queue()
    with child(_fetch_into, str(tmp_path / "cache"), loc, out) as one:
        with child(_fetch_into, str(tmp_path / "cache"), loc, out) as two:
            results = [out.get(timeout=20), out.get(timeout=20)]
            two.join(10)
        one.join(10)
    assert (one.exitcode, two.exitcode) == (0, 0)
    assert results[0] == results[1]
    assert results[0][1] == sha(data)
    assert _count(log) == 1


def test_different_entries_download_in_parallel(tmp_path: Path, store: Path, log: Path) -> None:
    # Each download waits for the other to start: a cache serialising them would time out.
    x = at(put(store, "x", b"x" * 100), log, meet=2)
    y = at(put(store, "y", b"y" * 100), log, meet=2)
    out = CTX.Queue()
    with child(_fetch_into, str(tmp_path / "cache"), x, out) as one:
        with child(_fetch_into, str(tmp_path / "cache"), y, out) as two:
            two.join(15)
        one.join(15)
    assert (one.exitcode, two.exitcode) == (0, 0)
    assert _count(log) == 2


def test_killed_download_and_lock_timeout(tmp_path: Path, store: Path, log: Path) -> None:
    root = tmp_path / "cache"
    data = os.urandom(1000)
    path = put(store, "slow.bin", data)
    slow = at(path, log, delay=30)
    folder = entry_folder(NodeCache(root), slow)
    with child(_fetch_into, str(root), slow, CTX.Queue()) as writer:
        deadline = time.monotonic() + 10
        while not (folder.exists() and any(n.startswith("_tmp") for n in os.listdir(folder))):
            assert time.monotonic() < deadline, "the child never started its download"
            time.sleep(0.01)
        impatient = NodeCache(root, lock_timeout=0.2)
        with pytest.raises(PhalanxError, match=r"timed out after 0.2 s .*LOCK_TIMEOUT"):
            impatient.fetch(at(path, tmp_path / "other.log"))
        writer.kill()
        writer.join(10)
    # The killed writer left a temp file and no copy; the next fetch cleans up and downloads.
    assert not (folder / "slow.bin").exists()
    fresh = NodeCache(root).fetch(at(path, tmp_path / "other.log"))
    assert fresh.read_bytes() == data
    assert sorted(os.listdir(folder)) == ["_lock", "_meta.json", "slow.bin"]


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1048576),
        ("500M", 500_000_000),
        ("20G", 20_000_000_000),
        ("1.5GB", 1_500_000_000),
        ("10GiB", 10 * 2**30),
        (" 512 kb ", 512_000),
        ("2Ki", 2048),
        ("0", 0),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1G", "10X", "1.5.5G", "GiB", "1 iB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = NodeCache.from_env(
        {
            "PHALANX_CACHE_DIR": str(tmp_path / "c"),
            "PHALANX_CACHE_MAX": "1.5G",
            "PHALANX_CACHE_MIN_FREE": "500M",
            "PHALANX_CACHE_LOCK_TIMEOUT": "30",
        }
    )
    assert cache.root == (tmp_path / "c").resolve() and cache.root.is_dir()
    assert (cache.max_bytes, cache.min_free_bytes, cache.lock_timeout) == (1.5e9, 5e8, 30)
    home = NodeCache.from_env({"PHALANX_HOME": str(tmp_path / "h"), "PHALANX_CACHE_MAX": ""})
    assert home.root == (tmp_path / "h" / "cache").resolve() and home.max_bytes is None
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert NodeCache.from_env({}).root == (tmp_path / "user" / ".phalanx" / "cache").resolve()
    with pytest.raises(PhalanxError, match=r"^PHALANX_CACHE_MAX='lots': 'lots' is not a size"):
        NodeCache.from_env({"PHALANX_CACHE_DIR": str(tmp_path), "PHALANX_CACHE_MAX": "lots"})
    with pytest.raises(PhalanxError, match=r"^PHALANX_CACHE_LOCK_TIMEOUT='0'"):
        NodeCache.from_env({"PHALANX_CACHE_DIR": str(tmp_path), "PHALANX_CACHE_LOCK_TIMEOUT": "0"})


# -- folder downloads ------------------------------------------------------------------------


def test_fetch_folder(tmp_path: Path, store: Path) -> None:
    files = {"a.txt": b"alpha", "sub/b.bin": os.urandom(3000), "sub/deeper/c": b"c" * 10}
    for name, data in files.items():
        put(store, name, data)
    dest = tmp_path / "dest"
    calls: list[tuple[int, int]] = []
    first = fetch_folder(local(str(store)), dest, workers=3, progress=lambda *a: calls.append(a))
    assert (first.downloaded, first.skipped, first.bytes) == (3, 0, 3015)
    assert {n: (dest / n).read_bytes() for n in files} == files
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]

    again = fetch_folder(local(str(store)), dest)
    assert (again.downloaded, again.skipped, again.bytes) == (0, 3, 0)

    put(store, "sub/b.bin", b"changed on the store")
    (dest / "sub/deeper/c").write_bytes(b"edited locally")
    third = fetch_folder(local(str(store)), dest)
    assert (third.downloaded, third.skipped) == (2, 1)
    assert (dest / "sub/b.bin").read_bytes() == b"changed on the store"
    assert (dest / "sub/deeper/c").read_bytes() == b"c" * 10
    assert not [p for p in dest.rglob("*") if "phalanx-tmp" in p.name]

    # Deleted on the store: deleted from the copy; a file the copy got elsewhere stays.
    (store / "a.txt").unlink()
    (dest / "mine.txt").write_bytes(b"not from the store")
    fourth = fetch_folder(local(str(store)), dest)
    assert (fourth.downloaded, fourth.skipped) == (0, 2)
    assert not (dest / "a.txt").exists() and (dest / "mine.txt").exists()

    put(store, "a.txt", b"alpha")
    single = fetch_folder(local(str(store / "a.txt")), tmp_path / "one")
    assert single.downloaded == 1 and (tmp_path / "one" / "a.txt").read_bytes() == b"alpha"
    with pytest.raises(PhalanxError, match=r"file://.*/nowhere not found"):
        fetch_folder(local(str(tmp_path / "nowhere")), tmp_path / "dest2")
