"""The account a walled-off job's processes run as, and the environment they start from.

On a server that walls its jobs off (:mod:`phalanx.jobs.walls`), every job gets a uid
and gid of its own, taken from a range no login account uses (no ``/etc/passwd``
entry is needed: the kernel only knows numbers). Its launcher, ranks, MPI daemons and
container processes run as that account, with ``HOME`` and ``TMPDIR`` in the job's own
folder, and they start from a *base* environment rather than the server's: the
locale, ``PATH`` and the frameworks' tuning variables, never a credential the server
was started with (``PHALANX_DB``, a datastore's ``--credential-env`` variable, cloud
keys). This module imports only the standard library: the launcher and the worker
wrapper use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Names and prefixes of the server's variables a walled-off job still gets: how text is
# shown and where programs are, and how the frameworks tune themselves. Nothing else.
BASE_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "PYTHONHASHSEED", "PHALANX_DEBUG",
})  # fmt: skip
BASE_PREFIXES = ("LC_", "NCCL_", "GLOO_", "CUDA_", "TORCH_")
UMASK = 0o077
"""What a walled-off job creates is its own (the server reads it as root)."""
ACCOUNT_FILE = "account.json"
"""The account a job holds, in its folder (written by :mod:`phalanx.jobs.accounts`)."""


@dataclass(frozen=True, kw_only=True)
class JobAccount:
    """The uid/gid a job runs as, and its private folders (inside the job's folder)."""

    uid: int
    gid: int
    tmp: Path
    """``HOME`` and ``TMPDIR``: a folder of the job's own."""
    cache: Path
    """The node cache of the job's ``direct`` reads (``PHALANX_CACHE_DIR``)."""

    @property
    def user(self) -> str:
        """``USER``/``LOGNAME``: there is no login name, so one is made of the uid."""
        return f"phalanx-{self.uid}"

    def base_env(self, source: Mapping[str, str]) -> dict[str, str]:
        """What of ``source`` (the supervisor's environment) the job may see, plus its
        own ``HOME``, ``TMPDIR``, ``USER`` and node cache."""
        env = base_environment(source)
        env.update(
            HOME=str(self.tmp),
            TMPDIR=str(self.tmp),
            USER=self.user,
            LOGNAME=self.user,
            SHELL="/bin/sh",
            PHALANX_CACHE_DIR=str(self.cache),
        )
        return env

    def popen_kwargs(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that start a process as this account."""
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": UMASK}

    def to_json(self) -> dict[str, Any]:
        return {"uid": self.uid, "gid": self.gid, "tmp": str(self.tmp), "cache": str(self.cache)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobAccount:
        return cls(
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            tmp=Path(str(data["tmp"])),
            cache=Path(str(data["cache"])),
        )


def base_environment(source: Mapping[str, str]) -> dict[str, str]:
    """The part of ``source`` any process of a walled-off job may see."""
    env = {k: v for k, v in source.items() if k in BASE_NAMES or k.startswith(BASE_PREFIXES)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def runs_as_root(account: JobAccount | None) -> bool:
    """Whether a process started for this account (none: this process's) is root."""
    return os.geteuid() == 0 if account is None else account.uid == 0


def claims_folder(home: Path) -> Path:
    """Where a workspace's held uids are claimed, one file each."""
    return home / "server" / "accounts"


def account_of(job_dir: Path) -> JobAccount | None:
    """The account job ``job_dir`` holds now; ``None`` when it holds none."""
    try:
        account = JobAccount.from_json(json.loads((job_dir / ACCOUNT_FILE).read_text()))
        claim = claims_folder(job_dir.parent.parent) / str(account.uid)
        held = claim.read_text() == str(job_dir)
    except (OSError, ValueError, KeyError):
        return None
    return account if held else None


def own_attempt_folder(folder: Path, account: JobAccount) -> Path:
    """An attempt's folder (rank records, error files, heartbeats), the job's own."""
    folder.mkdir(exist_ok=True)
    os.chown(folder, account.uid, account.gid, follow_symlinks=False)
    return folder
