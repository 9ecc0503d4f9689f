"""A read-write FUSE mount of a datastore folder whose files are uploaded when closed (blobfuse).

The folder is listed at mount time; what the job creates appears as it is created. The first
``open`` of an existing file downloads it whole into the staging folder; writes go to that
staged copy. A file opened for writing is uploaded whole (``fs.put_file``) when closed or
``fsync``-ed: on an object store a reader sees the old object or the new one, never part of
one. A failed upload makes that ``close``/``fsync`` fail with ``EIO`` and logs one line saying
why. Once no handle is open on an uploaded file, its copy leaves the staging folder (a later
open downloads it again). ``unlink``, ``rename``, ``mkdir`` and ``rmdir`` reach the store at
once; there a rename is a copy and a delete per file, so renaming a folder is not atomic.
``chmod``, ``chown`` and ``utimens`` are accepted and ignored; links and xattrs are not
supported, nor is ``fstat`` of an unlinked open file (``ESTALE``; reads and writes work).
Files the store gains after mounting do not appear; two mounts writing one file: the last
close wins.

Consistency rule: a file is uploaded when it is closed; a file still open when the job ends
is uploaded by :meth:`RwMountHandle.unmount`, which uploads all that is not yet uploaded, then
unmounts, then names any file it could not upload. In the staging folder, ``pending/<n>``
names each such file and ``data/<n>`` keeps its bytes. If the server dies, what it had not
uploaded is named the same way, never uploaded (it may be half-written).
"""

from __future__ import annotations

import errno
import itertools
import logging
import multiprocessing
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, NoReturn

from phalanx.errors import PhalanxError
from phalanx.storage import mount
from phalanx.storage.location import Location
from phalanx.storage.redact import redact
from phalanx.storage.transfer import retrying

log = logging.getLogger(__name__)

_TIMEOUT = 1.0  # seconds the kernel may cache names and attributes; all changes pass through it
_SHOWN = 5  # files named in an unmount error before "and N more"


@dataclass(eq=False)
class _Entry:
    path: str
    is_dir: bool
    size: int = 0  # as listed; a staged copy knows its own
    mtime_ns: int = 0
    remote: bool = False  # the store holds it
    staged: Path | None = None  # the local copy, once downloaded or written
    version: int = 0  # bumped by every change to the staged copy
    uploaded: int = 0  # the version the store holds
    deleted: bool = False
    children: dict[str, _Entry] = field(default_factory=dict)
    # Held while downloading or uploading, and by unlink and rename: an upload must never
    # land at a path the file has just left.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def dirty(self) -> bool:
        return self.version != self.uploaded


