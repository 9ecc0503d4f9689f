"""Unpacking an archive from elsewhere (a client's upload, a server's download):
inside its folder, within its size, or refused; and phalanx's own archives of a
folder (:func:`pack_folder`: a job's code and checkpoints sent to Ray nodes, an
image's build files).

An archive entry whose name is absolute or climbs out with ``..``, a link
that points out of the folder, a hard link, a device or a FIFO is refused with
the entry named; so is an archive that unpacks to more than the upload limit
(a small compressed file can hold a great deal of zeros), or to more than
:data:`MAX_ENTRIES` files and folders (100,000 empty files pack into 620 KB;
Azure ML warns at 2,000 files of code). Entries are read one at a time, so a
refused archive's later entries are never read.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable
from pathlib import Path

from phalanx.errors import PhalanxError


class UploadError(PhalanxError):
    """The upload breaks a rule; the server answers 400 (413 for size)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def _inside(name: str) -> bool:
    norm = posixpath.normpath(name)
    return not (name.startswith("/") or norm == ".." or norm.startswith("../"))


def check_member(member: tarfile.TarInfo) -> None:
    """Refuse an entry that would land, or point, outside the folder.

    Raises:
        UploadError: naming the entry.
    """
    name = member.name
    if not _inside(name) or "\\" in name or "\x00" in name:
        raise UploadError(f"upload refused: archive entry {name!r} escapes its folder")
    if member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
        if member.linkname.startswith("/") or not _inside(target):
            raise UploadError(
                f"upload refused: link {name!r} points outside its folder ({member.linkname})"
            )
    elif member.islnk():
        raise UploadError(f"upload refused: archive entry {name!r} is a hard link")
    elif not (member.isfile() or member.isdir()):
        raise UploadError(f"upload refused: archive entry {name!r} is not a file or folder")


MAX_ENTRIES = 10_000
"""Files and folders one upload may unpack to."""
NO_LIMIT = 1 << 50
"""For a download of a job's folder: the disk bounds it, not phalanx."""
DIGEST_KEY = "PHALANX.sha256"
"""The PAX header in which a download's archive gives each file's sha256."""


def check_digests(archive: Path, dest: Path) -> tuple[int, int]:
    """Check each file :func:`unpack` wrote from a download's ``archive`` into ``dest``
    against the sha256 the sender put beside it; the files and bytes that arrived.

    Raises:
        UploadError: a file without its sha256, a link (a download sends none), or a
            file whose bytes are not those sent.
    """
    from phalanx.hashing import file_digest

    files = size = 0
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            if member.isdir():
                continue
            want = member.pax_headers.get(DIGEST_KEY)
            if not member.isfile() or want is None:
                raise UploadError(
                    f"download refused: {member.name!r} came without its sha256 (a link, or "
                    "a server older than this client)"
                )
            got = file_digest(dest / member.name)
            if got != want:
                raise UploadError(
                    f"download refused: {member.name} arrived altered (sha256 {got[:12]}…, "
                    f"sent {want[:12]}…); download it again"
                )
            files, size = files + 1, size + member.size
    return files, size


def unpack(archive: Path, dest: Path, limit: int, entries: int = MAX_ENTRIES) -> None:
    """Unpack a (gzip) tar archive into ``dest`` after checking every entry.

    Raises:
        UploadError: a refused entry, more than ``limit`` bytes unpacked, more
            than ``entries`` entries, or not an archive.
    """
    try:
        with tarfile.open(archive, "r:*") as tar:
            members: list[tarfile.TarInfo] = []
            total = 0
            for member in tar:
                members.append(member)
                if len(members) > entries:
                    raise UploadError(
                        f"upload refused: the archive holds more than {entries} files and "
                        "folders; list what the job does not need in .amlignore, or put "
                        "data in a datastore",
                        too_large=True,
                    )
                check_member(member)
                total += member.size if member.isfile() else 0
                if total > limit:
                    raise UploadError(
                        f"upload refused: the files unpack to more than {limit // 2**20} MiB "
                        "(the server's --max-upload)",
                        too_large=True,
                    )
            # The standard library's own "data" filter, where it has one (3.10.12,
            # 3.11.4 and later), checks the same rules again.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:
                tar.extractall(dest, members=members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UploadError(f"upload refused: not a readable tar archive ({exc})") from None


def pack_folder(folder: Path, only: Iterable[Path] | None = None) -> bytes:
    """``folder`` as an uncompressed tar archive (regular files and folders only).

    Args:
        only: Just these files of it (with the folders they are in).
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if folder.is_dir():
            paths = folder.rglob("*") if only is None else _with_parents(folder, only)
            for path in sorted(paths):
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buf.getvalue()


def _with_parents(folder: Path, files: Iterable[Path]) -> set[Path]:
    found: set[Path] = set()
    for file in files:
        found.add(file)
        found.update(p for p in file.parents if p != folder and p.is_relative_to(folder))
    return found


def unpack_folder(data: bytes, dest: Path) -> None:
    """Unpack an archive :func:`pack_folder` made (phalanx's own: a job's code, checkpoints,
    build files) into ``dest``; tar's ``data`` filter still refuses what leaves it."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")
