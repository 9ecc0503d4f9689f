"""Reading files a job may have replaced, without following its links.

On a server that walls jobs off, a job's logs, outputs, checkpoints and the records
of its attempts are in folders its own account may write, while phalanx reads them
as root (to serve logs, upload outputs, name a root cause). A job that swapped one of
those files, or a folder on the way to it, for a symbolic link to the server's
secrets must get nothing: these calls open the path one component at a time with
``O_NOFOLLOW`` and only ever hand back a regular file. A FIFO or device is refused
too (reading a FIFO would block the server). Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_file(path: str | Path, *, dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file ``path`` (never through a final link).

    Raises:
        OSError: it is missing, a link (``ELOOP``), or not a regular file (``EINVAL``).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: str | Path, rel: str) -> int:
    """A read-only descriptor of the regular file ``root/rel``, no part of ``rel`` a link.

    ``root`` itself is trusted (a folder phalanx made); every folder below it and the
    file are opened without following links.

    Raises:
        OSError: a part is missing or a link, ``rel`` climbs out, or the end is not a
            regular file.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, "not a path inside the folder", rel)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        return open_file(parts[-1], dir_fd=fd)
    finally:
        os.close(fd)


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), its final part no link.

    Raises:
        OSError: as :func:`open_file`.
    """
    with os.fdopen(open_file(path), "rb") as f:
        return f.read() if limit is None else f.read(limit)


def write_new(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` afresh with ``data``: whatever was there (a link a job planted) is
    removed first, and the file is made with ``O_EXCL``, so no link is ever followed.

    Raises:
        OSError: it could not be made (another file appeared meanwhile).
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
