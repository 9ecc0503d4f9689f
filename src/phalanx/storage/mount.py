"""A read-only FUSE mount of a datastore folder, read through the node cache (like blobfuse).

The folder is listed once, at mount time: ``ls``, ``stat`` and ``os.walk`` never reach the
store, and files added there later do not appear. The first ``open`` of a file fetches it
into the :class:`~phalanx.storage.cache.NodeCache` (or checks the cached copy is current);
later opens in the same mount are local. A copy stays pinned while a handle on it is open.
A failed fetch reads as ``EIO``, and the reason goes to the mount's log as one line.

:func:`start_mount` serves the mount from a forked child, so a credentialed file system is
inherited, never pickled nor put on a command line. With libfuse's ``auto_unmount``, a
SIGKILLed server is unmounted by its ``fusermount3`` helper; :meth:`MountHandle.unmount`
and :func:`cleanup_stale` lazily unmount whatever is left (busy or dead mounts included).
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from phalanx.errors import PhalanxError
from phalanx.storage.cache import NodeCache
from phalanx.storage.location import Location
from phalanx.storage.redact import redact
from phalanx.storage.transfer import retrying

log = logging.getLogger(__name__)

FSTYPE = "fuse.phalanx"
"""The file system type of these mounts in ``/proc/self/mountinfo``."""
_TIMEOUT = 86400  # seconds the kernel may cache names and attributes: the tree never changes


@dataclass
class _Node:
    is_dir: bool
    size: int = 0
    mtime_ns: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def fuse_available() -> str | None:
    """``None`` when this process can serve FUSE mounts, else why not (a few words)."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse missing"
    helper = shutil.which("fusermount3")
    if helper is None:
        return "fusermount3 not installed"
    try:
        import mfusepy  # noqa: F401  (loads libfuse, or fails)
    except ImportError:
        return "mfusepy not installed; pip install 'phalanx[fuse]'"
    except OSError:
        return "libfuse not found"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "not permitted: no read/write access to /dev/fuse"
    if os.geteuid() != 0 and not os.stat(helper).st_mode & stat.S_ISUID:
        return f"not permitted: {helper} is not setuid root"
    return None


