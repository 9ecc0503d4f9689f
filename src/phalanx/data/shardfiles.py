"""Shard files: where a dataset's bytes come from, and reading one shard.

A :class:`ShardSource` hands out local copies of shards (a folder read in place,
or the node cache in front of a datastore); :class:`OpenShard` checks one
copy (size, optionally SHA-256, tar structure) and serves its samples by
position; :class:`Prefetcher` opens the next shards of a DataLoader worker on
a background thread so downloads overlap decoding. :mod:`phalanx.data.stream`
builds the dataset on these.
"""

from __future__ import annotations

import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from phalanx.data.shards import INDEX_NAME, ShardIndex, ShardInfo
from phalanx.errors import PhalanxError
from phalanx.hashing import file_digest


class ShardSource(Protocol):
    """Where a dataset's bytes come from: a local folder, a node cache in front of a datastore."""

    def index(self) -> dict[str, Any]:
        """The parsed ``index.json``."""
        ...

    def open_shard(
        self, name: str, sha256: str, size: int, *, refetch: bool = False
    ) -> AbstractContextManager[Path]:
        """A local path to a complete copy of shard ``name``, kept while the context is open.

        ``refetch=True`` discards any copy already held and fetches the shard again.
        """
        ...


class LocalShardSource:
    """Shards read in place from a local folder (``refetch`` has nothing to redo).

    Args:
        root: The folder holding ``index.json`` and the shards.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalShardSource({str(self.root)!r})"

    def index(self) -> dict[str, Any]:
        """The parsed ``index.json`` under the root."""
        path = self.root / INDEX_NAME
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise PhalanxError(f"{path}: no such file; is {self.root} a sharded dataset?") from None
        except (OSError, ValueError) as exc:
            raise PhalanxError(f"{path}: cannot read it as JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise PhalanxError(f"{path}: expected a JSON object")
        return doc

    @contextmanager
    def open_shard(
        self, name: str, sha256: str, size: int, *, refetch: bool = False
    ) -> Iterator[Path]:
        """The shard's path under the root."""
        path = self.root / name
        if not path.is_file():
            raise PhalanxError(f"{path}: shard listed in index.json is missing")
        yield path


def parse_index(doc: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[ShardInfo, ...]]:
    """Classes and shards from an ``index.json`` document; raises PhalanxError if malformed.

    On top of :meth:`ShardIndex.from_doc`'s checks: a shard name is a plain file name (an
    index must not send a reader outside the dataset's folder), and the dataset is not empty.
    """
    index = ShardIndex.from_doc(doc)
    for s in index.shards:
        if Path(s.name).name != s.name or s.name in ("", ".", ".."):
            raise PhalanxError(
                f"{INDEX_NAME}: shard name {s.name!r} is not a plain file name; "
                "re-run the conversion to rebuild the dataset"
            )
    if index.samples == 0:
        raise PhalanxError(f"{INDEX_NAME}: the dataset holds no samples")
    return tuple(index.classes), tuple(index.shards)


class _Damaged(Exception):
    """A local shard copy that cannot be used; worth one more fetch."""


