"""A file or folder of a job's folder, packed as a tar: what a client downloads
(``phalanx tensorboard`` through a server reads a job's event files this way), a
single file as it is, and the list of files under a folder (the studio's tree).

Only what lies inside the job's folder is served, and nothing is ever read through
a link: a running job's account may write its own folders, so it could swap a file,
or a folder on the way to it, for a link to the server's secrets between a check and
a read. So nothing here checks a path and then opens it: the path is a plain
relative one (no ``..``, nothing absolute or encoded), its folders are opened one at
a time without following links, and a folder is walked by descriptors
(``os.fwalk``), each file opened where it was found with ``O_NOFOLLOW``
(:mod:`phalanx.nofollow`). Links met inside are left out.

Files that copy the job's spec or name the server's paths (``spec.yaml``,
``spec.json``, ``account.json``, a container's environment file) are kept from a
caller :func:`phalanx.service.masks.withheld` says may not read them: asked for, a
403; inside a folder, left out.

Each file packed carries its sha256 (a PAX header, :data:`phalanx.archives.DIGEST_KEY`):
the receiver (:func:`receive`, here and on a client) checks every file that arrived
before it moves any into place.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from phalanx.archives import DIGEST_KEY, NO_LIMIT, check_digests, unpack
from phalanx.errors import Forbidden, PhalanxError
from phalanx.launch.logtimes import is_index
from phalanx.nofollow import open_file
from phalanx.registry.files import safe_relpath
from phalanx.service.access import LOCAL, Caller
from phalanx.service.masks import withheld
from phalanx.workspace import Workspace

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20


class NoSuchPath(PhalanxError):
    """The job has nothing at that path (the server answers 404)."""


@dataclass
class Found:
    """What ``rel`` of a job's folder is, held open: a folder's or a file's descriptor."""

    fd: int
    name: str
    is_file: bool
    size: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _kept_from(ws: Workspace, name: str, caller: Caller) -> Callable[[str], bool]:
    """Which files of job ``name``'s folder (by their path in it) ``caller`` may not read."""
    if caller.is_admin:
        return lambda rel: False
    owner = ws.get_job(name).created_by
    return lambda rel: withheld(caller, owner, rel)


@contextlib.contextmanager
def opened(ws: Workspace, name: str, rel: str, caller: Caller = LOCAL) -> Iterator[Found]:
    """``rel`` of job ``name``'s folder, opened without following any link on the way.

    Raises:
        PhalanxError: an unknown job, an unsafe path, or a link on the way.
        Forbidden: a file kept from ``caller``.
        NoSuchPath: nothing there.
    """
    root = Path(ws.get_job(name).job_dir)
    safe_relpath(rel, "path")
    if _kept_from(ws, name, caller)(rel):
        raise Forbidden(
            f"job {name}: {rel} holds its spec's values or the server's paths; only its "
            "owner (its spec.yaml) or an admin may read it"
        )
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    try:
        fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise NoSuchPath(f"job {name} has no {rel} (its folder is gone)") from None
    try:
        for k, part in enumerate(parts):
            info = _lstat(part, fd, name, rel)
            if stat.S_ISLNK(info.st_mode):
                raise PhalanxError(f"job {name}: {rel!r} goes through a symbolic link; not served")
            last = k == len(parts) - 1
            if last and stat.S_ISREG(info.st_mode):
                with _swapped(name, rel):
                    file_fd = open_file(part, dir_fd=fd)
                os.close(fd)
                fd = file_fd
                found = Found(fd, part, True, os.fstat(fd).st_size)
                break
            if not stat.S_ISDIR(info.st_mode):
                raise NoSuchPath(f"job {name} has no file or folder {rel}")
            with _swapped(name, rel):
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        else:
            found = Found(fd, parts[-1] if parts else root.name, False, 0)
    except BaseException:
        os.close(fd)
        raise
    try:
        yield found
    finally:
        found.close()


def _lstat(part: str, dir_fd: int, name: str, rel: str) -> os.stat_result:
    try:
        return os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise NoSuchPath(f"job {name} has no {rel}") from None


