"""The files of a model version: copied in with their sha256, copied out verified.

Nothing a user types, and nothing a source store lists, may name a place
outside the folder it belongs in. Every relative file name passes
:func:`safe_relpath` (no ``..``, no absolute path, no percent-encoded
traversal, no backslash); a local source with a symbolic link in it is refused
(a link could point anywhere on the machine); the registry's own folders are
checked to be real folders under the registry root before anything is written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote

from phalanx.errors import PhalanxError
from phalanx.hashing import file_digest
from phalanx.nofollow import open_beneath
from phalanx.storage.location import Location
from phalanx.storage.transfer import list_files, retrying

CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelFile:
    """One file of a model version."""

    path: str
    """Relative to the version's folder, with ``/``."""
    size: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def safe_relpath(rel: str, what: str) -> str:
    """``rel`` if it names a place inside a folder, else a one-line error.

    Args:
        rel: A ``/``-separated relative path.
        what: Names the value in the error ("file", "--path").

    Raises:
        PhalanxError: an empty, absolute, ``..``/``.``, backslash or encoded path.
    """
    decoded = rel
    for _ in range(3):  # %252e%252e decodes twice to ..
        decoded = unquote(decoded)
    for text in (rel, decoded):
        parts = text.split("/")
        if (
            not text
            or text.startswith("/")
            or "\\" in text
            or "\x00" in text
            or any(part in ("", ".", "..") for part in parts)
        ):
            raise PhalanxError(
                f"{what} {rel!r} does not name a place inside its folder (absolute, '..', "
                "'.', empty or encoded parts are refused); give a plain relative path"
            )
    return rel


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, with every link followed, is ``root`` or under it."""
    real_root = root.resolve()
    real = path.resolve()
    return real == real_root or real_root in real.parents


def source_files(loc: Location) -> dict[str, Location]:
    """The files under ``loc`` (a file lists itself), by safe relative name.

    Raises:
        PhalanxError: nothing there, a symbolic link in a local source, or a listed
            name that would leave the folder.
    """
    if _is_local(loc):
        return _local_files(Path(loc.path), loc)
    files = {rel: child for rel, (child, _) in list_files(loc).items()}
    for rel in files:
        safe_relpath(rel, f"{loc.url}: file")
    if not files:
        raise PhalanxError(f"{loc.url} holds no files; a model needs at least one")
    return files


def copy_in(files: dict[str, Location], dest: Path) -> list[ModelFile]:
    """Copy ``files`` into the new folder ``dest``, hashing as they stream; read-only after.

    Raises:
        PhalanxError: a source cannot be read, or the disk is full.
    """
    out: list[ModelFile] = []
    for rel in sorted(files):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        loc = files[rel]

        def copy(loc: Location = loc, target: Path = target, rel: str = rel) -> tuple[int, str]:
            with _open_source(loc, rel) as src, open(target, "wb") as dst:
                return _stream(src, dst)

        size, digest = retrying(loc.url, "read", copy)
        out.append(ModelFile(rel, size, digest))
    _make_read_only(dest)
    return out


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


Opener = Callable[["ModelFile"], AbstractContextManager[Readable]]


def copy_out(
    open_file: Opener, files: list[ModelFile], dest: Path, *, overwrite: bool, altered: str
) -> int:
    """Copy a version's files to ``dest``, each checked against its sha256.

    Every file is first copied (from ``open_file(f)``: the registry's folder, or a
    server's answer) and verified into a fresh folder inside ``dest``; only when
    all are good are they moved into place, so a failure writes nothing. No path
    component under ``dest`` may be a symbolic link, and a target that is a
    folder is refused.

    Args:
        altered: Ends the error for a file that does not match its hash (which copy
            was altered).

    Returns:
        Bytes copied.

    Raises:
        PhalanxError: a recorded name would leave ``dest``, a link or folder is in the
            way, a target exists and differs (without ``overwrite``), or the copy
            read no longer matches its hash.
    """
    dest.mkdir(parents=True, exist_ok=True)
    plan: list[tuple[ModelFile, Path]] = []
    for f in files:
        rel = safe_relpath(f.path, "recorded file")
        target = dest / rel
        check_no_links(dest, rel)
        if target.is_dir():
            raise PhalanxError(f"{target} is a folder where the model has a file; move it away")
        if target.exists() and not overwrite:
            if file_digest(target) == f.sha256:
                continue
            raise PhalanxError(
                f"{target} exists and differs from the model's {rel}; pass --overwrite or "
                "choose another --dest"
            )
        plan.append((f, target))
    staging = Path(tempfile.mkdtemp(prefix=".phalanx-download-", dir=dest))
    try:
        total = 0
        for i, (f, _) in enumerate(plan):
            with open_file(f) as src, open(staging / str(i), "xb") as dst:
                size, digest = _stream(src, dst)
            if digest != f.sha256 or size != f.size:
                raise PhalanxError(
                    f"the registry's copy of {f.path} no longer matches its sha256; {altered}"
                )
            total += size
        for i, (f, target) in enumerate(plan):
            check_no_links(dest, f.path)  # again: nothing changed under us since the plan
            target.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(staging / str(i), 0o644)
            os.replace(staging / str(i), target)  # a name, never followed
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return total


def check_no_links(dest: Path, rel: str) -> None:
    """Refuse a symbolic link at any component of ``rel`` under ``dest``."""
    here = dest
    for part in rel.split("/"):
        here = here / part
        if here.is_symlink():
            raise PhalanxError(
                f"{here} is a symbolic link (it could lead outside {dest}); remove it"
            )


def make_writable(folder: Path) -> None:
    """Undo :func:`copy_in`'s read-only bits so ``folder`` can be removed."""
    for root, dirs, _ in os.walk(folder):
        os.chmod(root, 0o755)
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)


