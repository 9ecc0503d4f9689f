"""Which files of an ImageNet-style folder are samples: torchvision's ``ImageFolder`` rule.

The same folder gives the same classes, labels and candidate samples as
``torchvision.datasets.ImageFolder(src)``, so a dataset converted by phalanx
counts what the scripts people already have count:

* the classes are the names of ``src``'s immediate sub-folders (a link to a
  folder counts), sorted; a sample's label is its class's position;
* each class folder is searched recursively, following links to folders, as
  ``os.walk(class_dir, followlinks=True)`` does: folders in sorted path order,
  file names sorted within each;
* a file is a sample when its name ends, ignoring case, with one of
  :data:`IMG_EXTENSIONS` (torchvision's ``IMG_EXTENSIONS``).

Names starting with a dot are not special (torchvision does not skip them):
a hidden folder of ``src`` is a class, and a hidden image is a sample.

Where phalanx differs, it says so in the skip list instead of failing later:
a link back to a folder that contains it is not followed (torchvision would
go round until the path is too long), and files that are not samples (another
extension, not a regular file, unreadable), sub-folders that cannot be listed
and such loops are reported with the reason. Hidden files that are not images
(``.DS_Store``) are left out without a report. Images that turn out corrupt are
reported by the converter, which is the first to read them.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from phalanx.data.shards import Skipped
from phalanx.errors import PhalanxError

#: torchvision's ``IMG_EXTENSIONS``: a file whose lower-cased name ends with one is a sample.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

EXPECTED = "expected an ImageNet-style folder: <src>/<class>/[<sub-folders>/]<image files>"
_NOT_AN_IMAGE = f"not an image: the name does not end with {', '.join(IMG_EXTENSIONS)}"


@dataclass(frozen=True)
class SourceFile:
    """One candidate image in the source folder."""

    rel: str
    """Path relative to the source folder, with ``/`` separators."""
    label: int
    size: int
    mtime: int


@dataclass(frozen=True)
class SourceScan:
    """What :func:`scan_imagefolder` found."""

    root: Path
    classes: list[str]
    files: list[SourceFile]
    skipped: list[Skipped]


def is_image_name(name: str) -> bool:
    """Whether torchvision's ``ImageFolder`` takes a file of this name as a sample."""
    return name.lower().endswith(IMG_EXTENSIONS)


def scan_imagefolder(src: Path) -> SourceScan:
    """List the samples of ``src`` by torchvision's rule (see the module doc).

    The listing is deterministic: classes sorted, each class's files in the
    order torchvision lists them.

    Raises:
        PhalanxError: ``src`` is missing, not a folder, has no class folders, or a
            class folder cannot be listed or holds no image files.
    """
    if not src.exists():
        raise PhalanxError(f"{src}: no such folder; {EXPECTED}")
    if not src.is_dir():
        raise PhalanxError(f"{src}: is a file; {EXPECTED}")
    classes = sorted(entry.name for entry in os.scandir(src) if entry.is_dir())
    if not classes:
        raise PhalanxError(f"{src}: has no class subfolders; {EXPECTED}")
    root_st = os.stat(src)
    files: list[SourceFile] = []
    skipped: list[Skipped] = []
    empty: list[str] = []
    for label, cls in enumerate(classes):
        count = len(files)
        for rel in _walk_class(src, cls, (root_st.st_dev, root_st.st_ino), skipped):
            name = rel.rsplit("/", 1)[-1]
            if not is_image_name(name):
                if not name.startswith("."):
                    skipped.append(Skipped(rel, _NOT_AN_IMAGE))
                continue
            try:
                st = os.stat(src / rel)
            except OSError as exc:  # a dangling link, say: report it, carry on
                skipped.append(Skipped(rel, f"cannot read file ({exc.strerror or exc})"))
                continue
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the converter
                skipped.append(Skipped(rel, "not a regular file"))
                continue
            files.append(SourceFile(rel, label, st.st_size, int(st.st_mtime)))
        if len(files) == count:
            empty.append(cls)
    if empty:
        names = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        raise PhalanxError(
            f"{src}: class folder(s) {names} hold no image files; {EXPECTED} "
            f"(remove empty class folders)"
        )
    return SourceScan(src, classes, files, skipped)


def _walk_class(src: Path, cls: str, root_id: tuple[int, int], skipped: list[Skipped]) -> list[str]:
    """Every non-folder below ``src/cls``, as ``/``-separated paths relative to ``src``.

    The order is torchvision's: ``sorted(os.walk(class_dir, followlinks=True))``
    sorts the folders by path, and the names within each folder are sorted.
    A link to ``src`` or to a folder above it on the current path is a loop: it
    is reported in ``skipped`` and not followed.
    """
    try:
        top = os.stat(src / cls)
    except OSError as exc:
        raise PhalanxError(f"{src / cls}: cannot list the folder ({exc.strerror})") from exc
    found: list[tuple[str, str]] = []  # (folder, name)
    # Folders to list, each with the folders above it (by device and inode → path).
    pending = [(cls, {root_id: "the source folder", (top.st_dev, top.st_ino): cls})]
    while pending:
        folder, above = pending.pop()
        try:
            entries = list(os.scandir(src / folder))
        except OSError as exc:
            if folder == cls:
                raise PhalanxError(f"{src / cls}: cannot list the folder ({exc.strerror})") from exc
            skipped.append(Skipped(folder, f"cannot list the folder ({exc.strerror or exc})"))
            continue
        for entry in entries:
            rel = f"{folder}/{entry.name}"
            try:
                is_dir = entry.is_dir()  # follows links, as os.walk does
            except OSError:
                is_dir = False
            if not is_dir:
                found.append((folder, entry.name))
                continue
            try:
                st = os.stat(entry.path)
            except OSError as exc:
                skipped.append(Skipped(rel, f"cannot list the folder ({exc.strerror or exc})"))
                continue
            ident = (st.st_dev, st.st_ino)
            if ident in above:
                skipped.append(
                    Skipped(
                        rel, f"a loop: links back to {above[ident]}, which holds it; not followed"
                    )
                )
                continue
            pending.append((rel, {**above, ident: rel}))
    return [f"{folder}/{name}" for folder, name in sorted(found)]
