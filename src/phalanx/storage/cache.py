"""The node-local cache: one folder per machine through which every rank reads remote files.

Ranks, DataLoader workers and jobs on one node share the folder; each remote file is
downloaded once, verified, and kept until evicted, least recently used first. Layout::

    <root>/                  $PHALANX_CACHE_DIR, else $PHALANX_HOME/cache, else ~/.phalanx/cache
      _lock                  held briefly while the size ledger changes or entries are evicted
      _ledger.json           bytes held and reserved: a hint, corrected by a full scan
      ab/abcd…/              one folder per URL, named sha256(url), sharded on two digits
        train-0001.tar       the verified copy, named after the remote file
        _meta.json           remote identity, local stamp, sha256; its mtime is the last access
        _lock                exclusive while a process checks or downloads the entry
        _pin                 shared by every process pinning the entry
        _tmp.<size>.<id>     a download in progress (stale when ``_lock`` is free)

All coordination is ``flock``: a lock vanishes with its process, so a SIGKILLed rank leaves
no pin and no stuck download behind. The root must be on a local disk (flock over NFS is
unreliable). A :class:`NodeCache` holds no open file between calls, so it survives fork.

Environment (:meth:`NodeCache.from_env`): ``PHALANX_CACHE_DIR``; ``PHALANX_CACHE_MAX``, the
cap on cached bytes; ``PHALANX_CACHE_MIN_FREE``, disk space to leave free (sizes as
:func:`parse_size` reads them); ``PHALANX_CACHE_LOCK_TIMEOUT``, seconds to wait for another
process's download (default 600).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.sizes import human_size, parse_size
from phalanx.storage import cache_entries as disk
from phalanx.storage.location import Location
from phalanx.storage.transfer import RemoteInfo, copy_problem, download, remote_info

log = logging.getLogger(__name__)

DIR_ENV = "PHALANX_CACHE_DIR"
MAX_ENV = "PHALANX_CACHE_MAX"
MIN_FREE_ENV = "PHALANX_CACHE_MIN_FREE"
TIMEOUT_ENV = "PHALANX_CACHE_LOCK_TIMEOUT"
HOME_ENV = "PHALANX_HOME"  # as phalanx.workspace.layout, not imported: ranks need no SQLite

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class CacheUsage:
    """What the cache holds, from a full scan."""

    root: Path
    entries: int
    """Complete entries."""
    bytes: int
    """Bytes of their copies (metadata and lock files not counted)."""
    pinned: int
    """Entries pinned by some process right now."""
    max_bytes: int | None
    min_free_bytes: int | None


class NodeCache:
    """A cache folder shared by every process on this machine.

    Args:
        root: The cache folder; created if missing. Put it on a local disk.
        max_bytes: Cap on the bytes of cached copies; ``None`` for no cap.
        min_free_bytes: Disk space to leave free on the cache's file system; ``None`` for none.
        lock_timeout: Seconds to wait for another process working on the same entry.

    Raises:
        PhalanxError: ``root`` cannot be created.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int | None = None,
        min_free_bytes: int | None = None,
        lock_timeout: float = 600.0,
    ) -> None:
        for name, value in (("max_bytes", max_bytes), ("min_free_bytes", min_free_bytes)):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if lock_timeout <= 0:
            raise ValueError(f"lock_timeout must be > 0, got {lock_timeout}")
        self.root = Path(root).expanduser().absolute()
        self.max_bytes = max_bytes
        self.min_free_bytes = min_free_bytes
        self.lock_timeout = lock_timeout
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PhalanxError(
                f"cannot create the node cache folder {self.root}: {exc.strerror}; "
                f"set {DIR_ENV} to a writable folder on a local disk"
            ) from exc

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NodeCache:
        """The cache the environment describes (see the module docstring).

        Raises:
            PhalanxError: A variable does not hold a valid size or number of seconds.
        """
        env = os.environ if environ is None else environ
        if env.get(DIR_ENV):
            root = Path(env[DIR_ENV]).expanduser()
        elif env.get(HOME_ENV):
            root = Path(env[HOME_ENV]).expanduser() / "cache"
        else:
            # The workspace's default home, as the supervisor passes it to every rank.
            root = Path.home() / ".phalanx" / "cache"
        sizes: dict[str, int | None] = {}
        for var in (MAX_ENV, MIN_FREE_ENV):
            try:
                sizes[var] = parse_size(env[var]) if env.get(var, "").strip() else None
            except ValueError as exc:
                raise PhalanxError(f"{var}={env[var]!r}: {exc}") from exc
        timeout = env.get(TIMEOUT_ENV, "").strip() or "600"
        try:
            seconds = float(timeout)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            raise PhalanxError(f"{TIMEOUT_ENV}={timeout!r}: give a positive number of seconds")
        return cls(
            root.resolve(),
            max_bytes=sizes[MAX_ENV],
            min_free_bytes=sizes[MIN_FREE_ENV],
            lock_timeout=seconds,
        )

    def fetch(
        self,
        loc: Location,
        *,
        size: int | None = None,
        sha256: str | None = None,
        etag_check: bool = True,
        verify: bool = False,
    ) -> Path:
        """A local path to a complete, verified copy of the file at ``loc``.

        A cache hit costs a ``stat`` and, with ``etag_check``, one metadata call to the store;
        the copy is re-hashed only when it changed locally or ``verify`` is set. Use
        :meth:`pinned` when the copy must outlive other processes' evictions.

        Args:
            loc: The remote file; ``loc.url`` is the cache key.
            size: Its expected size in bytes, when known.
            sha256: Its expected SHA-256 (hex): checked on download and on a changed copy.
            etag_check: Ask the store whether the object changed since it was cached.
                ``False`` trusts the cached copy (no call to the store on a hit).
            verify: Re-hash the cached copy even if nothing suggests it changed.

        Raises:
            PhalanxError: The file is missing or unreadable, does not match ``size`` /
                ``sha256`` after a second download, does not fit in the cache, or another
                process held the entry longer than ``lock_timeout``.
        """
        if sha256 is not None:
            if not _SHA256_RE.fullmatch(sha256.lower()):
                raise PhalanxError(f"sha256 for {loc.url} must be 64 hex digits, got {sha256!r}")
            sha256 = sha256.lower()
        remote = remote_info(loc) if etag_check else None
        folder = self._folder(loc.url)
        folder.mkdir(parents=True, exist_ok=True)
        with self._hold(folder / disk.LOCK, f"download {loc.url}"):
            meta = disk.Meta.load(folder)
            data = folder / disk.data_name(loc.url)
            if meta is not None and self._valid(data, meta, loc.url, remote, size, sha256, verify):
                disk.touch(folder)
                return data
            self._drop(data, folder)
            return self._download(loc, data, remote, size, sha256)

    @contextmanager
    def pinned(
        self,
        loc: Location,
        *,
        size: int | None = None,
        sha256: str | None = None,
        etag_check: bool = True,
        verify: bool = False,
    ) -> Iterator[Path]:
        """:meth:`fetch`, keeping the copy from eviction until the block ends.

        The pin is a shared ``flock``: any number of processes may hold it, and it goes away
        with a killed process. It does not stop a fetch from replacing the copy when the
        object changed on the store; files already open keep reading the old one.
        """
        folder = self._folder(loc.url)
        folder.mkdir(parents=True, exist_ok=True)
        with self._hold(folder / disk.PIN, f"pin {loc.url}", shared=True):
            yield self.fetch(loc, size=size, sha256=sha256, etag_check=etag_check, verify=verify)

    def usage(self) -> CacheUsage:
        """What the cache holds now (scans every entry)."""
        with self._ledger() as ledger:
            entries = self._rescan(ledger)
            complete = [e for e in entries if e.data is not None]
            pinned = 0
            for entry in complete:
                fd = disk.acquire(entry.folder / disk.PIN, shared=False, timeout=0)
                pinned += fd is None
                if fd is not None:
                    os.close(fd)
        return CacheUsage(
            root=self.root,
            entries=len(complete),
            bytes=sum(e.size for e in complete),
            pinned=pinned,
            max_bytes=self.max_bytes,
            min_free_bytes=self.min_free_bytes,
        )

    def clear(self) -> int:
        """Remove every entry not pinned or being downloaded; the bytes freed."""
        freed = 0
        with self._ledger() as ledger:
            for entry in self._rescan(ledger):
                if disk.remove_entry(entry.folder):
                    freed += entry.size
                    ledger.bytes -= entry.size
        return freed

    def evict(self, bytes_needed: int) -> int:
        """Make room for ``bytes_needed`` more bytes within the limits, LRU first.

        Returns:
            The bytes freed (0 when there is room already or no limit is set).

        Raises:
            PhalanxError: Not enough unpinned entries to free.
        """
        with self._ledger() as ledger:
            return self._make_room(ledger, bytes_needed, f"{human_size(bytes_needed)} more")

    # -- entries --------------------------------------------------------------------------

    def _folder(self, url: str) -> Path:
        digest = hashlib.sha256(url.encode()).hexdigest()
        return self.root / digest[:2] / digest

    def _valid(
        self,
        data: Path,
        meta: disk.Meta,
        url: str,
        remote: RemoteInfo | None,
        size: int | None,
        sha256: str | None,
        verify: bool,
    ) -> bool:
        """Whether the cached ``data`` is a good copy; re-hashes (and re-stamps) if needed."""
        if meta.url != url:
            return False
        if remote is not None and not meta.remote.same_object(remote):
            log.info("%s changed on the store; downloading it again", url)
            return False
        if size is not None and meta.remote.size != size:
            return False
        if sha256 is not None and meta.sha256 not in (None, sha256):
            return False  # verified earlier as other content than the caller wants now
        try:
            st = data.stat()
        except FileNotFoundError:
            return False
        if st.st_size != meta.remote.size:
            log.warning("cached copy of %s is %d bytes, not %d", url, st.st_size, meta.remote.size)
            return False
        changed = disk.stamp(st) != meta.stamp
        reference = sha256 or meta.sha256
        if not (verify or changed or (sha256 is not None and meta.sha256 is None)):
            return True
        if reference is None and meta.remote.md5 is None:
            return not changed  # modified in place and nothing to check it against
        problem = copy_problem(data, meta.remote, reference)
        if problem is not None:
            log.warning("cached copy of %s is damaged (%s); downloading it again", url, problem)
            return False
        disk.Meta(url, meta.remote, disk.stamp(data.stat()), reference).save(data.parent)
        return True

    def _drop(self, data: Path, folder: Path) -> None:
        """Remove an invalid copy and any dead download (the caller holds the entry lock).

        Files that count towards the ledger change only under its lock, with the ledger:
        a scan in between would otherwise count them once too few or too many.
        """
        (folder / disk.META).unlink(missing_ok=True)
        stale = list(folder.glob(f"{disk.TMP}*"))
        if not stale and not data.exists():
            return  # the usual miss: nothing to account for
        with self._ledger() as ledger:
            with suppress(FileNotFoundError):
                size = data.stat().st_size
                data.unlink()
                ledger.bytes -= size
            for tmp in stale:
                tmp.unlink()
                ledger.bytes -= disk.announced(tmp.name)
                ledger.pending -= disk.announced(tmp.name)

    def _download(
        self,
        loc: Location,
        data: Path,
        remote: RemoteInfo | None,
        size: int | None,
        sha256: str | None,
    ) -> Path:
        problem = ""
        for attempt in (1, 2):
            if remote is None or attempt == 2:  # re-read: the object may have been replaced
                remote = remote_info(loc)
            if size is not None and remote.size != size:
                raise PhalanxError(
                    f"{loc.url} is {remote.size} bytes on the store, expected {size}; "
                    "fix the expected size or the object"
                )
            # The name announces the size, so a scan counts a download in progress.
            tmp = data.parent / f"{disk.TMP}.{remote.size}.{os.getpid()}.{secrets.token_hex(4)}"
            self._reserve(remote.size, loc.url, tmp)
            done = False
            try:
                log.debug("downloading %s (%s) into %s", loc.url, human_size(remote.size), data)
                download(loc, tmp)
                found = copy_problem(tmp, remote, sha256)
                if found is None:
                    # Metadata first: should we die before the rename, its stamp (which names
                    # the temp file's inode) does not match whatever copy is left.
                    disk.Meta(loc.url, remote, disk.stamp(tmp.stat()), sha256).save(data.parent)
                    with self._ledger() as ledger:
                        os.replace(tmp, data)
                        done = True
                        ledger.pending -= remote.size
                    return data
                problem = found
                if attempt == 1:
                    log.warning("download of %s does not match (%s); again", loc.url, problem)
            finally:
                if not done:
                    with self._ledger() as ledger:
                        tmp.unlink(missing_ok=True)
                        ledger.bytes -= remote.size
                        ledger.pending -= remote.size
        raise PhalanxError(
            f"{loc.url}: downloaded twice and the {problem}; check the object on the store "
            "and the sha256/size given for it"
        )

    # -- space ----------------------------------------------------------------------------

    def _reserve(self, size: int, url: str, tmp: Path) -> None:
        """Count ``size`` bytes for the download into ``tmp``, evicting to make room."""
        with self._ledger() as ledger:
            if self._shortage(ledger, size) > 0:
                self._make_room(ledger, size, url)
            ledger.bytes += size
            ledger.pending += size
            # Created under the ledger lock, so no scan counts this reservation twice.
            tmp.touch()

    def _shortage(self, ledger: disk.Ledger, needed: int) -> int:
        """Bytes to free before ``needed`` more fit; 0 or less when they fit."""
        short = 0 if self.max_bytes is None else ledger.bytes + needed - self.max_bytes
        if self.min_free_bytes is not None:
            # Others' reservations are partly written already: counting them whole errs safe.
            free = shutil.disk_usage(self.root).free - ledger.pending
            short = max(short, self.min_free_bytes + needed - free)
        return short

    def _make_room(self, ledger: disk.Ledger, needed: int, what: str) -> int:
        """Evict LRU entries until ``needed`` more bytes fit (caller holds the ledger)."""
        if self.max_bytes is not None and needed > self.max_bytes:
            raise self._cannot_hold(
                what, needed, "it is larger than the cap", f"raise {MAX_ENV} above it"
            )
        if self._shortage(ledger, needed) <= 0:
            return 0
        freed = 0
        for entry in sorted(self._rescan(ledger), key=lambda e: e.used_ns):
            if self._shortage(ledger, needed) <= 0:
                break
            # Folders without a copy (failed fetches) sort first and go too: they cost nothing.
            if disk.remove_entry(entry.folder):
                log.debug("evicted %s (%s)", entry.data or entry.folder, human_size(entry.size))
                ledger.bytes -= entry.size
                freed += entry.size
        if self._shortage(ledger, needed) > 0:
            if self.max_bytes is not None and ledger.bytes + needed > self.max_bytes:
                reason = f"the other {human_size(ledger.bytes)} are pinned or being downloaded"
                fix = f"raise {MAX_ENV} or end the jobs that pin them"
            else:
                free = human_size(shutil.disk_usage(self.root).free)
                reason = f"{free} is free and {human_size(self.min_free_bytes or 0)} must stay free"
                fix = f"free disk space or lower {MIN_FREE_ENV}"
            raise self._cannot_hold(what, needed, reason, fix)
        return freed

    def _cannot_hold(self, what: str, needed: int, reason: str, fix: str) -> PhalanxError:
        cap = "no cap" if self.max_bytes is None else f"cap {human_size(self.max_bytes)}"
        return PhalanxError(
            f"node cache at {self.root} ({cap}) cannot hold {what} ({human_size(needed)}): "
            f"{reason}; {fix}"
        )

    def _rescan(self, ledger: disk.Ledger) -> list[disk.Entry]:
        """Every entry, correcting the ledger from what is really there."""
        entries = disk.scan(self.root)
        ledger.bytes = sum(e.size + e.reserved for e in entries)
        ledger.pending = sum(e.reserved for e in entries)
        return entries

    # -- locks ----------------------------------------------------------------------------

    @contextmanager
    def _hold(self, path: Path, what: str, *, shared: bool = False) -> Iterator[None]:
        fd = disk.acquire(path, shared=shared, timeout=self.lock_timeout)
        if fd is None:
            raise PhalanxError(
                f"timed out after {self.lock_timeout:g} s waiting to {what}: another process "
                f"holds {path} (a slow or hung download? `fuser {path}` names it); "
                f"stop it or raise {TIMEOUT_ENV}"
            )
        try:
            yield
        finally:
            os.close(fd)

    @contextmanager
    def _ledger(self) -> Iterator[disk.Ledger]:
        """The size ledger, under the cache-wide lock; saved on the way out."""
        path = self.root / disk.LEDGER
        with self._hold(self.root / disk.LOCK, "update the size ledger"):
            try:
                ledger = disk.Ledger(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                ledger = disk.Ledger()
                self._rescan(ledger)
            try:
                yield ledger
            finally:
                # Drift below zero (entries deleted by hand) is corrected by the next scan.
                body = {"bytes": max(0, ledger.bytes), "pending": max(0, ledger.pending)}
                disk.write_json(path, body)
