"""The read-write FUSE mount: real mounts served by forked children, real writers.

The store is a local folder behind ``StoreFS``, which logs every download and refuses to
upload files named ``*.refused``; one test writes through a mount of an Azurite container.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import servers
from phalanx.errors import PhalanxError
from phalanx.storage.location import Location
from phalanx.storage.rwmount import RwMountHandle, start_rw_mount
from test_mount import CountingFS, in_mount_table

FILES = {"a.txt": b"alpha\n", "sub/b.bin": os.urandom(300_000), "sub/deeper/c.txt": b"c" * 10}


class StoreFS(CountingFS):
    """test_mount's counting file system, also refusing uploads of ``*.refused``."""

    def put_file(self, path1: str, path2: str, callback: Any = None, **kwargs: Any) -> None:
        if path2.endswith(".refused"):
            raise PermissionError(errno.EACCES, "refused by the test store", path2)
        super().put_file(path1, path2, callback=callback, **kwargs)


@dataclass
class Mounted:
    store: Path
    mnt: Path
    staging: Path
    handle: RwMountHandle
    downloads: Path
    log: Path

    def fetched(self) -> list[str]:
        text = self.downloads.read_text() if self.downloads.exists() else ""
        return [line[len(str(self.store)) + 1 :] for line in text.splitlines()]