class ReadWriteMount:
    """The operations of one read-write mount, as mfusepy calls them; lists ``loc`` when built.

    Args:
        loc: The remote folder; missing is fine (the first upload makes it).
        work: An empty folder for staged copies and the record of pending uploads.

    Raises:
        PhalanxError: The folder is a file or cannot be listed.
    """

    use_ns = True  # times in integer nanoseconds

    def __init__(self, loc: Location, work: Path) -> None:
        self.loc, self.work = loc, work
        (work / "data").mkdir()
        (work / "pending").mkdir()
        self._owner = {"st_uid": os.getuid(), "st_gid": os.getgid()}
        self._lock = threading.Lock()  # the tree and the handles; never held over store calls
        self._ns = threading.Lock()  # orders changes of names, which reach the store one by one
        self._ids = itertools.count()
        self._handles: dict[int, tuple[_Entry, bool]] = {}  # fd -> (file, opened for writing)
        exists = retrying(loc.url, "list", lambda: loc.fs.exists(loc.path))
        self._tree = {"/": _Entry("/", True, mtime_ns=time.time_ns(), remote=exists)}
        for path, node in (mount._list_tree(loc, "rw_mount") if exists else {}).items():
            if path != "/":  # parents come first
                self._add(_Entry(path, node.is_dir, node.size, node.mtime_ns, remote=True))

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._lock:
            handle = self._handles.get(fh) if fh is not None else None
            entry = handle[0] if handle else self._get(path)
            nlink = 2 + len(entry.children)
        size, mtime = entry.size, entry.mtime_ns
        if entry.is_dir:
            mode, size = stat.S_IFDIR | 0o755, 4096
        else:
            mode, nlink = stat.S_IFREG | 0o644, 1
            # By descriptor when there is one: an unlinked open file has no path.
            staged = fh if handle else entry.staged
            with suppress(FileNotFoundError):  # evicted meanwhile: then the entry knows
                if staged is not None:
                    st = os.stat(staged)
                    size, mtime = st.st_size, st.st_mtime_ns
        times = dict.fromkeys(("st_atime", "st_mtime", "st_ctime"), mtime)
        return {"st_mode": mode, "st_nlink": nlink, "st_size": size,
                "st_blocks": (size + 511) // 512, **self._owner, **times}  # fmt: skip

    def readdir(self, path: str, fh: int) -> list[str | tuple[str, int, int]]:
        with self._lock:
            children = list(self._get(path).children.items())
        found: list[str | tuple[str, int, int]] = [".", ".."]
        return found + [(n, stat.S_IFDIR if c.is_dir else stat.S_IFREG, 0) for n, c in children]

    def open(self, path: str, flags: int) -> int:
        with self._lock:
            entry = self._get(path)
        writable = flags & os.O_ACCMODE != os.O_RDONLY
        # O_TRUNC arrives here (libfuse asks for atomic_o_trunc): overwriting downloads nothing.
        truncate = writable and bool(flags & os.O_TRUNC)
        with entry.lock:
            staged = self._stage(entry, empty=truncate)
            fd = os.open(staged, os.O_RDWR | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0))
            with self._lock:
                self._handles[fd] = (entry, writable)
            if truncate:
                self._changed(entry)
        return fd

    def create(self, path: str, mode: int, flags: int) -> int:
        with self._ns:
            entry = _Entry(path, False, mtime_ns=time.time_ns(), staged=self._new_staged())
            fd = os.open(str(entry.staged), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
            with self._lock:
                self._add(entry)
                self._handles[fd] = (entry, True)
        self._changed(entry)  # uploaded when closed, even if nothing is written
        return fd

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        written = os.pwrite(fh, data, offset)
        self._changed(self._handles[fh][0])
        return written

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._lock:
            entry = self._get(path)
            writers = any(e is entry and w for e, w in self._handles.values())
        with entry.lock:
            os.truncate(self._stage(entry, empty=length == 0), length)
            self._changed(entry)
        if not writers:  # no close follows: this is the whole change
            self._upload_or_eio(entry)
            self._evict(entry)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        entry, writable = self._handles[fh]
        if writable:  # what close(2) returns: where a failed upload is told
            self._upload_or_eio(entry)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        return self.flush(path, fh)

    def release(self, path: str | None, fh: int) -> int:
        with self._lock:
            entry = self._handles.pop(fh)[0]
        os.close(fh)  # uploaded by the flush before; what a mapping writes later, by unmount
        self._evict(entry)
        return 0

    def unlink(self, path: str) -> int:
        with self._ns:
            with self._lock:
                entry = self._get(path)
            with entry.lock:
                if entry.remote:
                    self._store("delete", path, partial(_remove, self.loc.fs, self._remote(path)))
                self._drop(entry)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        fs = self.loc.fs
        with self._ns:
            self._store("create", path, partial(fs.makedirs, self._remote(path), exist_ok=True))
            with self._lock:
                self._add(_Entry(path, True, mtime_ns=time.time_ns(), remote=True))
        return 0

    def rmdir(self, path: str) -> int:
        with self._ns:
            with self._lock:
                entry = self._get(path)
            if entry.children:
                raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY))
            if entry.remote:
                self._store("remove", path, partial(_remove, self.loc.fs, self._remote(path), True))
            self._drop(entry)
        return 0

    def rename(self, old: str, new: str) -> int:
        fs = self.loc.fs
        with self._ns:
            with self._lock:
                entry, target = self._get(old), self._tree.get(new)
                if target is not None and target.children:
                    raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY))
                moved = [e for p, e in sorted(self._tree.items()) if _within(p, old)]
            with ExitStack() as locks:
                for held in [*moved, *([target] if target else [])]:
                    locks.enter_context(held.lock)
                # A file moved on the store replaces what was there; a new one, when uploaded.
                for e in (e for e in moved if e.remote):
                    there = self._remote(new + e.path[len(old) :])
                    move = partial(_mv, fs, self._remote(e.path), there, folder=e.is_dir)
                    self._store("move", e.path, move)
                for e in reversed(moved):  # the folders the files left, deepest first
                    if e.is_dir and e.remote:
                        # Best effort: a folder the store still fills (with files added since
                        # the listing) stays, as it would on an object store.
                        with suppress(Exception):
                            _remove(fs, self._remote(e.path), True)
                if target is not None:
                    entry.remote |= target.remote  # an old object there, until the upload
                    self._drop(target)
                with self._lock:
                    self._detach(entry)
                    for e in moved:
                        e.path = new + e.path[len(old) :]
                        self._tree[e.path] = e
                        if e.dirty and not e.is_dir:
                            self._marker(e).write_text(e.path)
                    self._tree[_split(new)[0]].children[_split(new)[1]] = entry
        return 0

    def _accept(self, *args: object) -> int:
        return 0  # an object store keeps no modes, owners or times of its own choosing

    chmod = chown = utimens = _accept

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.work)  # what the job can write before it waits for uploads
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                "f_favail", "f_namemax")  # fmt: skip
        return {key: getattr(st, key) for key in keys}

    def upload_all(self) -> dict[str, str]:
        """Upload every file changed since its last upload; those that failed, with why."""
        with self._lock:
            todo = [e for e in self._tree.values() if e.dirty]
        failed = {}
        for entry in todo:
            try:
                self._upload(entry)
            except Exception as exc:
                failed[entry.path] = why = _reason(exc)
                log.error("rw_mount %s: cannot upload %s: %s", self.loc.url, entry.path, why)
        return failed

    def _upload(self, entry: _Entry) -> None:
        with entry.lock:
            with self._lock:
                if entry.deleted or not entry.dirty:
                    return
                version, target = entry.version, self.loc.child(entry.path)

            def put() -> None:
                self.loc.fs.makedirs(target.path.rpartition("/")[0], exist_ok=True)
                self.loc.fs.put_file(str(entry.staged), target.path)

            retrying(target.url, "upload", put)
            with self._lock:
                entry.uploaded, entry.remote = version, True
                if not entry.dirty:
                    self._marker(entry).unlink(missing_ok=True)

    def _upload_or_eio(self, entry: _Entry) -> None:
        try:
            self._upload(entry)
        except Exception as exc:
            self._fail("upload", entry.path, exc)

    def _stage(self, entry: _Entry, *, empty: bool) -> Path:
        """The staged copy of ``entry``, made empty or downloaded if missing; hold its lock."""
        if entry.deleted:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        if entry.staged is None:
            staged, source = self._new_staged(), self.loc.child(entry.path)
            try:
                if empty:
                    staged.touch()
                else:
                    get = partial(self.loc.fs.get_file, source.path, str(staged))
                    retrying(source.url, "read", get)
            except Exception as exc:
                staged.unlink(missing_ok=True)
                self._fail("read", entry.path, exc)
            entry.staged = staged
        return entry.staged

    def _evict(self, entry: _Entry) -> None:
        """Drop the copy of a file uploaded and closed: staging holds only work in flight."""
        with entry.lock, self._lock:
            if entry.staged is None or entry.dirty or entry.deleted:
                return
            if any(e is entry for e, _ in self._handles.values()):
                return
            if entry.version:  # changed here: the listing's size and time are out of date
                st = os.stat(entry.staged)
                entry.size, entry.mtime_ns = st.st_size, st.st_mtime_ns
            entry.staged.unlink()
            entry.staged = None

    def _changed(self, entry: _Entry) -> None:
        with self._lock:
            if not entry.dirty and not entry.deleted:
                self._marker(entry).write_text(entry.path)  # for unmount, if this server dies
            entry.version += 1

    def _store(self, action: str, path: str, call: Callable[[], object]) -> None:
        try:
            retrying(self.loc.child(path).url, action, call)
        except Exception as exc:
            self._fail(action, path, exc)

    def _fail(self, action: str, path: str, exc: Exception) -> NoReturn:
        log.error("rw_mount %s: cannot %s %s (EIO): %s", self.loc.url, action, path, _reason(exc))
        log.debug("%s of %s failed", action, path, exc_info=True)
        raise OSError(errno.EIO, os.strerror(errno.EIO)) from exc

    def _drop(self, entry: _Entry) -> None:
        with self._lock:
            self._detach(entry)
            entry.deleted = True
            if entry.staged is not None:  # open handles keep their bytes
                entry.staged.unlink(missing_ok=True)
                self._marker(entry).unlink(missing_ok=True)

    def _add(self, entry: _Entry) -> None:
        parent, name = _split(entry.path)
        self._tree[parent].children[name] = self._tree[entry.path] = entry

    def _detach(self, entry: _Entry) -> None:
        parent, name = _split(entry.path)
        del self._tree[parent].children[name]
        for path in [p for p in self._tree if _within(p, entry.path)]:
            del self._tree[path]

    def _get(self, path: str | None) -> _Entry:
        entry = self._tree.get(path or "")
        if entry is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        return entry

    def _new_staged(self) -> Path:
        return self.work / "data" / str(next(self._ids))

    def _marker(self, entry: _Entry) -> Path:
        assert entry.staged is not None  # only staged files change
        return self.work / "pending" / entry.staged.name

    def _remote(self, path: str) -> str:
        return self.loc.child(path).path


