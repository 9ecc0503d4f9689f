"""One more account let into a folder that is closed to others, by a POSIX ACL entry.

A walled-off job sees an input on this machine through a read-only bind mount
(:mod:`phalanx.storage.bind`), which shows the folder itself: its mode still decides
who may list it. The workspace's own ``datastore`` folder (the ``default``
datastore's top) is closed to every account but root's, so a job whose input is
that folder could not list it. The job's account gets an entry of its own (read and
enter, never write) for as long as it runs, and nobody else does.

The ACL is written as the kernel reads it (the ``system.posix_acl_access``
attribute: a version, then entries of tag, permissions and id), so nothing but the
file system's ACL support is needed. Changes to one folder's ACL are serialised by
a lock on the folder itself (two supervisors starting jobs at once).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from pathlib import Path

from phalanx.errors import PhalanxError

_ATTR = "system.posix_acl_access"
_VERSION = 2
_HEAD = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED = 0xFFFFFFFF
_READ_ENTER = 0o5

Entries = dict[tuple[int, int], int]
"""(tag, id) → permissions (the three bits)."""


def open_to(path: Path, uid: int) -> bool:
    """Whether ``uid`` (no group of its own shared with the owner) may list and enter
    the folder ``path`` by its mode alone."""
    info = path.stat()
    if info.st_uid == uid:
        return info.st_mode & 0o500 == 0o500
    return info.st_mode & 0o005 == 0o005


def grant(folder: Path, uid: int) -> None:
    """Let ``uid`` list and enter ``folder`` (not write it).

    Raises:
        PhalanxError: the file system keeps no ACLs (one line naming the folder).
    """
    with _locked(folder) as fd:
        entries = _read(fd)
        entries[(_USER, uid)] = _READ_ENTER
        _write(fd, folder, entries)


def revoke(folder: Path, uid: int) -> None:
    """Take ``uid``'s entry off ``folder`` (nothing when it has none, or no folder)."""
    try:
        with _locked(folder) as fd:
            entries = _read(fd)
            if entries.pop((_USER, uid), None) is None:
                return
            _write(fd, folder, entries)
    except (FileNotFoundError, PhalanxError):
        return


def kept_mode(path: Path) -> int:
    """The group bits a ``chmod`` of ``path`` must keep: its ACL's mask while it lets
    accounts in (a ``chmod`` sets the mask, which would shut them out), else none."""
    try:
        data = os.getxattr(path, _ATTR, follow_symlinks=False)
    except OSError:
        return 0
    entries = _parse(data)
    if not any(tag in (_USER, _GROUP) for tag, _ in entries):
        return 0
    return entries.get((_MASK, _UNDEFINED), 0) << 3


class _locked:
    """The folder opened (never through a link) and locked while its ACL changes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fd = -1

    def __enter__(self) -> int:
        self.fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.fd

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


def _read(fd: int) -> Entries:
    """The folder's ACL; without one, the entries its mode stands for."""
    try:
        return _parse(os.getxattr(fd, _ATTR))
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
            raise
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    return {
        (_USER_OBJ, _UNDEFINED): mode >> 6 & 7,
        (_GROUP_OBJ, _UNDEFINED): mode >> 3 & 7,
        (_OTHER, _UNDEFINED): mode & 7,
    }


def _parse(data: bytes) -> Entries:
    entries: Entries = {}
    for offset in range(_HEAD.size, len(data) - _ENTRY.size + 1, _ENTRY.size):
        tag, perm, ident = _ENTRY.unpack_from(data, offset)
        entries[(tag, ident)] = perm
    return entries


def _write(fd: int, folder: Path, entries: Entries) -> None:
    """Set the ACL (its mask the union of the group class); with no named entry left,
    remove it and give the mode back its group bits."""
    entries = {k: v for k, v in entries.items() if k[0] != _MASK}
    named = [v for (tag, _), v in entries.items() if tag in (_USER, _GROUP)]
    group = entries.get((_GROUP_OBJ, _UNDEFINED), 0)
    try:
        if not named:
            os.removexattr(fd, _ATTR)
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            os.fchmod(fd, mode & ~0o070 | group << 3)
            return
        mask = group
        for perm in named:
            mask |= perm
        entries[(_MASK, _UNDEFINED)] = mask
        body = b"".join(
            _ENTRY.pack(tag, perm, ident) for (tag, ident), perm in sorted(entries.items())
        )
        os.setxattr(fd, _ATTR, _HEAD.pack(_VERSION) + body)
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise PhalanxError(
                f"{folder}: its file system keeps no access control lists, so it cannot be "
                "shown to a job's own account; name a folder inside it"
            ) from None
        raise
