"""Shard sources for any datastore: the dataset's bytes through the node cache.

``open_source(uri)`` is what a training script calls with the value of a
``direct`` input (or any datastore URI, URL or local folder)::

    ds = ShardDataset(open_source(os.environ["PHALANX_INPUT_TRAIN"]), transform=...)

A local folder is read in place. Anything else goes through the node cache:
the first epoch downloads each shard once per node (every rank and DataLoader
worker of the node shares the copy), later epochs read local disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from phalanx.data.shards import INDEX_NAME
from phalanx.data.stream import LocalShardSource, ShardSource
from phalanx.errors import PhalanxError
from phalanx.storage.location import Location


class CachedShardSource:
    """Shards of a dataset on a datastore, fetched into the node cache and pinned while read.

    Picklable: it holds the URI, and each process resolves it (and opens the
    cache) on first use, so no credential or open connection crosses a fork.

    Args:
        uri: The dataset's folder: a datastore URI, a data asset, or a URL.
        cache_dir: The node cache's folder; from ``PHALANX_CACHE_*`` when ``None``.
    """

    verifies_sha256 = True
    """The cache checks a shard's SHA-256 when it downloads it (and its size and stamp on
    every hit), so the dataset need not hash it again each epoch."""

    def __init__(self, uri: str, cache_dir: str | None = None) -> None:
        self.uri = uri
        self.cache_dir = cache_dir
        self._loc: Location | None = None
        self._cache: Any = None
        self._pid = 0

    def __repr__(self) -> str:
        return f"CachedShardSource({self.uri!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "cache_dir": self.cache_dir,
            "_loc": None,
            "_cache": None,
            "_pid": 0,
        }

    def _open(self) -> tuple[Location, Any]:
        # A forked DataLoader worker inherits the parent's file system object, whose
        # event loop cannot run in the child (fsspec's async stores are not fork-safe).
        if self._loc is None or self._pid != os.getpid():
            self._pid = os.getpid()
            from phalanx.storage.cache import NodeCache
            from phalanx.storage.jobstores import resolve_here

            # In a job: the datastores its spec names (its own file), not the workspace's.
            self._loc = resolve_here(self.uri)
            self._cache = (
                NodeCache(Path(self.cache_dir)) if self.cache_dir else NodeCache.from_env()
            )
        return self._loc, self._cache

    def index(self) -> dict[str, Any]:
        """The parsed ``index.json``, read from the store (it is small, and may be replaced)."""
        from phalanx.storage.errors import storage_errors

        loc, _ = self._open()
        index = loc.child(INDEX_NAME)
        with storage_errors(index.url):
            raw = loc.fs.cat_file(index.path)
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise PhalanxError(f"{index.url}: cannot read it as JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise PhalanxError(f"{index.url}: expected a JSON object")
        return doc

    @contextmanager
    def open_shard(
        self, name: str, sha256: str, size: int, *, refetch: bool = False
    ) -> Iterator[Path]:
        """The cached copy of shard ``name`` (verified against ``sha256`` when fetched)."""
        loc, cache = self._open()
        with cache.pinned(loc.child(name), size=size, sha256=sha256, verify=refetch) as path:
            yield path


def open_source(uri: str, cache_dir: str | None = None) -> ShardSource:
    """The shard source for ``uri``: in place for a local folder, else through the node cache."""
    from phalanx.storage.uri import is_uri

    if not is_uri(uri):
        return LocalShardSource(uri.removeprefix("file://"))
    return CachedShardSource(uri, cache_dir)
