"""The sharded dataset format: tar shards of JPEG samples and the ``index.json`` beside them.

A dataset is a folder (on any datastore) holding::

    shard-000000.tar
    shard-000001.tar
    ...
    index.json          # written last: its presence means the dataset is complete

Each shard is a POSIX (ustar) tar file whose members come in pairs, grouped by
key the way WebDataset reads them: ``<key>.jpg`` (a baseline RGB JPEG) then
``<key>.cls`` (the class index as ASCII decimal). Keys are unique within the
dataset and contain no dot, because WebDataset splits key from extension at the
first dot. Shards are byte-for-byte deterministic: members in the order written,
mtime 0, uid/gid 0, empty user/group names, mode 0o644.

``index.json``::

    {"format": "phalanx-shards", "version": 1,
     "classes": ["n01440764", ...],            # sorted class folder names; label = position
     "samples": 1281167,
     "shards": [{"name": "shard-000000.tar", "samples": 2302,
                 "bytes": 268431360, "sha256": "..."}, ...],
     "source": {...},                           # optional counts from the converter
     "skipped": [{"path": "n01440764/x.JPEG", "reason": "..."}]}
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from phalanx.errors import PhalanxError

if TYPE_CHECKING:
    from phalanx.storage.location import Location

FORMAT = "phalanx-shards"
VERSION = 1
INDEX_NAME = "index.json"
IMAGE_EXT = "jpg"
LABEL_EXT = "cls"
_MEMBER_MODE = 0o644
_MAX_KEY = 90  # ustar names hold 100 bytes; leave room for ".jpg"/".cls"


def shard_name(number: int) -> str:
    """The file name of shard ``number`` (``shard-000000.tar``)."""
    return f"shard-{number:06d}.tar"


@dataclass(frozen=True)
class ShardInfo:
    """One shard as ``index.json`` records it."""

    name: str
    """File name relative to the dataset root (``shard-000000.tar``)."""
    samples: int
    """Number of (image, label) pairs in the shard."""
    bytes: int
    """Size of the shard file."""
    sha256: str
    """Hex SHA-256 of the shard file."""


@dataclass(frozen=True)
class Skipped:
    """A source file the converter could not use, and why."""

    path: str
    """Path relative to the source folder, with ``/`` separators."""
    reason: str
    """What went wrong, for people."""


@dataclass(frozen=True)
class ShardIndex:
    """The contents of ``index.json``: what a complete dataset holds."""

    classes: list[str]
    """Class names; a sample's label is its class's position in this list."""
    samples: int
    """Total samples over all shards."""
    shards: list[ShardInfo]
    """The shards, in order."""
    source: dict[str, Any] = field(default_factory=dict)
    """Free-form counts from whatever produced the dataset."""
    skipped: list[Skipped] = field(default_factory=list)
    """Source files left out, with the reason."""

    def to_json(self) -> str:
        """The index as deterministic, human-readable JSON text."""
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "classes": self.classes,
            "samples": self.samples,
            "shards": [asdict(s) for s in self.shards],
            "source": self.source,
            "skipped": [asdict(s) for s in self.skipped],
        }
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str = INDEX_NAME) -> ShardIndex:
        """Parse and validate index text.

        Args:
            text: The JSON document.
            where: Names the file in error messages (a path or URL).

        Raises:
            PhalanxError: The text is not JSON or a field is missing or malformed.
        """
        try:
            doc = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PhalanxError(f"{where}: not a valid JSON document ({exc})") from exc
        return cls.from_doc(doc, where=where)

    @classmethod
    def from_doc(cls, doc: Any, *, where: str = INDEX_NAME) -> ShardIndex:
        """Validate an already parsed index document; see :meth:`from_json`."""
        fix = "re-run `phalanx data convert` to rebuild the dataset"
        if not isinstance(doc, dict):
            raise PhalanxError(f"{where}: expected a JSON object; {fix}")
        if doc.get("format") != FORMAT:
            raise PhalanxError(
                f"{where}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}; "
                f"this is not a phalanx sharded dataset"
            )
        if doc.get("version") != VERSION:
            raise PhalanxError(
                f"{where}: field 'version' is {doc.get('version')!r}; this phalanx reads "
                f"version {VERSION}; {fix}"
            )
        classes = _field(doc, "classes", list, where)
        if not all(isinstance(c, str) for c in classes):
            raise PhalanxError(f"{where}: field 'classes' must be a list of strings; {fix}")
        samples = _count(doc, "samples", where)
        shards = [
            ShardInfo(
                name=_field(s, "name", str, f"{where}: shards[{i}]"),
                samples=_count(s, "samples", f"{where}: shards[{i}]"),
                bytes=_count(s, "bytes", f"{where}: shards[{i}]"),
                sha256=_field(s, "sha256", str, f"{where}: shards[{i}]"),
            )
            for i, s in enumerate(_records(doc, "shards", where))
        ]
        skipped = [
            Skipped(
                path=_field(s, "path", str, f"{where}: skipped[{i}]"),
                reason=_field(s, "reason", str, f"{where}: skipped[{i}]"),
            )
            for i, s in enumerate(_records(doc, "skipped", where, required=False))
        ]
        total = sum(s.samples for s in shards)
        if total != samples:
            raise PhalanxError(
                f"{where}: field 'samples' is {samples} but the shards hold {total}; {fix}"
            )
        source = doc.get("source", {})
        if not isinstance(source, dict):
            raise PhalanxError(f"{where}: field 'source' must be an object; {fix}")
        return cls(classes=classes, samples=samples, shards=shards, source=source, skipped=skipped)


def _field(doc: Any, name: str, kind: type, where: str) -> Any:
    if not isinstance(doc, dict) or name not in doc:
        raise PhalanxError(f"{where}: missing field {name!r}; the index is incomplete or damaged")
    value = doc[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PhalanxError(
            f"{where}: field {name!r} must be a {kind.__name__}, not {type(value).__name__}"
        )
    return value


def _count(doc: Any, name: str, where: str) -> int:
    value: int = _field(doc, name, int, where)
    if value < 0:
        raise PhalanxError(f"{where}: field {name!r} must not be negative")
    return value


def _records(doc: dict[str, Any], name: str, where: str, *, required: bool = True) -> list[Any]:
    if not required and name not in doc:
        return []
    records: list[Any] = _field(doc, name, list, where)
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise PhalanxError(f"{where}: {name}[{i}] must be an object")
    return records


def read_index(root: Location) -> ShardIndex:
    """Read and validate ``index.json`` of the dataset at ``root``.

    Raises:
        PhalanxError: There is no index (the dataset is missing or its conversion did not
            finish) or the index is malformed.
    """
    loc = root.child(INDEX_NAME)
    try:
        with loc.fs.open(loc.path, "rb") as f:
            text = f.read()
    except FileNotFoundError as exc:
        raise PhalanxError(
            f"{loc.url}: not found; {root.url} is not a complete phalanx dataset "
            f"(run `phalanx data convert`, or let an interrupted conversion finish)"
        ) from exc
    return ShardIndex.from_json(text, where=loc.url)


class _HashingSink:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        return self._out.write(data)


class ShardWriter:
    """Writes one shard to a local file, deterministically.

    Use as a context manager; :meth:`close` (or leaving the block) finishes the tar
    and returns the shard's :class:`ShardInfo`::

        with ShardWriter(tmp, "shard-000000.tar") as w:
            w.write("n01440764_00000000", jpeg_bytes, 0)
        info = w.info
    """

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.info: ShardInfo | None = None
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._sink = _HashingSink(self._file)
        # Stream mode ("w|") needs nothing but write(), so the sink sees every byte.
        sink = cast("IO[bytes]", self._sink)
        self._tar = tarfile.open(fileobj=sink, mode="w|", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        self._samples = 0

    def write(self, key: str, jpeg: bytes, label: int) -> None:
        """Append one sample: ``<key>.jpg`` then ``<key>.cls``."""
        if not key or "." in key or "/" in key or len(key) > _MAX_KEY or not key.isascii():
            raise ValueError(f"invalid shard key {key!r}: need 1-{_MAX_KEY} ASCII chars, no . or /")
        if label < 0:
            raise ValueError(f"invalid label {label} for {key!r}")
        self._add(f"{key}.{IMAGE_EXT}", jpeg)
        self._add(f"{key}.{LABEL_EXT}", str(label).encode("ascii"))
        self._samples += 1

    def _add(self, name: str, data: bytes) -> None:
        member = tarfile.TarInfo(name)
        member.size = len(data)
        member.mtime = 0
        member.mode = _MEMBER_MODE
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        self._tar.addfile(member, io.BytesIO(data))

    def close(self) -> ShardInfo:
        """Finish the tar and return its record; idempotent."""
        if self.info is None:
            self._tar.close()
            self._file.close()
            self.info = ShardInfo(
                name=self.name,
                samples=self._samples,
                bytes=self._sink.bytes,
                sha256=self._sink.sha256.hexdigest(),
            )
        return self.info

    def abort(self) -> None:
        """Close the file without finishing the tar (the caller deletes it)."""
        self._file.close()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def iter_samples(
    shard: str | Path | IO[bytes], *, name: str | None = None
) -> Iterator[tuple[str, bytes, int]]:
    """Stream ``(key, jpeg_bytes, label)`` out of one shard, in stored order.

    Members with extensions other than ``.jpg``/``.cls`` are ignored, so later
    versions may add fields.

    Args:
        shard: A local path or a readable binary file object (read sequentially).
        name: Names the shard in error messages; defaults to the path.

    Raises:
        PhalanxError: The shard is not a readable tar, or a sample lacks its image or
            label, or a label is not a non-negative integer.
    """
    if isinstance(shard, (str, Path)):
        with open(shard, "rb") as f:
            yield from iter_samples(f, name=name or str(shard))
        return
    where = name or getattr(shard, "name", None) or "shard"
    key: str | None = None
    parts: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=shard, mode="r|") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                base = member.name.rsplit("/", 1)[-1]
                member_key, _, ext = base.partition(".")
                if ext not in (IMAGE_EXT, LABEL_EXT):
                    continue
                if member_key != key:
                    if key is not None:
                        yield _sample(key, parts, where)
                    key, parts = member_key, {}
                if ext in parts:
                    raise PhalanxError(f"{where}: sample {key!r} has two .{ext} members")
                data = tar.extractfile(member)
                assert data is not None  # a regular file always has data
                parts[ext] = data.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise PhalanxError(
            f"{where}: not a readable shard ({exc}); the file is damaged or truncated, "
            f"re-run the conversion or re-upload it"
        ) from exc
    if key is not None:
        yield _sample(key, parts, where)


def _sample(key: str, parts: dict[str, bytes], where: str) -> tuple[str, bytes, int]:
    if IMAGE_EXT not in parts or LABEL_EXT not in parts:
        missing = IMAGE_EXT if IMAGE_EXT not in parts else LABEL_EXT
        raise PhalanxError(
            f"{where}: sample {key!r} has no .{missing} member; the shard is damaged"
        )
    text = parts[LABEL_EXT].strip()
    if not text.isdigit():
        raise PhalanxError(f"{where}: sample {key!r} has label {text[:20]!r}, not a class index")
    return key, parts[IMAGE_EXT], int(text)