class RwMountHandle(mount.MountHandle):
    """A read-write mount served by a child process; as a context manager, unmounts on exit."""

    def __init__(
        self, mountpoint: Path, process: BaseProcess, log_path: Path | None, *,
        url: str, work: Path, control: Connection,
    ) -> None:  # fmt: skip
        super().__init__(mountpoint, process, log_path)
        self.url, self.work, self._control, self._done = url, work, control, False

    def unmount(self, timeout: float = 10.0, *, upload_timeout: float = 3600.0) -> None:
        """Upload all that is not yet uploaded, then unmount and stop the server; idempotent.

        Args:
            timeout: Seconds to wait for the server to end after each unmount step.
            upload_timeout: Seconds the pending uploads may take.

        Raises:
            PhalanxError: Files could not be uploaded (named once the mount is gone), or the
                mount is still there after a lazy unmount.
        """
        failed = {} if self._done else self._upload_pending(upload_timeout)
        super().unmount(timeout)
        if self._done:
            return
        self._done = True
        self._control.close()
        if failed:
            more = f" and {len(failed) - _SHOWN} more" if len(failed) > _SHOWN else ""
            raise PhalanxError(
                f"rw_mount {self.url}: {len(failed)} file(s) not uploaded: "
                f"{', '.join(sorted(failed)[:_SHOWN])}{more} ({next(iter(failed.values()))}); "
                f"their last bytes are kept under {self.work}"
            )
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> RwMountHandle:
        return self

    def _upload_pending(self, timeout: float) -> dict[str, str]:
        why, deadline = "its FUSE server died before uploading it", time.monotonic() + timeout
        with suppress(OSError, EOFError):  # the server died meanwhile
            if self.process.is_alive():
                self._control.send("upload")
                while not self._control.poll(0.1):
                    if time.monotonic() > deadline:
                        why = f"its upload did not finish within {timeout:g} s"
                        break
                else:
                    answer: dict[str, str] = self._control.recv()
                    return answer
        # No answer: what the server had not uploaded is on record in the staging folder.
        return {m.read_text(): why for m in sorted((self.work / "pending").iterdir())}


