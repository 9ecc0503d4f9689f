"""Checkpoints on object storage: the local layout, uploaded in commit order.

A :class:`~phalanx.train.checkpoint.Checkpointer` whose directory is a URI
(``azureml://datastores/<name>/paths/<path>``, ``az://``, ``abfs://``, ``s3://``;
see :mod:`phalanx.storage.uri`) keeps its checkpoints there, one ``step_<step>/``
prefix each, holding the same files as a local checkpoint. An object store has
no rename, but it writes each object whole (a reader sees all of it or nothing),
and the order of the writes is enough:

* **Writing.** The checkpoint is written to a local staging folder (under
  ``$TMPDIR``, which needs room for one checkpoint) by the same code as a local
  save, then uploaded: the data files, then ``manifest.json``, then, once the
  store lists each of them at its size, the empty ``COMMITTED`` marker, last.
  Readers consider only folders holding the marker, so a writer killed
  mid-upload leaves a folder without one, which every reader ignores.
* **Replacing** a step saved by someone else (a previous attempt): its marker
  is deleted first, then its other objects, then the new one is uploaded.
* **Deleting** (pruning): the marker first, then the rest, so a half-deleted
  checkpoint is never taken for a complete one. A folder without a marker is
  removed by a later prune once its step is below the newest committed one and
  nothing in it changed for :data:`~._fs.STALE_AFTER_S` (by the store's clock
  against this host's): a live writer, say a previous attempt still finishing,
  is left alone.
* **Loading** lists the folder, downloads the manifest and the files it lists
  into a local temporary folder, where they are checked exactly as locally.

Transient store errors are retried (:func:`phalanx.storage.transfer.retrying`);
a refused credential, a missing container or an unreachable endpoint ends as a
one-line :class:`~phalanx.errors.PhalanxError`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from logging import Logger
from pathlib import Path
from typing import Any

from fsspec.callbacks import Callback, NoOpCallback

from phalanx.errors import PhalanxError
from phalanx.storage.errors import check_reachable
from phalanx.storage.location import Location
from phalanx.storage.transfer import retrying
from phalanx.train.checkpoint import _fs, _manifest
from phalanx.train.checkpoint._fs import COMMITTED, MANIFEST
from phalanx.train.checkpoint._manifest import InvalidCheckpoint, describe
from phalanx.train.heartbeat import heartbeat


@dataclass(frozen=True)
class _Listed:
    """One ``step_<step>/`` prefix as the store lists it."""

    files: dict[str, int]
    """Size of each object directly in it, by name."""
    newest: float | None
    """When the newest of them was last modified (Unix time), if the store says."""

    @property
    def committed(self) -> bool:
        return COMMITTED in self.files


def open_folder(uri: str) -> Path | RemoteFolder:
    """The checkpoint folder ``uri`` names: a local one, or one on an object store.

    A datastore of type ``local`` is a plain folder, and gets the local code
    with its stronger guarantees (fsync, rename).

    Raises:
        PhalanxError: An unknown datastore, an unsupported scheme, or an
            endpoint that does not answer.
    """
    location = _resolve(uri)
    if _is_local(location):
        return Path(location.path)
    check_reachable(location.url)
    return RemoteFolder(uri, location)


def _resolve(uri: str) -> Location:
    from phalanx.storage.jobstores import resolve_here

    # In a job: the datastores its spec names (its own file), not the workspace's.
    return resolve_here(uri)


def _is_local(location: Location) -> bool:
    protocol = location.fs.protocol
    return bool({"file", "local"} & set((protocol,) if isinstance(protocol, str) else protocol))


class RemoteFolder:
    """A checkpoint folder on an object store; see the module docstring.

    Args:
        uri: The folder as the user wrote it; messages name objects by it.
        location: Where it resolved to.
    """

    def __init__(self, uri: str, location: Location) -> None:
        self.uri = uri.rstrip("/")
        self._location = location
        self._pid = os.getpid()

    def step_uri(self, step: int) -> str:
        """The URI of the checkpoint of ``step``, for messages and ``LoadedCheckpoint.path``."""
        return f"{self.uri}/{_fs.step_dirname(step)}"

    def committed_steps(self) -> dict[int, str]:
        """Committed checkpoints by step, in step order, as URIs; ``{}`` when there are none."""
        return {step: self.step_uri(step) for step, f in self._scan().items() if f.committed}

    def upload(self, staged: Path, step: int, data: list[str]) -> bool:
        """Upload a checkpoint written to ``staged``: ``data``, the manifest, then the marker.

        A folder already there for ``step`` is deleted first, marker first.

        Returns:
            Whether a committed checkpoint of ``step`` was replaced.

        Raises:
            PhalanxError: The store refused or failed (what was uploaded is
                removed if the store still lets us), or another writer uploaded
                into the same folder meanwhile.
        """
        folder = _fs.step_dirname(step)
        existing = self._list(folder)
        if existing.files:
            self._delete(folder, existing)
        names = [*data, MANIFEST]
        try:
            for name in names:  # the data first: the manifest vouches for it
                self._put(staged / name, f"{folder}/{name}")
        except Exception:
            # Best effort: a folder without a marker is ignored by readers, and a
            # later prune removes what this leaves.
            with contextlib.suppress(Exception):
                self._delete(folder, self._list(folder))
            raise
        expected = {name: (staged / name).stat().st_size for name in names}
        listed = self._list(folder).files
        if listed != expected:
            raise PhalanxError(
                f"{self.step_uri(step)}: after the upload the store lists {sorted(listed)} "
                f"rather than {sorted(expected)} at their sizes; is another process saving "
                "the same step into the same folder?"
            )
        # Last: from this object on, readers take the checkpoint as complete.
        loc, uri = self._at(f"{folder}/{COMMITTED}")
        retrying(uri, "write", lambda: loc.fs.pipe_file(loc.path, b""))
        return existing.committed

    def download(self, step: int, dest: Path) -> None:
        """Fetch the manifest of ``step`` and the files it lists into ``dest``, unchecked.

        A file the store lacks is skipped (the check after reports it missing);
        one it lists at another size than the manifest's is not fetched at all.

        Raises:
            InvalidCheckpoint: The manifest is missing or malformed, or a file's
                size differs from the manifest's.
            PhalanxError: The store refused or failed.
        """
        folder = _fs.step_dirname(step)
        listed = self._list(folder).files
        if MANIFEST in listed:
            self._get(f"{folder}/{MANIFEST}", dest / MANIFEST)
        manifest = _manifest.read(dest, step)
        for name, entry in manifest.files.items():
            size = listed.get(name)
            if size is None:
                continue
            if size != entry.size:
                raise InvalidCheckpoint(f"{name} is {size} bytes, the manifest says {entry.size}")
            self._get(f"{folder}/{name}", dest / name)

    def prune(self, keep_last: int, keep: int, log: Logger) -> None:
        """Delete committed checkpoints beyond the newest ``keep_last``, and stale leftovers.

        ``keep`` (the step just committed) survives even when newer steps exist.
        A deletion that fails is logged and the next one is still tried, so one
        stuck folder does not stop pruning for the rest of the run.
        """
        folders = self._scan()
        committed = [step for step, f in folders.items() if f.committed]
        spare = set(committed[-keep_last:]) | {keep}
        newest = committed[-1] if committed else -1
        now = time.time()
        for step, found in folders.items():
            if found.committed:
                if step in spare:
                    continue
                what = "old checkpoint"
            else:
                stale = found.newest is not None and now - found.newest > _fs.STALE_AFTER_S
                if step > newest or not stale:
                    continue  # maybe still being written
                log.info("removing %s, never committed", self.step_uri(step))
                what = "leftover"
            try:
                self._delete(_fs.step_dirname(step), found)
            except Exception as e:
                log.warning("could not delete %s %s: %s", what, self.step_uri(step), describe(e))

    # The store -----------------------------------------------------------------

    def _at(self, rel: str) -> tuple[Location, str]:
        """The location of ``rel`` (``""``: the folder) and its URI for messages."""
        # A forked child inherits a file system whose event loop cannot run there
        # (fsspec's async stores are not fork-safe): it opens its own.
        if self._pid != os.getpid():
            self._location, self._pid = _resolve(self.uri), os.getpid()
        if not rel:
            return self._location, self.uri
        return self._location.child(rel), f"{self.uri}/{rel}"

    def _find(self, rel: str) -> dict[str, Any]:
        """Every object under ``rel``, by path relative to it, with the store's details."""
        loc, uri = self._at(rel)

        def find() -> dict[str, Any]:
            loc.fs.invalidate_cache(loc.path)  # another process may have written since
            try:
                found: dict[str, Any] = loc.fs.find(loc.path, detail=True)
            except FileNotFoundError:
                return {}  # no folder is no checkpoint, as locally
            return found

        found = retrying(uri, "list", find)
        root = loc.fs._strip_protocol(loc.path).rstrip("/") + "/"
        return {
            path[len(root) :]: info
            for path, info in found.items()
            if path.startswith(root) and info.get("type", "file") == "file"
        }

    def _scan(self) -> dict[int, _Listed]:
        """Every ``step_<step>/`` prefix of the folder, in step order."""
        files: dict[int, dict[str, int]] = {}
        newest: dict[int, float | None] = {}
        for rel, info in self._find("").items():
            folder, _, name = rel.partition("/")
            step = _fs.step_of(folder)
            if step is None or not name or "/" in name:
                continue
            files.setdefault(step, {})[name] = int(info["size"])
            newest[step] = _later(newest.get(step, 0.0), _modified(info))
        return {step: _Listed(files[step], newest[step]) for step in sorted(files)}

    def _list(self, folder: str) -> _Listed:
        """The objects directly in ``folder`` (one ``step_<step>``); their times unread."""
        found = self._find(folder)
        return _Listed({n: int(info["size"]) for n, info in found.items() if "/" not in n}, None)

    def _put(self, source: Path, rel: str) -> None:
        loc, uri = self._at(rel)
        progress = _progress()
        retrying(uri, "write", lambda: loc.fs.put_file(str(source), loc.path, callback=progress))

    def _get(self, rel: str, target: Path) -> None:
        loc, uri = self._at(rel)
        progress = _progress()

        def get() -> None:
            # Deleted since it was listed (by another writer's prune): the check
            # after reports it missing, as it would a damaged checkpoint.
            with contextlib.suppress(FileNotFoundError):
                loc.fs.get_file(loc.path, str(target), callback=progress)

        retrying(uri, "read", get)

    def _delete(self, folder: str, listed: _Listed) -> None:
        """Delete the objects of ``folder``, its marker first and on its own."""
        names = sorted(listed.files, key=lambda name: name != COMMITTED)
        for name in names:
            loc, uri = self._at(f"{folder}/{name}")

            def remove(loc: Location = loc) -> None:
                with contextlib.suppress(FileNotFoundError):  # gone already: fine
                    loc.fs.rm_file(loc.path)

            retrying(uri, "delete", remove)


class _Heartbeat(Callback):
    """Tells phalanx's hang watchdog that a transfer is progress, at each chunk moved."""

    def call(self, *args: Any, **kwargs: Any) -> None:
        heartbeat()


def _progress() -> Callback:
    # A long upload by a synchronous save blocks the training loop, which is not
    # stuck; one in the async writer's thread must not hide a loop that is (the
    # store calls back from its own thread, so ask here who is transferring).
    main = threading.current_thread() is threading.main_thread()
    return _Heartbeat() if main else NoOpCallback()


def _modified(info: Mapping[str, Any]) -> float | None:
    """When an object was last modified, as adlfs, s3fs or gcsfs report it; ``None`` if not."""
    value = info.get("last_modified") or info.get("LastModified") or info.get("mtime")
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)).timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return _modified({"mtime": dt.datetime.fromisoformat(value)})
    return None


def _later(a: float | None, b: float | None) -> float | None:
    """The later of two times; unknown if either is (then a folder is never stale)."""
    return None if a is None or b is None else max(a, b)
