"""Moving files from a datastore to this machine: retries, remote identity, folder downloads.

Everything here works on any :class:`~phalanx.storage.location.Location` (local folder,
Azure Blob through adlfs, S3 through s3fs). Transient store errors are retried
``RETRY_ATTEMPTS`` times with exponential backoff; what a user can fix (a missing object,
a refused credential, an unreachable endpoint, a full disk) ends as one-line
:class:`~phalanx.errors.PhalanxError`. Every download lands as a temporary file next to its
target and is renamed into place once its size (and any checksum the store knows) matches,
so a reader never sees a partial file.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import logging
import os
import random
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from phalanx.errors import PhalanxError
from phalanx.hashing import file_digest
from phalanx.storage.errors import denied, storage_errors
from phalanx.storage.location import Location

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_ATTEMPTS = 4
"""Tries per store call before a transient error is given up on."""
RETRY_BASE_DELAY = 0.5
"""Seconds before the first retry; doubled for each further one, plus up to 50% jitter."""
MANIFEST = ".phalanx-download.json"
"""What :func:`fetch_folder` downloaded into a folder, so a second run skips it."""

_PERMANENT = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# Exceptions that are not OSErrors but mean "try again": cloud SDKs' dropped or slow
# connections, and asyncio's TimeoutError (not the builtin one before Python 3.11).
_TRANSIENT_NAMES = frozenset(
    {
        "TimeoutError",
        "ServiceRequestError",
        "ServiceResponseError",
        "ClientConnectorError",
        "ClientPayloadError",
        "ServerDisconnectedError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "IncompleteReadError",
    }
)


@dataclass(frozen=True)
class RemoteInfo:
    """What identifies one version of a remote file; a change in any of it means new content."""

    size: int
    etag: str | None = None
    """ETag (adlfs ``etag``, s3fs ``ETag``), quotes stripped."""
    md5: str | None = None
    """Content MD5 as hex, when the store keeps one (Azure ``content_settings.content_md5``)."""
    mtime: str | None = None
    """Last modification as the store prints it (local ``mtime``, S3/Azure last-modified)."""

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> RemoteInfo:
        """Read an fsspec ``info()`` dict of adlfs, s3fs or the local file system."""
        etag = info.get("etag") or info.get("ETag")
        settings = info.get("content_settings")
        raw_md5 = (
            settings.get("content_md5")
            if isinstance(settings, Mapping)
            else getattr(settings, "content_md5", None)
        )
        mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        return cls(
            size=int(info["size"]),
            etag=str(etag).strip('"') if etag else None,
            md5=_md5_hex(raw_md5),
            mtime=str(mtime) if mtime is not None else None,
        )

    def same_object(self, other: RemoteInfo) -> bool:
        """Whether ``other`` describes the same content, judged by the best field both know.

        Stores that report neither ETag, MD5 nor mtime are compared by size alone.
        """
        if self.size != other.size:
            return False
        for mine, theirs in ((self.etag, other.etag), (self.md5, other.md5)):
            if mine is not None and theirs is not None:
                return mine == theirs
        if self.mtime is not None or other.mtime is not None:
            return self.mtime == other.mtime
        return True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FolderSync:
    """What :func:`fetch_folder` did."""

    downloaded: int
    """Files downloaded."""
    skipped: int
    """Files already in the destination, unchanged on the store."""
    bytes: int
    """Bytes downloaded."""


def retrying(url: str, action: str, call: Callable[[], T]) -> T:
    """``call()``, retried on transient store errors; user-fixable failures as PhalanxError.

    Args:
        url: The object acted on, for messages.
        action: A verb for messages ("read", "list").
        call: The store operation.

    Raises:
        PhalanxError: The object is missing, access is denied, the endpoint stays
            unreachable, or the local disk is full.
    """
    with storage_errors(url, action=action):
        attempt = 1
        while True:
            try:
                return call()
            except OSError as exc:
                if exc.errno in _DISK_FULL:
                    raise PhalanxError(
                        f"cannot {action} {url}: {exc.strerror} writing {exc.filename or 'it'}; "
                        "free disk space or point PHALANX_CACHE_DIR / the destination elsewhere"
                    ) from exc
                if attempt >= RETRY_ATTEMPTS or not _transient(exc):
                    raise
            except Exception as exc:
                if attempt >= RETRY_ATTEMPTS or not _transient(exc):
                    raise
            delay = RETRY_BASE_DELAY * 2 ** (attempt - 1) * random.uniform(1.0, 1.5)
            log.warning(
                "%s %s failed (attempt %d), retrying in %.1f s", action, url, attempt, delay
            )
            time.sleep(delay)
            attempt += 1


def remote_info(loc: Location) -> RemoteInfo:
    """The identity of the file at ``loc``.

    Raises:
        PhalanxError: ``loc`` is missing or a folder (or any failure of :func:`retrying`).
    """
    info = retrying(loc.url, "read", lambda: loc.fs.info(loc.path))
    if info.get("type") == "directory":
        raise PhalanxError(f"{loc.url} is a folder, not a file; give the path of a file in it")
    return RemoteInfo.from_info(info)


def download(loc: Location, dest: Path) -> None:
    """Copy the file at ``loc`` to ``dest`` (overwritten), retrying transient errors."""
    retrying(loc.url, "read", lambda: loc.fs.get_file(loc.path, str(dest)))


def copy_problem(path: Path, remote: RemoteInfo, sha256: str | None = None) -> str | None:
    """What is wrong with the local copy ``path`` of ``remote``, or ``None`` if it matches.

    Checks the size, then (reading the file once) ``sha256`` if given, else the store's
    MD5 if it has one: one hash per byte, the stronger one when both are known (hashing
    is a good part of the CPU a cold read costs).
    """
    size = path.stat().st_size
    if size != remote.size:
        return f"copy is {size} bytes, the store says {remote.size}"
    if sha256 is not None:
        name, expected, source = "sha256", sha256, "expected"
    elif remote.md5 is not None:
        name, expected, source = "md5", remote.md5, "the store says"
    else:
        return None
    actual = file_digest(path, name)
    if actual != expected:
        return f"{name} is {actual}, {source} {expected}"
    return None


def fetch_folder(
    loc: Location,
    dest: Path,
    *,
    workers: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> FolderSync:
    """Download every file under ``loc`` into ``dest``, in parallel, keeping the layout.

    A file already in ``dest`` is skipped when its size and the store's identity of it
    (ETag or mtime) are those recorded by the run that downloaded it, in ``dest/MANIFEST``,
    and it was not modified locally since. A file an earlier run downloaded that is no
    longer on the store is deleted (files ``dest`` got some other way are left alone).
    Files land as hidden temporary files renamed into place. Concurrent calls for the
    same ``dest`` run one after the other.

    Args:
        loc: A folder (or a single file) on a datastore.
        dest: The local folder to fill; created if missing.
        workers: Parallel downloads.
        progress: Called on the calling thread as ``progress(files_done, files_total)``,
            once before the first download and after each; skipped files count as done.

    Returns:
        How many files were downloaded and skipped, and the bytes downloaded.

    Raises:
        PhalanxError: ``loc`` does not exist, or a file could not be downloaded intact.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    files = list_files(loc)
    dest.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(dest / f"{MANIFEST}.lock"))
    if not lock.acquire(blocking=False):
        log.info("waiting for another download into %s", dest)
        lock.acquire()
    try:
        for stale in dest.rglob(".*.phalanx-tmp-*"):  # left by a killed run; we hold the lock
            stale.unlink(missing_ok=True)
        recorded = _read_manifest(dest, loc.url)
        # A mirror: what an earlier run downloaded and the store no longer has goes too
        # (a class folder or a shard deleted upstream must not linger in the copy).
        for rel in recorded.keys() - files.keys():
            (dest / rel).unlink(missing_ok=True)
        kept = {
            rel: recorded[rel]
            for rel, (_, remote) in files.items()
            if rel in recorded and _matches(dest / rel, remote, recorded[rel])
        }
        done = len(kept)
        if progress:
            progress(done, len(files))
        todo = [rel for rel in files if rel not in kept]
        fetched = 0
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fetch") as pool:
                futures: dict[Future[dict[str, Any]], str] = {
                    pool.submit(_download_into, *files[rel], dest / rel): rel for rel in todo
                }
                try:
                    for future in as_completed(futures):
                        rel = futures[future]
                        kept[rel] = future.result()
                        fetched += kept[rel]["remote"]["size"]
                        done += 1
                        if progress:
                            progress(done, len(files))
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        finally:
            # Record what did arrive, so a rerun after a failure skips it.
            _write_manifest(dest, loc.url, kept)
    finally:
        lock.release()
    return FolderSync(downloaded=len(todo), skipped=len(files) - len(todo), bytes=fetched)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _PERMANENT) or denied(exc):
        return False
    return isinstance(exc, OSError) or type(exc).__name__ in _TRANSIENT_NAMES


