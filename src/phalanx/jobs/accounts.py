"""A walled-off job's own account: claimed from the server's range, its folders, released.

Each live job holds one uid (its gid is the same number) from the range of
:mod:`phalanx.jobs.walls`, claimed by creating ``$PHALANX_HOME/server/accounts/<uid>``
(``O_EXCL``: two supervisors never get the same one) and noted in the job's
``account.json``, so a supervisor that takes over after another died keeps it. The
next claim starts after the last one made, so a uid comes back only after the whole
range went round.

The uid is also claimed for the whole machine (``/run/phalanx/accounts/<uid>``,
naming the job's folder): two workspaces on one machine share the default range,
and a job's end kills every process of its uid and removes its files from
``/tmp``, so one uid held by jobs of two workspaces would let one job's end stop the
other. A machine claim whose job no longer holds that uid (its workspace removed
while it ran) is stale and taken over; ``/run`` empties at boot, with the processes.

The job's folder stays root's (group: the job's gid, 0750: the job lists and reads it,
other accounts cannot enter it); what the job writes is its own: ``code/`` (its
working copy), ``user_logs/``, ``outputs/``, ``checkpoints/``, ``tmp/`` (``HOME`` and
``TMPDIR``), ``cache/`` (its ``direct`` reads), each attempt's
``system_logs/attempt_<n>/``, ``metrics.jsonl``, ``mlflow_run.jsonl`` (what its MLflow
endpoint writes, as the job) and ``upload.request``. Nothing else
in its folder can it create, rename or replace, so whatever phalanx itself writes
there stays phalanx's.

When the job ends, its account's processes are killed, what it left in ``/dev/shm``,
``/tmp`` and ``/var/tmp`` is removed, an ACL entry letting it into the ``default``
datastore's top folder is taken back, its folder becomes root's alone (0700), and the
uid is free again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import time
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.jobs.walls import WallSettings, active, check_python, harden
from phalanx.launch.account import ACCOUNT_FILE, JobAccount, account_of
from phalanx.launch.account import claims_folder as _claims
from phalanx.storage.acl import revoke
from phalanx.tracking.runfiles import RUN_FILE
from phalanx.workspace.layout import JobPaths

log = logging.getLogger(__name__)

_OWNED = ("code", "user_logs", "outputs", "checkpoints", "tmp", "cache")
_OWNED_FILES = ("metrics.jsonl", RUN_FILE, "upload.request")
_ROOT_FOLDERS = ("system_logs", "inputs", "mounts", "staging")
_SHARED_TMP = (Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"))
MACHINE_CLAIMS = Path("/run/phalanx/accounts")
"""The uids held by jobs of every workspace of this machine, one file each."""
_STALE_AFTER_S = 300.0
"""A machine claim younger than this is never stale: its job may not have written its
``account.json`` yet."""


def account_for(home: Path, paths: JobPaths) -> JobAccount | None:
    """The job's own account when the workspace's server walls jobs off; else ``None``.

    Raises:
        PhalanxError: this process's Python is out of the account's reach, or every
            account of the range is held.
    """
    settings = active(home)
    if settings is None:
        release(paths.root)  # one held while walls were up (the server now trusts jobs)
        return None
    check_python()
    try:
        return claim(home, paths, settings)
    except OSError as exc:
        raise PhalanxError(f"the job cannot get an account of its own: {exc}") from exc


def claim(home: Path, paths: JobPaths, settings: WallSettings) -> JobAccount:
    """The job's account (the one it holds, else a new one), its folders made its own.

    Raises:
        OSError: every uid of the range is held (the message says so).
    """
    harden(home)
    held = account_of(paths.root)
    account = held or _new(home, paths, settings)
    # Only before any process of the job runs (a new account follows a release, which
    # killed the last one's): a tree is never walked while the job could swap its parts.
    _set_up(paths, account, new=held is None)
    return account


def _new(home: Path, paths: JobPaths, settings: WallSettings) -> JobAccount:
    claims = _claims(home)
    claims.mkdir(parents=True, exist_ok=True)
    os.chmod(claims, 0o700)
    cursor = claims / "last"
    try:
        last = int(cursor.read_text())
    except (OSError, ValueError):
        last = settings.first_uid - 1
    for step in range(1, settings.count + 1):
        uid = settings.first_uid + (last - settings.first_uid + step) % settings.count
        if not _claim_on_machine(uid, paths.root):
            continue  # a job of another workspace of this machine holds it
        try:
            fd = os.open(claims / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            _unclaim_on_machine(uid, paths.root)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(paths.root))
        cursor.write_text(str(uid))
        account = JobAccount(uid=uid, gid=uid, tmp=paths.root / "tmp", cache=paths.root / "cache")
        tmp = paths.root / f".{ACCOUNT_FILE}.tmp"
        tmp.write_text(json.dumps(account.to_json()))
        os.replace(tmp, paths.root / ACCOUNT_FILE)
        log.info("the job runs as uid %d (gid %d)", uid, uid)
        return account
    raise OSError(
        f"every job account of the range {settings.first_uid}-"
        f"{settings.first_uid + settings.count - 1} is held by a running job; widen --job-uids"
    )


def _claim_on_machine(uid: int, job_dir: Path) -> bool:
    """Claim ``uid`` for ``job_dir`` on this machine; ``False`` when another job holds it."""
    MACHINE_CLAIMS.mkdir(parents=True, exist_ok=True)
    os.chmod(MACHINE_CLAIMS, 0o700)
    path = MACHINE_CLAIMS / str(uid)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if not _stale(path, uid):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(job_dir))
        return True
    return False


def _stale(path: Path, uid: int) -> bool:
    """Whether the machine claim at ``path`` names a job that no longer holds ``uid``."""
    try:
        if time.time() - path.stat().st_mtime < _STALE_AFTER_S:
            return False
        holder = path.read_text()
    except OSError:
        return False
    if not holder:
        return False
    held = account_of(Path(holder))
    return held is None or held.uid != uid


def _unclaim_on_machine(uid: int, job_dir: Path) -> None:
    path = MACHINE_CLAIMS / str(uid)
    with contextlib.suppress(OSError):
        if path.read_text() == str(job_dir):
            path.unlink()


def _set_up(paths: JobPaths, account: JobAccount, *, new: bool) -> None:
    """The job's folder root's, readable by its group; what the job writes its own."""
    root, ids = paths.root, (account.uid, account.gid)
    os.chown(root, 0, account.gid)
    os.chmod(root, 0o750)
    for name in _ROOT_FOLDERS:
        folder = root / name
        folder.mkdir(exist_ok=True)
        os.chown(folder, 0, account.gid)
        os.chmod(folder, 0o750)
    for name in _OWNED:
        folder = root / name
        folder.mkdir(exist_ok=True)
        if new or folder.stat().st_uid != account.uid:
            _chown_tree(folder, ids)
        os.chmod(folder, 0o700)
    for name in _OWNED_FILES:
        file = root / name
        file.touch(exist_ok=True)
        os.chown(file, *ids)
    if new:  # past attempts' folders (a job resumed under a new account)
        for attempt in (root / "system_logs").glob("attempt_*"):
            _chown_tree(attempt, ids)


def own_folder(base: Path, target: Path, uid: int, gid: int) -> None:
    """Make ``target`` (inside ``base``, a folder the job's account writes) a real folder
    of the account's, each part on the way too. A part the job turned into a link or a
    file is removed first: nothing it planted is followed, so no folder outside the job's
    is ever given to it."""
    here = base
    for part in target.relative_to(base).parts:
        here = here / part
        try:
            info = here.lstat()
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISDIR(info.st_mode):
            here.unlink()  # a link or a file the job made: it was never an output folder
            info = None
        if info is None:
            here.mkdir()
        os.chown(here, uid, gid, follow_symlinks=False)


def _chown_tree(top: Path, ids: tuple[int, int]) -> None:
    """Give ``top`` and everything under it to ``ids``; links themselves, never followed."""
    os.chown(top, *ids, follow_symlinks=False)
    for dirpath, dirs, files in os.walk(top, followlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(dirpath, name), *ids, follow_symlinks=False)


def release(job_dir: Path) -> None:
    """End the job's account: its processes, its leftovers outside its folder, its hold
    on its folder and on the uid. Nothing when it holds none."""
    account = account_of(job_dir)
    if account is None:
        return
    from phalanx.launch.procs import kill_user

    kill_user(account.uid)
    for shared in _SHARED_TMP:
        _remove_owned(shared, account.uid)
    # Let into the `default` datastore's top while its input was shown (its supervisor
    # takes that back, unless it died first).
    revoke(job_dir.parent.parent / "datastore", account.uid)
    os.chown(job_dir, 0, 0)
    os.chmod(job_dir, 0o700)
    (job_dir / ACCOUNT_FILE).unlink(missing_ok=True)
    (_claims(job_dir.parent.parent) / str(account.uid)).unlink(missing_ok=True)
    _unclaim_on_machine(account.uid, job_dir)
    log.info("uid %d released", account.uid)


def _remove_owned(folder: Path, uid: int) -> None:
    """Remove what ``uid`` left directly in the shared ``folder`` (``rmtree`` never follows
    a link out)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