class OpenShard:
    """A checked local shard: where each sample's image lies, and its label."""

    def __init__(self, path: Path, shard: ShardInfo, *, verify: bool) -> None:
        if (actual := path.stat().st_size) != shard.bytes:
            raise _Damaged(f"has {actual} bytes, index.json says {shard.bytes}")
        if verify and (digest := file_digest(path)) != shard.sha256:
            raise _Damaged(f"has sha256 {digest}, index.json says {shard.sha256}")
        self.path = path
        self._images: list[tuple[int, int]] = []
        self.labels: list[int] = []
        # Key up to the first dot, as WebDataset and the converter split it.
        members: dict[str, dict[str, tarfile.TarInfo]] = {}
        try:
            with tarfile.open(path, mode="r:") as tar:
                for m in tar:
                    key, _, ext = m.name.rsplit("/", 1)[-1].partition(".")
                    if m.isfile() and ext in ("jpg", "cls"):
                        members.setdefault(key, {})[ext] = m
                for key, parts in members.items():
                    if len(parts) != 2:
                        raise _Damaged(f"sample {key!r} lacks its .jpg or .cls member")
                    text = tar.extractfile(parts["cls"]).read().strip()  # type: ignore[union-attr]
                    if not text.isdigit():
                        raise _Damaged(f"sample {key!r} has label {text[:20]!r}")
                    self.labels.append(int(text))
                    self._images.append((parts["jpg"].offset_data, parts["jpg"].size))
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise _Damaged(f"is not a readable tar ({exc})") from exc
        if len(self._images) != shard.samples:
            raise _Damaged(f"holds {len(self._images)} samples, index.json says {shard.samples}")
        self._file: Any = None

    def read(self, j: int) -> tuple[bytes, int]:
        """Sample ``j``'s image bytes and label."""
        if self._file is None:
            self._file = open(self.path, "rb")  # noqa: SIM115 -- closed by close()
        offset, size = self._images[j]
        self._file.seek(offset)
        return self._file.read(size), self.labels[j]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_checked(
    source: ShardSource, shard: ShardInfo, verify: bool
) -> tuple[AbstractContextManager[Path], OpenShard]:
    """Open and check ``shard``, fetching it once more if the copy is damaged."""
    problem = ""
    for refetch in (False, True):
        ctx = source.open_shard(shard.name, shard.sha256, shard.bytes, refetch=refetch)
        path = ctx.__enter__()
        try:
            return ctx, OpenShard(path, shard, verify=verify)
        except _Damaged as exc:
            problem = str(exc)
            ctx.__exit__(None, None, None)
        except BaseException as exc:
            ctx.__exit__(type(exc), exc, exc.__traceback__)
            raise
    raise PhalanxError(
        f"shard {shard.name} {problem}, also after fetching it again; the stored copy is "
        f"damaged: re-run the conversion or re-upload the shard"
    )


Opener = Callable[[int], tuple[AbstractContextManager[Path], OpenShard]]


class Prefetcher:
    """Opens a worker's shards, in order of use, on a thread running ``depth`` ahead.

    The thread both enters and exits the sources' contexts, since a cache's pin
    (a file lock, say) may belong to the thread that took it.
    """

    def __init__(self, open_one: Opener, count: int, depth: int) -> None:
        self._open_one, self._count, self._depth = open_one, count, depth
        self._cond = threading.Condition()
        self._wanted = -1  # highest index asked for
        self._next = 0  # the next index to open; only the thread changes it
        self._ready: dict[int, OpenShard] = {}
        self._release: list[int] = []
        self._error: BaseException | None = None
        self._closing = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="phalanx-prefetch", daemon=True)
        self._thread.start()

    def get(self, i: int) -> OpenShard:
        """Shard ``i`` (in order of use), waiting for it if it is not open yet."""
        with self._cond:
            self._wanted = max(self._wanted, i)
            self._cond.notify_all()
            self._cond.wait_for(lambda: i in self._ready or self._error is not None)
            if i in self._ready:
                return self._ready.pop(i)
            assert self._error is not None
            raise self._error

    def release(self, i: int) -> None:
        """Give shard ``i`` back to its source."""
        with self._cond:
            self._release.append(i)
            self._cond.notify_all()

    def close(self) -> None:
        """Release every shard and stop the thread."""
        if os.getpid() != self._pid:
            # A forked child collecting its copy of a reader: the thread and the pins
            # live in the parent, and the lock may have been copied held.
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        held: dict[int, AbstractContextManager[Path]] = {}
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(
                        lambda: bool(self._release) or self._closing or self._may_open()
                    )
                    release, self._release = self._release, []
                    if self._closing:
                        return
                    opening = self._may_open()
                try:
                    for i in release:
                        held.pop(i).__exit__(None, None, None)
                    if not opening:
                        continue
                    ctx, shard = self._open_one(self._next)
                except BaseException as exc:  # the consumer raises it at its next get()
                    with self._cond:
                        self._error = self._error or exc
                        self._cond.notify_all()
                    continue  # keep serving releases until closed
                held[self._next] = ctx
                with self._cond:
                    self._ready[self._next] = shard
                    self._cond.notify_all()
                self._next += 1
        finally:
            for ctx in held.values():
                ctx.__exit__(None, None, None)

    def _may_open(self) -> bool:
        """Whether the thread should open the next shard now (called holding the lock)."""
        i = self._next
        return self._error is None and i < self._count and i <= self._wanted + self._depth