def sizes(root: Path) -> set[tuple[str, int]]:
    return {(p.relative_to(root).as_posix(), p.stat().st_size) for p in root.rglob("*")}


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (``None``) under ``root``."""
    found: dict[str, bytes | None] = {}
    for top, dirnames, filenames in os.walk(root):
        rel = Path(top).relative_to(root)
        found.update({(rel / d).as_posix(): None for d in dirnames})
        found.update({(rel / f).as_posix(): Path(top, f).read_bytes() for f in filenames})
    return found


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mounted]:
    store, mnt, staging = tmp_path / "store", tmp_path / "mnt", tmp_path / "staging"
    for rel, data in FILES.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_bytes(data)
    downloads, log = tmp_path / "downloads.log", tmp_path / "mount.log"
    loc = Location(StoreFS(str(downloads)), str(store), f"file://{store}")
    handle = start_rw_mount(loc, mnt, staging, log_path=log)
    try:
        yield Mounted(store, mnt, staging, handle, downloads, log)
    finally:
        try:
            handle.unmount()
        finally:
            assert not in_mount_table(mnt) and not os.path.ismount(mnt)
    assert handle.process.exitcode is not None


def test_new_nested_file_is_uploaded_when_closed(mounted: Mounted) -> None:
    assert sizes(mounted.mnt) == sizes(mounted.store)
    assert mounted.fetched() == []  # listing and stat read nothing
    assert tree(mounted.mnt) == tree(mounted.store)
    (mounted.mnt / "new/deep").mkdir(parents=True)
    data = os.urandom(1_000_000)
    with (mounted.mnt / "new/deep/x.bin").open("wb") as f:
        f.write(data[:400_000])
        f.flush()
        assert not (mounted.store / "new/deep/x.bin").exists()  # not before the close
        f.write(data[400_000:])
    assert (mounted.store / "new/deep/x.bin").read_bytes() == data  # before any unmount
    assert (mounted.mnt / "new/deep/x.bin").read_bytes() == data
    assert os.stat(mounted.mnt / "new/deep/x.bin").st_size == len(data)
    (mounted.mnt / "empty.txt").touch()
    assert (mounted.store / "empty.txt").read_bytes() == b""
    with (mounted.mnt / "synced.txt").open("wb") as f:
        f.write(b"synced")
        f.flush()
        os.fsync(f.fileno())
        assert (mounted.store / "synced.txt").read_bytes() == b"synced"
    mounted.handle.unmount()
    assert mounted.handle.process.exitcode == 0
    assert list(mounted.staging.iterdir()) == []


def test_overwrite_downloads_nothing_and_append_reads_first(mounted: Mounted) -> None:
    (mounted.mnt / "sub/b.bin").write_bytes(b"replaced")
    assert (mounted.store / "sub/b.bin").read_bytes() == b"replaced"
    assert mounted.fetched() == []
    with (mounted.mnt / "a.txt").open("ab") as f:
        f.write(b"beta\n")
    assert (mounted.store / "a.txt").read_bytes() == b"alpha\nbeta\n"
    with (mounted.mnt / "sub/deeper/c.txt").open("r+b") as f:
        f.seek(2)
        f.write(b"XY")
    assert (mounted.store / "sub/deeper/c.txt").read_bytes() == b"ccXYcccccc"
    os.truncate(mounted.mnt / "a.txt", 3)  # no close follows: uploaded at once
    assert (mounted.store / "a.txt").read_bytes() == b"alp"
    assert mounted.fetched() == ["a.txt", "sub/deeper/c.txt", "a.txt"]  # evicted once closed
    assert list(mounted.staging.glob("*/data/*")) == []  # copies go once closed and uploaded
    assert os.stat(mounted.mnt / "a.txt").st_size == 3
    assert (mounted.mnt / "sub/deeper/c.txt").read_bytes() == b"ccXYcccccc"


def test_rename_unlink_mkdir_and_rmdir_reach_the_store(mounted: Mounted) -> None:
    mnt, store = mounted.mnt, mounted.store
    os.rename(mnt / "a.txt", mnt / "sub/a2.txt")
    os.rename(mnt / "sub", mnt / "moved")
    (mnt / "moved/deeper/c.txt").unlink()
    (mnt / "made").mkdir()
    assert (store / "made").is_dir()
    (mnt / "made/inside.txt").write_bytes(b"inside")
    (mnt / "gone").mkdir()
    (mnt / "gone").rmdir()
    (mnt / "tmp.txt").write_bytes(b"final")  # the write-then-rename pattern of checkpoints
    os.replace(mnt / "tmp.txt", mnt / "moved/b.bin")
    expected = {
        "made": None, "made/inside.txt": b"inside", "moved": None, "moved/a2.txt": b"alpha\n",
        "moved/b.bin": b"final", "moved/deeper": None,
    }  # fmt: skip
    assert tree(store) == expected
    assert mounted.fetched() == []  # moved on the store, not through this machine
    assert tree(mnt) == expected


def test_a_failed_upload_fails_close_and_is_named_at_unmount(mounted: Mounted) -> None:
    f = (mounted.mnt / "x.refused").open("wb")
    f.write(b"kept")
    with pytest.raises(OSError) as info:
        f.close()
    assert info.value.errno == errno.EIO
    [line] = [ln for ln in mounted.log.read_text().splitlines() if "x.refused" in ln]
    assert "cannot upload /x.refused (EIO)" in line and "access denied" in line
    (mounted.mnt / "ok.txt").write_bytes(b"fine")
    with pytest.raises(PhalanxError, match=r"1 file\(s\) not uploaded: /x.refused") as err:
        mounted.handle.unmount()
    assert not in_mount_table(mounted.mnt)
    work = Path(str(err.value).rsplit(" ", 1)[1])
    [marker] = work.glob("pending/*")  # names the file whose bytes are data/<same name>
    assert (
        marker.read_text() == "/x.refused" and (work / "data" / marker.name).read_bytes() == b"kept"
    )
    assert (mounted.store / "ok.txt").read_bytes() == b"fine"
    assert not (mounted.store / "x.refused").exists()


def _write(path: str, seed: int) -> None:
    with open(path, "wb") as f:
        for i in range(40):
            f.write(bytes([seed + i % 7]) * 50_000)
    os._exit(0)


def test_two_processes_write_concurrently(mounted: Mounted) -> None:
    ctx = mp.get_context("fork")
    names = [str(mounted.mnt / f"rank{n}.bin") for n in range(2)]
    procs = [ctx.Process(target=_write, args=(name, n * 10)) for n, name in enumerate(names)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=20)
        if p.is_alive():  # hung: fail the test, leave nothing behind
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    for n in range(2):
        expected = b"".join(bytes([n * 10 + i % 7]) * 50_000 for i in range(40))
        assert (mounted.store / f"rank{n}.bin").read_bytes() == expected


def test_a_file_open_at_unmount_is_uploaded_by_unmount(mounted: Mounted) -> None:
    fd = os.open(mounted.mnt / "open.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"written, never closed")
        assert not (mounted.store / "open.txt").exists()
        mounted.handle.unmount()  # busy: unmounted lazily, after the upload
        assert (mounted.store / "open.txt").read_bytes() == b"written, never closed"
        assert not in_mount_table(mounted.mnt)
    finally:
        try:
            os.close(fd)
        except OSError as exc:  # its server is gone
            assert exc.errno == errno.ENOTCONN


def test_unmount_after_the_server_is_killed(mounted: Mounted) -> None:
    (mounted.mnt / "done.txt").write_bytes(b"closed before the kill")
    fd = os.open(mounted.mnt / "half.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"half")
    assert mounted.handle.process.pid is not None
    os.kill(mounted.handle.process.pid, signal.SIGKILL)
    with pytest.raises(PhalanxError, match=r"not uploaded: /half.txt \(its FUSE server died"):
        mounted.handle.unmount()
    assert not in_mount_table(mounted.mnt)
    assert mounted.handle.process.exitcode == -signal.SIGKILL
    assert (mounted.store / "done.txt").read_bytes() == b"closed before the kill"
    assert not (mounted.store / "half.txt").exists()
    try:
        os.close(fd)
    except OSError as exc:
        assert exc.errno == errno.ENOTCONN


def test_azure_container_folder(tmp_path: Path, azurite: servers.Azurite) -> None:
    from adlfs import AzureBlobFileSystem
    from azure.storage.blob import BlobServiceClient

    container = f"rw{uuid.uuid4().hex[:10]}"
    azurite.container(container)
    azurite.upload(container, {"out/old.txt": b"old", "out/keep/k.txt": b"k"})
    fs = AzureBlobFileSystem(connection_string=azurite.connection_string)
    loc = Location(fs, f"{container}/out", f"az://{servers.AZURITE_ACCOUNT}/{container}/out")
    mnt, data = tmp_path / "mnt", os.urandom(3_000_000)
    with start_rw_mount(loc, mnt, tmp_path / "staging", log_path=tmp_path / "mount.log"):
        assert sorted(os.listdir(mnt)) == ["keep", "old.txt"]
        (mnt / "ckpt").mkdir()
        (mnt / "ckpt/model.bin").write_bytes(data)
        with (mnt / "old.txt").open("ab") as f:
            f.write(b"+new")
        os.rename(mnt / "keep/k.txt", mnt / "k2.txt")
    assert not in_mount_table(mnt)
    client = BlobServiceClient.from_connection_string(azurite.connection_string)
    blobs = client.get_container_client(container)
    assert sorted(b.name for b in blobs.list_blobs()) == [
        "out/ckpt/model.bin", "out/k2.txt", "out/old.txt",
    ]  # fmt: skip
    assert blobs.download_blob("out/ckpt/model.bin").readall() == data
    assert blobs.download_blob("out/old.txt").readall() == b"old+new"