def _md5_hex(raw: object) -> str | None:
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        return bytes(raw).hex()
    if isinstance(raw, str) and raw:
        try:  # Azure's REST form: base64 of the 16 digest bytes
            return _md5_hex(base64.b64decode(raw, validate=True))
        except (binascii.Error, ValueError):
            return None
    return None


def list_files(loc: Location) -> dict[str, tuple[Location, RemoteInfo]]:
    """Files under ``loc`` by path relative to it (a file location lists itself)."""
    found = retrying(loc.url, "list", lambda: loc.fs.find(loc.path, detail=True))
    if not found and not retrying(loc.url, "list", lambda: loc.fs.isdir(loc.path)):
        raise PhalanxError(f"{loc.url} not found; check the path, the datastore or the asset")
    root = loc.fs._strip_protocol(loc.path).rstrip("/")
    files: dict[str, tuple[Location, RemoteInfo]] = {}
    for path, info in found.items():
        if info.get("type", "file") != "file":
            continue
        if path == root:
            rel = path.rsplit("/", 1)[-1]
        else:
            rel = path[len(root) + 1 :] if path.startswith(root + "/") else ""
        if any(part in ("", ".", "..") for part in rel.split("/")):
            raise PhalanxError(
                f"{loc.url}: listed file {path!r} does not map to a path inside the destination; "
                "rename it on the store"
            )
        files[rel] = (loc if path == root else loc.child(rel), RemoteInfo.from_info(info))
    return files