class ReadOnlyMount:
    """The operations of one mount, as mfusepy calls them; lists ``loc`` when built.

    Not a subclass of ``mfusepy.Operations``: importing mfusepy fails where libfuse is
    missing, and this module must still import there for :func:`fuse_available` to say so.

    Args:
        loc: The remote folder.
        cache: The node cache files are fetched into.

    Raises:
        PhalanxError: The folder is missing, is a file, or cannot be listed.
    """

    use_ns = True  # times in integer nanoseconds (mfusepy's non-deprecated convention)

    def __init__(self, loc: Location, cache: NodeCache) -> None:
        self.loc, self.cache, self._nodes = loc, cache, _list_tree(loc)
        self._owner = {"st_uid": os.getuid(), "st_gid": os.getgid()}
        self._lock = threading.Lock()
        self._open: dict[int, ExitStack] = {}  # fd of the cached copy -> its pin
        self._checked: set[str] = set()

    def init(self, path: str) -> None:
        self.loc = _fork_safe(self.loc)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        node = self._node(path)
        if node.is_dir:
            mode, nlink, size = stat.S_IFDIR | 0o555, 2 + len(node.children), 4096
        else:
            mode, nlink, size = stat.S_IFREG | 0o444, 1, node.size
        times = dict.fromkeys(("st_atime", "st_mtime", "st_ctime"), node.mtime_ns)
        blocks = (size + 511) // 512
        return {"st_mode": mode, "st_nlink": nlink, "st_size": size, "st_blocks": blocks,
                **self._owner, **times}  # fmt: skip

    def readdir(self, path: str, fh: int) -> list[str | tuple[str, int, int]]:
        node = self._node(path)  # a folder: the kernel asks only for those
        entries: list[str | tuple[str, int, int]] = [".", ".."]
        for name, child in node.children.items():
            entries.append((name, stat.S_IFDIR if child.is_dir else stat.S_IFREG, 0))
        return entries

    def open(self, path: str, flags: int) -> int:
        node = self._node(path)  # a file: the kernel opens folders with opendir
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & (os.O_TRUNC | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        with self._lock:
            # One check against the store per file and mount: the listing is a snapshot,
            # so a copy verified once stays the version this mount shows.
            check = path not in self._checked
        pin = ExitStack()
        try:
            copy = pin.enter_context(
                self.cache.pinned(self.loc.child(path), size=node.size, etag_check=check)
            )
            fd = os.open(copy, os.O_RDONLY | os.O_CLOEXEC)
        except Exception as exc:
            pin.close()
            reason = (
                str(exc)
                if isinstance(exc, PhalanxError)
                else redact(f"{type(exc).__name__}: {exc}")
            )
            log.error("ro_mount %s: cannot read %s (EIO): %s", self.loc.url, path, reason)
            log.debug("fetch of %s failed", path, exc_info=True)
            raise OSError(errno.EIO, os.strerror(errno.EIO)) from exc
        with self._lock:
            self._checked.add(path)
            self._open[fd] = pin
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def release(self, path: str, fh: int) -> int:
        with self._lock:
            pin = self._open.pop(fh, None)
        if pin is not None:
            os.close(fh)
            pin.close()
        return 0

    def _refuse(self, *args: object) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    # Every operation that would change something: the kernel refuses most of them on a
    # ``ro`` mount already; these answer the rest the same way.
    write = create = truncate = mkdir = mknod = unlink = rmdir = rename = _refuse
    symlink = link = chmod = chown = utimens = setxattr = removexattr = fallocate = _refuse

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        return node


def mount(loc: Location, mountpoint: Path, cache: NodeCache) -> None:
    """List ``loc`` and serve it read-only at ``mountpoint`` until it is unmounted.

    Always in the foreground: libfuse's own daemon mode forks and ``_exit``s the caller.

    Raises:
        PhalanxError: The folder cannot be listed.
    """
    _serve(ReadOnlyMount(loc, cache), Path(mountpoint))


class MountHandle:
    """A mount served by a child process; as a context manager, unmounts on exit."""

    def __init__(self, mountpoint: Path, process: BaseProcess, log_path: Path | None) -> None:
        self.mountpoint, self.process, self.log_path = mountpoint, process, log_path

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount (lazily if busy or dead) and stop the server process; idempotent.

        Raises:
            PhalanxError: The mount is still there after a lazy unmount.
        """
        if _unmount(self.mountpoint):
            self.process.join(timeout)  # the server sees the unmount and ends by itself
        # Alive after a lazy unmount (which waits for the last open file, and a reader left
        # then gets ENOTCONN) or before it served at all: SIGTERM ends libfuse's loop.
        for stop in (self.process.terminate, self.process.kill):
            if self.process.is_alive():
                stop()
                self.process.join(timeout)

    def __enter__(self) -> MountHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def start_mount(
    loc: Location,
    mountpoint: Path,
    cache: NodeCache,
    *,
    timeout: float = 30.0,
    log_path: Path | None = None,
    owner: tuple[int, int] | None = None,
) -> MountHandle:
    """Mount the folder ``loc`` read-only at ``mountpoint``, served by a forked child.

    The folder is listed in this process, so a missing folder or a refused credential
    raises here. Returns once the mount answers.

    Args:
        loc: The remote folder.
        mountpoint: A folder (created if missing) that is not a mount point already.
        cache: The node cache files are read through.
        timeout: Seconds to wait for the mount to come up.
        log_path: File the server logs to (appended), else this process's stderr.
        owner: The uid and gid the mount's files show, and may be read by: a walled-off
            job's account (``allow_other``: the kernel lets that account in).

    Raises:
        PhalanxError: FUSE is unavailable, the folder cannot be listed, the mount point is
            taken, or the mount did not come up.
    """
    mountpoint = _prepare(mountpoint, "ro_mount", "download")
    ops = ReadOnlyMount(loc, cache)
    for_account(ops, owner)
    child = multiprocessing.get_context("fork").Process(
        target=_run_child, args=(ops, mountpoint, log_path), name="phalanx-mount", daemon=True
    )
    child.start()
    handle = MountHandle(mountpoint, child, log_path)
    _wait_mounted(handle, loc.url, timeout, "download")
    return handle


def for_account(ops: Any, owner: tuple[int, int] | None) -> None:
    """Serve ``ops`` to ``owner`` (uid, gid), another account than this process's."""
    if owner is not None:
        ops._owner = {"st_uid": owner[0], "st_gid": owner[1]}
        ops.allow_other = True


def _prepare(mountpoint: Path, mode: str, fallback: str) -> Path:
    """Check FUSE works here and make ``mountpoint``; its absolute path.

    ``mode`` and ``fallback`` name the mode asked for and the one to use without FUSE.

    Raises:
        PhalanxError: FUSE is unavailable, or the mount point is taken or cannot be made.
    """
    reason = fuse_available()
    if reason is not None:
        raise PhalanxError(f"{mode} needs FUSE ({reason}); use mode: {fallback}")
    mountpoint = Path(os.path.abspath(mountpoint))
    if _mount_type(mountpoint) is not None:
        raise PhalanxError(
            f"{mountpoint} is already a mount point; unmount it (fusermount3 -uz {mountpoint}) "
            "or mount elsewhere"
        )
    try:
        mountpoint.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PhalanxError(f"cannot make mount point {mountpoint}: {exc.strerror}") from exc
    return mountpoint


def _wait_mounted(handle: MountHandle, url: str, timeout: float, fallback: str) -> None:
    """Wait for the mount ``handle`` serves to answer.

    Raises:
        PhalanxError: Its server exited, or it did not come up within ``timeout`` seconds;
            the mount is then removed.
    """
    child, deadline = handle.process, time.monotonic() + timeout
    while not os.path.ismount(handle.mountpoint):
        if not child.is_alive() or time.monotonic() > deadline:
            MountHandle.unmount(handle)  # the plain unmount: nothing was written through it
            problem = (
                f"its FUSE process exited with code {child.exitcode}"
                if child.exitcode not in (None, -signal.SIGTERM)
                else f"it did not come up within {timeout:g} s"
            )
            raise PhalanxError(
                f"cannot mount {url} at {handle.mountpoint}: {problem}; see "
                f"{handle.log_path or 'the stderr above'} for why, or use mode: {fallback}"
            )
        time.sleep(0.01)


def cleanup_stale(mountpoint: Path) -> bool:
    """Lazily unmount a phalanx mount left at ``mountpoint``; whether there was one.

    Other file systems mounted there are left alone.

    Raises:
        PhalanxError: The mount could not be removed.
    """
    mountpoint = Path(os.path.abspath(mountpoint))
    if _mount_type(mountpoint) != FSTYPE:
        return False
    _unmount(mountpoint)
    return True


def _fork_safe(loc: Location) -> Location:
    """``loc`` with a file system usable in this forked child.

    An async fsspec file system (adlfs, s3fs) refuses to run in a forked child: build a
    fresh one from the same arguments, credentials included.
    """
    fs = loc.fs
    if getattr(fs, "async_impl", False):
        return replace(loc, fs=type(fs)(*fs.storage_args, **fs.storage_options))
    return loc


def _list_tree(loc: Location, mode: str = "ro_mount") -> dict[str, _Node]:
    """Every file and folder under ``loc``, keyed ``/rel/path`` (the root is ``/``).

    ``mode`` names the output or input mode in messages.
    """
    found: Mapping[str, Mapping[str, Any]] = retrying(
        loc.url, "list", lambda: loc.fs.find(loc.path, detail=True, withdirs=True)
    )
    root = loc.fs._strip_protocol(loc.path).rstrip("/")
    now = time.time_ns()
    nodes = {"/": _Node(True, mtime_ns=now)}
    for path, info in sorted(found.items()):
        is_dir, path = info.get("type") == "directory", path.rstrip("/")
        if path == root and not is_dir:
            raise PhalanxError(f"{loc.url} is a file; {mode} mounts folders")
        parts = path[len(root) + 1 :].split("/") if path.startswith(root + "/") else [""]
        if path == root:
            continue
        if any(part in ("", ".", "..") for part in parts):
            log.warning("%s %s: skipping %r, not a path inside the folder", mode, loc.url, path)
            continue
        parent = nodes["/"]
        for depth, name in enumerate(parts, 1):
            key, want_dir = "/" + "/".join(parts[:depth]), is_dir or depth < len(parts)
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = parent.children[name] = _Node(want_dir, mtime_ns=now)
            elif node.is_dir != want_dir:
                # Object stores allow both "a" and "a/b"; a folder cannot hold both.
                log.warning("%s %s: skipping %r, which clashes with %s", mode, loc.url, path, key)
                break
            parent = node
        else:
            parent.size = 0 if is_dir else int(info.get("size") or 0)
            parent.mtime_ns = _mtime_ns(info, now)
    if len(nodes) == 1 and not retrying(loc.url, "list", lambda: loc.fs.isdir(loc.path)):
        raise PhalanxError(f"{loc.url} not found; check the path, the datastore or the asset")
    return nodes


def _mtime_ns(info: Mapping[str, Any], default: int) -> int:
    raw = info.get("mtime") or info.get("last_modified") or info.get("LastModified")
    if isinstance(raw, datetime):
        return int(raw.timestamp() * 1e9)
    if isinstance(raw, int | float):
        return int(raw * 1e9)
    return default


def _serve(ops: ReadOnlyMount, mountpoint: Path) -> None:
    _fuse(
        ops, mountpoint, ro=True, kernel_cache=True, attr_timeout=_TIMEOUT,
        entry_timeout=_TIMEOUT, negative_timeout=_TIMEOUT,
    )  # fmt: skip


def _fuse(ops: Any, mountpoint: Path, **options: Any) -> None:
    """Serve ``ops`` (which has ``loc``) at ``mountpoint`` in the foreground until unmounted.

    ``options`` are libfuse's, added to those every phalanx mount shares.
    """
    import mfusepy

    version = (mfusepy.fuse_version_major, mfusepy.fuse_version_minor)
    # Set, also because libfuse 3.14 warns about its own default for max_idle_threads.
    threads: dict[str, Any] = {"max_idle_threads": 8} if version[0] == 3 else {}
    if version >= (3, 12):
        threads["max_threads"] = 64
    name = re.sub(r"[,\s\\]", "_", ops.loc.url)  # -o splits on commas
    if getattr(ops, "allow_other", False):
        options["allow_other"] = True  # a job's account, not this process's, reads it
    mfusepy.FUSE(
        ops, str(mountpoint), foreground=True, default_permissions=True, auto_unmount=True,
        fsname=f"phalanx:{name}", subtype=FSTYPE.split(".")[1], **threads, **options,
    )  # fmt: skip


def _run_child(ops: ReadOnlyMount, mountpoint: Path, log_path: Path | None) -> None:
    _child_logging(log_path)
    try:
        _serve(ops, mountpoint)
    except RuntimeError as exc:  # mfusepy: libfuse failed to mount, or a signal ended it
        log.warning("ro_mount %s at %s: libfuse exited with %s", ops.loc.url, mountpoint, exc)
        raise SystemExit(1) from None


def _end_with_parent() -> None:
    """Have the kernel send SIGTERM to this server when its parent dies (Linux).

    A supervisor killed outright (SIGKILL, the OOM killer) never unmounts; without
    this its mount servers would outlive it, and their mounts with them.
    """
    from phalanx.prctl import end_with_parent

    if not end_with_parent(signal.SIGTERM):  # not Linux: the supervisor's unmount is all
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _child_logging(log_path: Path | None) -> None:
    """Detach a mount's server child into its own session, logging to ``log_path``."""
    # A session of its own: Ctrl-C in the terminal must not pull the mount from under ranks
    # still shutting down; the parent unmounts it when they are done.
    os.setsid()
    _end_with_parent()
    handler: logging.Handler = logging.StreamHandler()
    if log_path is not None:
        sink = open(log_path, "a", buffering=1)  # noqa: SIM115 (open while the process lives)
        os.dup2(sink.fileno(), 2)  # where libfuse and fusermount3 say what failed
        handler = logging.StreamHandler(sink)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("phalanx.storage", "fuse"):  # not via the root: fork copied its handlers
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)


