"""Data inputs made ready where a job's nodes run, before any rank starts.

The supervisor makes them ready on this machine for local compute, each node's
agent on its node for Ray (:mod:`phalanx.compute.nodejob`), both through
:func:`make_ready`; :mod:`phalanx.jobs.inputs` locates and checks them first.

Per input, after its path is resolved (datastore URI, data asset, URL or
local path):

- on this machine's file system, every mode passes the path itself: there is
  nothing to copy or mount;
- ``direct`` passes the URI as written; the script reads it (``phalanx.data``
  resolves datastore URIs and reads through the node cache);
- ``download`` copies the folder (or file) into the node cache's
  ``downloads/`` area, in parallel; files unchanged since an earlier job are
  skipped;
- ``ro_mount`` mounts the folder read-only with FUSE, backed by the node cache:
  listings come from one listing at mount time, a file is fetched on first read
  and read locally after that.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from phalanx.errors import PhalanxError, PreparationCanceled
from phalanx.spec import InputSpec
from phalanx.storage.cache import NodeCache
from phalanx.storage.location import Location

if TYPE_CHECKING:
    from phalanx.storage.mount import MountHandle

log = logging.getLogger(__name__)
T = TypeVar("T")


def is_local_fs(loc: Location) -> bool:
    """Whether ``loc`` is on this machine's file system (a local datastore or path)."""
    return "file" in (loc.fs.protocol if isinstance(loc.fs.protocol, tuple) else (loc.fs.protocol,))


def download_dir(cache: NodeCache, loc: Location) -> Path:
    """Where ``download`` puts a copy of ``loc``: stable per URL, so later jobs reuse it."""
    digest = hashlib.sha256(loc.url.encode()).hexdigest()[:24]
    return cache.root / "downloads" / digest