def _download_into(loc: Location, remote: RemoteInfo, target: Path) -> dict[str, Any]:
    """Download ``loc`` (as listed: ``remote``) to ``target``; its manifest record."""
    target.parent.mkdir(parents=True, exist_ok=True)
    problem = ""
    for attempt in (1, 2):
        if attempt == 2:  # the object may have been replaced while we read it
            remote = remote_info(loc)
        tmp = target.with_name(f".{target.name}.phalanx-tmp-{secrets.token_hex(4)}")
        try:
            download(loc, tmp)
            found = copy_problem(tmp, remote)
            if found is None:
                os.replace(tmp, target)
                st = target.stat()
                return {"remote": remote.to_json(), "local": [st.st_size, st.st_mtime_ns]}
            problem = found
        finally:
            tmp.unlink(missing_ok=True)
    raise PhalanxError(f"{loc.url}: downloaded twice and the {problem}; check the store's copy")


def _matches(target: Path, remote: RemoteInfo, record: Mapping[str, Any]) -> bool:
    try:
        st = target.stat()
        then = RemoteInfo(**record["remote"])
        local = [st.st_size, st.st_mtime_ns] == list(record["local"])
    except (OSError, TypeError, KeyError):
        return False
    return local and st.st_size == remote.size and then.same_object(remote)


def _read_manifest(dest: Path, url: str) -> dict[str, Any]:
    try:
        raw = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("source") != url:
        return {}  # another source was downloaded here: trust nothing
    files = raw.get("files")
    return files if isinstance(files, dict) else {}


def _write_manifest(dest: Path, url: str, files: Mapping[str, Any]) -> None:
    tmp = dest / f".{MANIFEST}.phalanx-tmp-{secrets.token_hex(4)}"
    tmp.write_text(json.dumps({"version": 1, "source": url, "files": dict(files)}, indent=1))
    os.replace(tmp, dest / MANIFEST)