def _mount_type(mountpoint: Path) -> str | None:
    """The file system type mounted at ``mountpoint`` (absolute), or ``None``.

    Read from the mount table, not ``stat``: a mount whose server died fails every ``stat``.
    """
    target = os.path.join(os.path.realpath(mountpoint.parent), mountpoint.name)
    found = None
    with open("/proc/self/mountinfo") as table:
        for line in table:
            fields = line.split()
            point = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == target:
                found = fields[fields.index("-") + 1]  # the last one listed is on top
    return found


def _unmount(mountpoint: Path) -> bool:
    """Unmount ``mountpoint``, lazily if need be; whether it was unmounted, not detached."""
    if _mount_type(mountpoint) is None:
        return False
    done = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, text=True)
    if done.returncode == 0 or _mount_type(mountpoint) is None:
        return True
    # Busy (a rank still has a file open) or its server died: detach it now; the kernel
    # finishes when the last file on it is closed.
    lazy = subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True, text=True)
    if lazy.returncode != 0 and _mount_type(mountpoint) is not None:
        raise PhalanxError(
            f"cannot unmount {mountpoint}: {lazy.stderr.strip() or done.stderr.strip()}; "
            f"run `fusermount3 -uz {mountpoint}` (as root if it is not yours)"
        )
    return False