def _stream(src: Readable, dst: BinaryIO) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    while chunk := src.read(CHUNK):
        digest.update(chunk)
        dst.write(chunk)
        size += len(chunk)
    dst.flush()
    os.fsync(dst.fileno())
    return size, digest.hexdigest()


def _open_source(loc: Location, rel: str) -> BinaryIO:
    """A source file, opened for reading. One on this machine is opened under the
    source's folder without following a link (the folder may be a running job's
    output, whose account could swap a file for a link after it was listed)."""
    if not _is_local(loc):
        return loc.fs.open(loc.path, "rb")
    path = Path(loc.path)
    root = path.parents[len(Path(rel).parts) - 1]
    try:
        return os.fdopen(open_beneath(root, rel), "rb")
    except OSError as exc:
        raise PhalanxError(
            f"{path}: not a plain file now ({exc.strerror}); the registry copies plain "
            "files only, and none through a link"
        ) from None


def _is_local(loc: Location) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(loc.fs, LocalFileSystem)


def _local_files(root: Path, loc: Location) -> dict[str, Location]:
    try:
        mode = root.lstat().st_mode
    except FileNotFoundError:
        raise PhalanxError(f"{root} not found; check --path") from None
    if stat.S_ISLNK(mode):
        raise PhalanxError(f"{root} is a symbolic link; give the folder or file it points to")
    if stat.S_ISREG(mode):
        return {root.name: loc}
    if not stat.S_ISDIR(mode):
        raise PhalanxError(f"{root} is neither a file nor a folder")
    files: dict[str, Location] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in sorted(dirs + names):
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                raise PhalanxError(
                    f"{path} is a symbolic link; the registry copies plain files only, so "
                    "copy what it points to into the folder instead"
                )
            if name in names:
                if not path.is_file():
                    raise PhalanxError(f"{path} is not a plain file; remove it from the folder")
                files[safe_relpath(rel, "file")] = loc.child(rel)
    if not files:
        raise PhalanxError(f"{root} holds no files; a model needs at least one")
    return files


def _make_read_only(folder: Path) -> None:
    for root, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            os.chmod(os.path.join(root, name), 0o444)
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o555)