def start_rw_mount(
    loc: Location,
    mountpoint: Path,
    staging: Path,
    *,
    timeout: float = 30.0,
    log_path: Path | None = None,
    owner: tuple[int, int] | None = None,
) -> RwMountHandle:
    """Mount the folder ``loc`` read-write at ``mountpoint``, served by a forked child.

    The folder is listed in this process, so a refused credential raises here. Returns once
    the mount answers.

    Args:
        loc: The remote folder (made by the first upload if missing).
        mountpoint: A folder (created if missing) that is not a mount point already.
        staging: A local folder for downloaded and written copies, kept in a fresh subfolder
            that is removed once everything is uploaded.
        timeout: Seconds to wait for the mount to come up.
        log_path: File the server logs to (appended), else this process's stderr.
        owner: The uid and gid its files belong to, who may write them: a walled-off
            job's account.

    Raises:
        PhalanxError: FUSE is unavailable, the folder cannot be listed or is a file, the
            mount point is taken, or the mount did not come up.
    """
    mountpoint = mount._prepare(mountpoint, "rw_mount", "upload")
    try:
        Path(staging).mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="rw_mount-", dir=staging))
    except OSError as exc:
        raise PhalanxError(f"cannot make staging folder under {staging}: {exc.strerror}") from exc
    try:
        ops = ReadWriteMount(loc, work)
        mount.for_account(ops, owner)
        ctx = multiprocessing.get_context("fork")
        control, child_end = ctx.Pipe()
        child = ctx.Process(
            target=_run_child, args=(ops, mountpoint, log_path, child_end),
            name="phalanx-rw-mount", daemon=True,
        )  # fmt: skip
        child.start()
        child_end.close()
        handle = RwMountHandle(mountpoint, child, log_path, url=loc.url, work=work, control=control)
        mount._wait_mounted(handle, loc.url, timeout, "upload")
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return handle