@contextlib.contextmanager
def _swapped(name: str, rel: str) -> Iterator[None]:
    """An open that failed because the part changed since it was looked at (now a link,
    gone, or another kind of file), as the one-line error it is."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EINVAL):
            raise PhalanxError(
                f"job {name}: {rel!r} changed while it was opened; not served"
            ) from None
        if exc.errno == errno.ENOENT:
            raise NoSuchPath(f"job {name} has no {rel}") from None
        raise


def job_file(ws: Workspace, name: str, rel: str, caller: Caller = LOCAL) -> tuple[int, int]:
    """The regular file ``rel`` of job ``name``'s folder, opened safely: its descriptor
    (the caller closes it) and size.

    Raises:
        PhalanxError, NoSuchPath: as :func:`opened`; also when ``rel`` is a folder.
    """
    with opened(ws, name, rel, caller) as found:
        if not found.is_file:
            raise NoSuchPath(f"job {name}: {rel} is a folder, not a file")
        fd = os.dup(found.fd)
        return fd, found.size


def pack(ws: Workspace, name: str, rel: str, archive: Path, caller: Caller = LOCAL) -> int:
    """Write the file or folder ``rel`` of job ``name``'s folder into the tar ``archive``
    (under its own name); links, and files kept from ``caller``, are left out. The
    number of files packed.

    Raises:
        PhalanxError, NoSuchPath: as :func:`opened`.
    """
    kept = _kept_from(ws, name, caller)
    prefix = _plain(rel)
    with opened(ws, name, rel, caller) as found, tarfile.open(archive, "w") as tar:
        if found.is_file:
            _add_file(tar, found.fd, found.name)
            return 1
        count = 0
        top = found.name
        for dirpath, dirs, names, dir_fd in os.fwalk(".", dir_fd=found.fd):
            dirs.sort()
            base = os.path.normpath(os.path.join(top, dirpath))
            folder = tarfile.TarInfo(base)
            folder.type, folder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(folder)
            for entry in sorted(names):
                if is_index(entry) or kept(_plain(f"{prefix}/{dirpath}/{entry}")):
                    continue
                try:
                    fd = open_file(entry, dir_fd=dir_fd)  # a link or a FIFO: left out
                except OSError:
                    continue
                try:
                    _add_file(tar, fd, f"{base}/{entry}")
                finally:
                    os.close(fd)
                count += 1
        return count


def _add_file(tar: tarfile.TarFile, fd: int, arcname: str) -> None:
    """The open file ``fd`` into ``tar``, as big as it was when looked at (a file still
    growing is cut there; one that shrank is padded, as tar wants its size)."""
    info = os.fstat(fd)
    member = tarfile.TarInfo(arcname)
    member.size, member.mtime, member.mode = info.st_size, int(info.st_mtime), 0o644
    member.pax_headers = {DIGEST_KEY: _digest(fd, info.st_size)}
    with os.fdopen(os.dup(fd), "rb") as f:
        f.seek(0)
        tar.addfile(member, _Sized(f, info.st_size))


def _digest(fd: int, size: int) -> str:
    """The sha256 of the first ``size`` bytes of ``fd`` (zeros past its end, as
    :class:`_Sized` sends them); read before the file goes in, as tar wants its headers
    first. A file rewritten in between arrives refused by the receiver's check."""
    digest = hashlib.sha256()
    offset = 0
    while offset < size:
        data = os.pread(fd, min(CHUNK, size - offset), offset)
        if not data:
            digest.update(b"\0" * (size - offset))
            break
        digest.update(data)
        offset += len(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Landed:
    """What a download of a job's file or folder wrote."""

    path: Path
    """The file or folder, ``dest / <last part of rel>``."""
    files: int
    size: int
    """Bytes, all files together."""


def receive(archive: Path, rel: str, dest: Path) -> Landed | None:
    """Unpack a download's ``archive`` of ``rel`` (with an upload's checks) beside
    ``dest``, check every file's sha256, then move it into ``dest`` (into a folder of
    that name already there, file by file); ``None`` when it held nothing of ``rel``.

    Raises:
        UploadError: a refused entry, or a file whose bytes are not those sent.
    """
    dest.mkdir(parents=True, exist_ok=True)
    last = rel.strip("/").rsplit("/", 1)[-1]
    stage = Path(tempfile.mkdtemp(prefix=".phalanx-download-", dir=dest))
    try:
        unpack(archive, stage, NO_LIMIT, entries=NO_LIMIT)
        files, size = check_digests(archive, stage)
        arrived, target = stage / last, dest / last
        if not arrived.exists():
            return None
        if target.is_dir() and arrived.is_dir():
            shutil.copytree(arrived, target, dirs_exist_ok=True)
        else:
            os.replace(arrived, target)
        return Landed(target, files, size)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class _Sized(io.RawIOBase):
    """Exactly ``size`` bytes of ``f``: what it has, then zeros."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        super().__init__()
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        data = self.f.read(want)
        data += b"\0" * (want - len(data))
        self.left -= want
        return data


def _plain(rel: str) -> str:
    """``rel`` without empty and ``.`` parts."""
    return "/".join(p for p in rel.split("/") if p not in ("", "."))


def tree(
    ws: Workspace, name: str, rel: str, *, most: int = 2000, caller: Caller = LOCAL
) -> dict[str, object]:
    """The plain files under ``rel`` of job ``name``'s folder (e.g. ``outputs``,
    ``checkpoints``), each ``{"path", "size"}`` relative to the job's folder, sorted;
    links left out; at most ``most`` (``complete`` says whether all are listed).

    Raises:
        PhalanxError, NoSuchPath: as :func:`opened`.
    """
    files: list[dict[str, object]] = []
    prefix = _plain(rel)
    kept = _kept_from(ws, name, caller)
    with opened(ws, name, rel, caller) as found:
        if found.is_file:
            return {"files": [{"path": prefix, "size": found.size}], "complete": True}
        for dirpath, dirs, names, dir_fd in os.fwalk(".", dir_fd=found.fd):
            dirs.sort()
            base = os.path.normpath(os.path.join(prefix, dirpath))
            for entry in sorted(names):
                info = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
                shown = not is_index(entry) and not kept(_plain(f"{base}/{entry}"))
                if stat.S_ISREG(info.st_mode) and shown:
                    if len(files) >= most:
                        return {"files": files, "complete": False}
                    files.append({"path": f"{base}/{entry}", "size": info.st_size})
    return {"files": files, "complete": True}