class InputsReady:
    """The inputs of one job, ready on this node; :meth:`close` unmounts what was mounted."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.canceled: Callable[[], bool] = lambda: False
        self._stack = ExitStack()

    def hold(self, context: AbstractContextManager[T]) -> T:
        """Enter ``context`` until :meth:`close` (a pin on a cached file, say)."""
        return self._stack.enter_context(context)

    def on_close(self, fn: Callable[..., object], *args: object) -> None:
        """Run ``fn(*args)`` at :meth:`close` (last registered, first run)."""
        self._stack.callback(fn, *args)

    def keep_mount(self, handle: MountHandle) -> None:
        """Keep a mount for the whole job: the sweep after each attempt leaves its server
        alone, and :meth:`close` unmounts it."""
        from phalanx.launch.procs import protect, unprotect

        pid = handle.process.pid
        if pid is not None:
            protect(pid)
            self.on_close(unprotect, pid)
        self.on_close(handle.unmount)

    def close(self) -> None:
        self._stack.close()


def make_ready(
    inputs: Mapping[str, InputSpec],
    located: Mapping[str, Location],
    mount_root: Path,
    cache: NodeCache | None = None,
    canceled: Callable[[], bool] = lambda: False,
    *,
    owner: tuple[int, int] | None = None,
    shown_in: Path | None = None,
) -> InputsReady:
    """Download or mount every data input; return the value each input takes in the command.

    Args:
        inputs: The job's data inputs (:meth:`JobSpec.data_inputs`).
        located: Where each one is (:func:`check_inputs`).
        canceled: Asked between files of a download and between inputs; when it answers
            ``True`` the work stops (files already down are kept for the next job).
        owner: A walled-off job's account (uid, gid). Its ranks cannot enter the node
            cache or the server's folders: a file on this machine (a local path or
            datastore, a download in the cache) is shown to them read-only in
            ``shown_in/<input>`` (a bind mount), and a FUSE mount lets that account in.
        shown_in: Where those bind mounts go (the job's ``inputs/`` folder).

    Raises:
        PreparationCanceled: ``canceled()`` said so.
        PhalanxError: an input is missing, cannot be fetched, or cannot be mounted.
    """
    ready = InputsReady()
    ready.canceled = canceled
    try:
        for name, value in inputs.items():
            if canceled():
                raise PreparationCanceled("canceled while preparing the inputs")
            loc = located[name]
            if is_local_fs(loc):
                path = Path(loc.path)
            elif value.mode == "direct":
                ready.values[name] = value.path
                continue
            elif value.mode == "download":
                cache = cache or _cache(owner)
                path = _download(name, value, loc, cache, ready)
            else:
                cache = cache or _cache(owner)
                ready.values[name] = str(_mount(name, value, loc, cache, mount_root, ready, owner))
                continue
            if owner is not None and shown_in is not None:
                path = _show(name, path, shown_in, ready, owner[0])
            ready.values[name] = str(path)
    except BaseException:
        ready.close()
        raise
    return ready


def _cache(owner: tuple[int, int] | None) -> NodeCache:
    """The node cache; for a walled-off job, closed to every account but root's (the
    supervisor shows the job only its own inputs' entries)."""
    cache = NodeCache.from_env()
    if owner is not None:
        cache.root.mkdir(parents=True, exist_ok=True)
        os.chmod(cache.root, 0o700)
    return cache


def _show(name: str, path: Path, shown_in: Path, ready: InputsReady, uid: int) -> Path:
    """``path`` shown read-only to the job at ``shown_in/<name>`` (a file: ``…/<file name>``).

    The workspace's own ``datastore`` folder (the ``default`` datastore's top, closed
    to every account by :func:`phalanx.jobs.walls.harden`) lets the job's account in
    while the input is shown (:mod:`phalanx.storage.acl`); the account's end takes
    that back too, should this process die first."""
    from phalanx.storage.acl import grant, open_to, revoke
    from phalanx.storage.bind import bind_readonly, unbind

    target = shown_in / name if path.is_dir() else shown_in / name / path.name
    workspace_datastore = shown_in.parent.parent.parent / "datastore"  # <home>/jobs/<job>/inputs
    try:
        if path == workspace_datastore and not open_to(path, uid):
            grant(path, uid)
            ready.on_close(revoke, path, uid)
        bind_readonly(path, target)
    except PhalanxError as exc:
        raise PhalanxError(f"inputs.{name}: {exc}") from exc
    ready.on_close(unbind, target)
    return target


def _download(
    name: str, value: InputSpec, loc: Location, cache: NodeCache, ready: InputsReady
) -> Path:
    from phalanx.storage.transfer import fetch_folder

    started = time.monotonic()
    if value.type == "uri_file":
        # One file: through the cache itself (verified, shared, evictable).
        try:
            # Pinned for the whole job: no eviction may remove it under a rank.
            path = ready.hold(cache.pinned(loc))
        except PhalanxError as exc:
            raise PhalanxError(f"inputs.{name}: {exc}") from exc
        log.info("inputs.%s: %s ready at %s", name, loc.url, path)
        return path
    dest = download_dir(cache, loc)
    last = [0.0]

    checked = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - checked[0] >= 0.5:  # asking may read the workspace: twice a second at most
            checked[0] = now
            if ready.canceled():
                # Raised on fetch_folder's calling thread, which then stops its pool.
                raise PreparationCanceled(f"inputs.{name}: canceled after {done} of {total} files")
        if now - last[0] >= 5 or done == total:
            last[0] = now
            log.info("inputs.%s: %d/%d files", name, done, total)

    try:
        sync = fetch_folder(loc, dest, progress=progress)
    except PreparationCanceled:
        raise
    except PhalanxError as exc:
        raise PhalanxError(f"inputs.{name}: {exc}") from exc
    log.info(
        "inputs.%s: %s downloaded to %s: %d file(s), %d unchanged skipped, %.1f MB in %.1f s",
        name, loc.url, dest, sync.downloaded, sync.skipped, sync.bytes / 1e6,
        time.monotonic() - started,
    )  # fmt: skip
    return dest


def _mount(
    name: str,
    value: InputSpec,
    loc: Location,
    cache: NodeCache,
    mount_root: Path,
    ready: InputsReady,
    owner: tuple[int, int] | None = None,
) -> Path:
    from phalanx.storage.mount import cleanup_stale, fuse_available, start_mount

    reason = fuse_available()
    if reason is not None:
        raise PhalanxError(f"inputs.{name}: ro_mount needs FUSE ({reason}); use mode: download")
    # A single file is mounted as its folder's view of that one name.
    folder = loc
    if value.type == "uri_file":
        parent, _, _ = loc.path.rpartition("/")
        folder = Location(loc.fs, parent, loc.url.rpartition("/")[0])
    mountpoint = mount_root / name
    cleanup_stale(mountpoint)  # left by a supervisor that died
    mountpoint.mkdir(parents=True, exist_ok=True)
    log_path = mount_root.parent / "system_logs" / f"mount_{name}.txt"
    try:
        handle = start_mount(folder, mountpoint, cache, log_path=log_path, owner=owner)
    except PhalanxError as exc:
        raise PhalanxError(f"inputs.{name}: {exc}") from exc
    ready.keep_mount(handle)  # it serves every attempt
    log.info("inputs.%s: %s mounted read-only at %s", name, loc.url, mountpoint)
    if value.type == "uri_file":
        return mountpoint / loc.path.rpartition("/")[2]
    return mountpoint
