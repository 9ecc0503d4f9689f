"""Walls between a server and its jobs: whether they are up, and the server's side of them.

A team's server runs as root; a job is anyone's code. When the server is started as
root (and not with ``--trust-jobs``), every job's launcher, ranks and containers run
as an account of their own (:mod:`phalanx.jobs.accounts`), with a base environment,
and the workspace is locked so such an account reaches its own job's folder and
nothing else: not the database (SQLite and its WAL), ``secrets.json``, ``server/``
(``session.key``, uploaded bundles), other jobs' folders, the node cache, local
datastores or registered models. They run phalanx's Python: where it lies out of their
reach (the README's install as root), through a read-only view of it
(:mod:`phalanx.jobs.pythonview`). Why accounts rather than a container per job: they
hold for every job (with or without an image, MPI's daemons, FUSE mounts), need no
engine or image, cost nothing at start, and a container job gets the same account.

The choice is made when ``phalanx server start`` runs and kept in
``$PHALANX_HOME/server/walls.json``, which every supervisor of the workspace reads
(whoever started it: the server, or the scheduler recovering a lost one). A server
that is not root cannot give jobs other accounts: with tokens (a team) it refuses to
start unless ``--trust-jobs`` says jobs may run as the server's account; without
tokens it listens on loopback only, one user's own machine, and jobs run as that user
as in the embedded default.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.jobs import pythonview
from phalanx.jobs.pythonview import blocking_folder, out_of_reach
from phalanx.launch.account import base_environment
from phalanx.storage.acl import kept_mode

SETTINGS_FILE = "walls.json"
DEFAULT_FIRST_UID = 1_879_048_192
"""0x70000000: far above login accounts, system accounts, systemd's dynamic users
(61184–65519) and the subordinate ranges ``useradd`` hands out for rootless
containers (from 100000, 65536 each), and below 2**31, which some tools mishandle."""
DEFAULT_COUNT = 65_536
# Top-level entries of a workspace a job's account must reach: its own folder under
# `jobs/`, the `python` shim of an image (`containers/bin`), built environments (`envs`)
# and its credentials file. Everything else at the top is the server's alone.
_REACHED = {"jobs": 0o711, "envs": None, "containers": None, "job-credentials": 0o711}


@dataclass(frozen=True)
class WallSettings:
    """Whether jobs of this workspace run walled off, and the uids they get."""

    enabled: bool
    first_uid: int = DEFAULT_FIRST_UID
    count: int = DEFAULT_COUNT


def settings_path(home: Path) -> Path:
    return home / "server" / SETTINGS_FILE


def read_settings(home: Path) -> WallSettings | None:
    """What the server decided; ``None`` if no server ran on this workspace."""
    try:
        data = json.loads(settings_path(home).read_text())
        return WallSettings(bool(data["enabled"]), int(data["first_uid"]), int(data["count"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def active(home: Path) -> WallSettings | None:
    """The settings when this process (a supervisor) walls its job off; else ``None``."""
    settings = read_settings(home)
    if settings is None or not settings.enabled or os.geteuid() != 0:
        return None
    return settings


def parse_uids(text: str) -> tuple[int, int]:
    """``START-END`` (inclusive) → ``(first, count)``.

    Raises:
        PhalanxError: not that form, or a range that includes root or is empty.
    """
    first, sep, last = text.partition("-")
    try:
        start, end = int(first), int(last)
    except ValueError:
        start, end = 0, -1
    if not sep or start < 1000 or end < start or end >= 2**31:
        raise PhalanxError(
            f"--job-uids {text!r}: give START-END, two numbers from 1000 to 2147483647 "
            f"(e.g. {DEFAULT_FIRST_UID}-{DEFAULT_FIRST_UID + DEFAULT_COUNT - 1})"
        )
    return start, end - start + 1


def plan(home: Path, *, auth: bool, trust_jobs: bool, uids: str | None) -> WallSettings:
    """Decide, at ``phalanx server start``, whether jobs run walled off; check they can.

    Raises:
        PhalanxError: one line: walls are needed but cannot be built here, and how to fix it.
    """
    first, count = parse_uids(uids) if uids else (DEFAULT_FIRST_UID, DEFAULT_COUNT)
    if trust_jobs:
        return WallSettings(False, first, count)
    if os.geteuid() != 0:
        if auth:
            raise PhalanxError(
                "a server with tokens runs each job as an account of its own, which needs "
                "root: start it as root (see docs/deploy.md), or pass --trust-jobs to run jobs "
                "as this account, where any job can read the database, secrets and tokens"
            )
        return WallSettings(False, first, count)
    _check_ranges(first, count)
    _check_reachable(home, "the workspace", "put the workspace elsewhere (--workspace)")
    python, env = sys.executable, {}
    blocked = out_of_reach()
    if blocked is not None:  # e.g. the README's install as root: jobs run a view of it
        try:
            view = pythonview.ensure()
        except PhalanxError as exc:
            raise _python_refused(*blocked, str(exc)) from None
        python, env = str(view.python), view.env()
    _probe(first, python, env)
    return WallSettings(True, first, count)


def _check_ranges(first: int, count: int) -> None:
    """Refuse a uid range that login accounts or subordinate ranges already use."""
    last = first + count - 1
    for table, what in (("/etc/passwd", "uid"), ("/etc/group", "gid")):
        for line in _lines(table):
            parts = line.split(":")
            if len(parts) > 2 and parts[2].isdigit() and first <= int(parts[2]) <= last:
                raise PhalanxError(
                    f"--job-uids: {what} {parts[2]} ({parts[0]} in {table}) is in the range; "
                    "choose a range no account uses"
                )
    for table in ("/etc/subuid", "/etc/subgid"):
        for line in _lines(table):
            owner, _, rest = line.partition(":")
            start, _, size = rest.partition(":")
            if start.isdigit() and size.isdigit():
                lo, hi = int(start), int(start) + int(size) - 1
                if lo <= last and first <= hi:
                    raise PhalanxError(
                        f"--job-uids: {lo}-{hi} ({owner} in {table}) overlaps the range; "
                        "choose another"
                    )


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _check_reachable(path: Path, what: str, move: str) -> None:
    folder = blocking_folder(path)
    if folder is not None:
        raise PhalanxError(
            f"jobs cannot be walled off: {what} ({path}) is inside {folder}, which other "
            f"accounts cannot enter; chmod o+x {folder}, or {move}, or start with --trust-jobs "
            "(jobs then run as root and can read the server's database and secrets)"
        )


def check_python() -> None:
    """Before a job runs as its account: phalanx's Python must be where that account goes
    (a supervisor runs on a view of it where it is not: :mod:`phalanx.jobs.pythonview`).

    Raises:
        PhalanxError: one line naming what is out of reach and the fix.
    """
    blocked = out_of_reach()
    if blocked is not None:
        raise _python_refused(*blocked, "no view of it could be made (see the supervisor's log)")


def _python_refused(path: Path, folder: Path, why: str) -> PhalanxError:
    return PhalanxError(
        f"jobs cannot be walled off: phalanx's Python ({path}) is inside {folder}, which other "
        f"accounts cannot enter, and {why}; install phalanx where every account can read it "
        "(a virtual environment under /opt), or start with --trust-jobs (jobs then run as "
        "root and can read the server's database and secrets)"
    )


def _probe(uid: int, python: str, env: dict[str, str]) -> None:
    """Run ``python`` (phalanx's, or its view) as a job's account once: it must start and
    see the packages this process sees (torch, where it is installed)."""
    import importlib.util

    torch = importlib.util.find_spec("torch") is not None
    code = (
        "import importlib.util, sys, phalanx.launch.worker; "
        f"sys.exit(0 if (importlib.util.find_spec('torch') is not None) == {torch} else "
        "'its packages (torch) cannot be read')"
    )
    problem = ""
    try:
        proc = subprocess.run(
            [python, "-c", code], user=uid, group=uid, extra_groups=[], cwd="/",
            env={**base_environment(os.environ), **env}, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        problem = str(exc)
    else:
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines()
            problem = lines[-1] if lines else f"exit code {proc.returncode}"
    if problem:
        raise PhalanxError(
            f"jobs cannot be walled off: phalanx's Python ({python}) does not run as "
            f"uid {uid} ({problem}); install phalanx where every account can read it, or start "
            "with --trust-jobs"
        )


def write_settings(home: Path, settings: WallSettings) -> None:
    """Keep the decision for every supervisor of the workspace."""
    path = settings_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{SETTINGS_FILE}.{os.getpid()}")
    tmp.write_text(
        json.dumps(
            {"enabled": settings.enabled, "first_uid": settings.first_uid,
             "count": settings.count}
        )
    )  # fmt: skip
    os.replace(tmp, path)


def harden(home: Path) -> None:
    """Lock the workspace so a job's account reaches only what it must (see the module).

    Run at server start and before each walled-off job starts (a file made since, such
    as a new database's WAL, is locked then). A job folder of a job that runs no more
    is the server's alone (0700); a live one's is set up by its account.
    """
    os.chmod(home, 0o711)
    for entry in home.iterdir():
        if entry.is_symlink():
            continue
        if entry.name in _REACHED:
            mode = _REACHED[entry.name]
            if mode is not None:
                os.chmod(entry, mode)
            continue
        # A running job whose input is the `default` datastore's top is let into that
        # folder by an ACL entry (phalanx.storage.acl), which a plain chmod would void.
        os.chmod(entry, (0o700 | kept_mode(entry)) if entry.is_dir() else 0o600)
    jobs = home / "jobs"
    if jobs.is_dir():
        for folder in jobs.iterdir():
            info = folder.lstat()
            # A folder no account holds (its group is root's): nobody else's business.
            if stat.S_ISDIR(info.st_mode) and info.st_gid == 0 and info.st_mode & 0o077:
                os.chmod(folder, 0o700)
