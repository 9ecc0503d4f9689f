"""Read-only bind mounts: how a walled-off job sees an input that is a file on this machine.

A job that runs as an account of its own cannot enter the node cache (shared by every
job, root's only) or the server's folders (a local datastore, an uploaded bundle). Its
supervisor, root, binds the one file or folder the input names onto a mount point in
the job's folder, read-only, without its sub-mounts: the job reads exactly that, and
nothing next to it. Copying would cost the data's size per job; a bind costs nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from phalanx.errors import PhalanxError

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def bind_readonly(source: Path, target: Path) -> Path:
    """Show ``source`` (a file or folder) read-only at ``target``, made to match it.

    Raises:
        PhalanxError: the kernel refused (not root, or no mount permission here).
    """
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    unbind(target)  # left by a supervisor that died
    libc = _libc()
    steps = (
        (str(source).encode(), _MS_BIND),
        (None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV),
    )
    for src, flags in steps:
        if libc.mount(src, str(target).encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            unbind(target)
            raise PhalanxError(
                f"cannot show {source} read-only to the job at {target}: {os.strerror(err)}"
            )
    return target


def unbind(target: Path) -> bool:
    """Lift the bind mounts at ``target`` (lazily: a reader still there keeps its view);
    whether there was one. (``os.path.ismount`` cannot tell: a bind mount from the same
    file system has its parent's device.)"""
    libc, lifted = _libc(), False
    for _ in range(16):  # mounts stacked by supervisors that died, one on another
        if libc.umount2(str(target).encode(), _MNT_DETACH) == 0:
            lifted = True
            continue
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):  # not (or no longer) a mount point
            return lifted
        raise PhalanxError(f"cannot unmount {target}: {os.strerror(err)}")
    return lifted


def unbind_all(folder: Path) -> None:
    """Lift every bind mount in ``folder`` or one level below it (a job's inputs)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        unbind(entry)
        if entry.is_dir() and not entry.is_symlink():
            for inner in entry.iterdir():
                unbind(inner)