def _run_child(
    ops: ReadWriteMount, mountpoint: Path, log_path: Path | None, control: Connection
) -> None:
    mount._child_logging(log_path)
    ops.loc = mount._fork_safe(ops.loc)
    # Signals are for libfuse's main thread: one taken by this thread would not end its loop.
    before = signal.pthread_sigmask(
        signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    )
    threading.Thread(target=_answer, args=(ops, control), daemon=True).start()
    signal.pthread_sigmask(signal.SIG_SETMASK, before)
    try:
        mount._fuse(
            ops, mountpoint, hard_remove=True, attr_timeout=_TIMEOUT, entry_timeout=_TIMEOUT
        )
    except RuntimeError as exc:  # mfusepy: libfuse failed to mount, or a signal ended it
        log.warning("rw_mount %s at %s: libfuse exited with %s", ops.loc.url, mountpoint, exc)
        raise SystemExit(1) from None


def _answer(ops: ReadWriteMount, control: Connection) -> None:
    """Upload all that is pending each time the parent asks, and say what failed."""
    with suppress(EOFError, OSError):  # the parent is gone
        while control.recv():
            control.send(ops.upload_all())


def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, PhalanxError) else redact(f"{type(exc).__name__}: {exc}")


def _remove(fs: Any, path: str, folder: bool = False) -> None:
    with suppress(FileNotFoundError):  # gone already, or a folder an object store never had
        if folder:
            fs.rmdir(path)
        else:
            fs.rm_file(path)


def _mv(fs: Any, old: str, new: str, *, folder: bool) -> None:
    """Move one file, or make the folder ``new`` (its files move one by one)."""
    if folder:
        fs.makedirs(new, exist_ok=True)
        return
    fs.makedirs(new.rpartition("/")[0], exist_ok=True)
    fs.mv(old, new)  # a rename in a local folder; a copy and a delete on an object store
