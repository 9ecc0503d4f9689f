"""Copy a job's ``code`` folder into the job, so later edits do not change a run.

Like Azure ML, files named in ``.amlignore`` (or, when there is none,
``.gitignore``) at the top of the code folder are left out, as are VCS folders,
virtual environments and byte-code. Patterns are gitignore-style globs
matched against each path relative to the code folder and against its base
name; a trailing ``/`` matches folders only; ``!`` negations are not
supported and are ignored.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path

from phalanx.errors import PhalanxError

ALWAYS_IGNORED = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    ".venv/",
    "*.pyc",
    ".ipynb_checkpoints/",
)
LIMIT_ENV = "PHALANX_SNAPSHOT_LIMIT_MB"
DEFAULT_LIMIT_MB = 300


def _read_patterns(code: Path) -> list[str]:
    for name in (".amlignore", ".gitignore"):
        path = code / name
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()
            return [
                s for s in (line.strip() for line in lines) if s and not s.startswith(("#", "!"))
            ]
    return []


def _ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    base = rel.rsplit("/", 1)[-1]
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        pat = pattern.rstrip("/")
        if dir_only and not is_dir:
            continue
        anchored = pat.startswith("/")
        pat = pat.lstrip("/")
        if fnmatch.fnmatchcase(rel, pat) or (
            not anchored and "/" not in pat and fnmatch.fnmatchcase(base, pat)
        ):
            return True
    return False


def snapshot_code(code: Path, dest: Path) -> int:
    """Copy ``code`` into ``dest`` (which must not exist) and return the bytes copied.

    Raises:
        PhalanxError: the folder holds more than the snapshot limit.
    """
    limit_mb = int(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_MB))
    patterns = list(ALWAYS_IGNORED) + _read_patterns(code)
    total = 0
    dest.mkdir(parents=True)
    for dirpath, dirnames, filenames in os.walk(code):
        rel_dir = os.path.relpath(dirpath, code)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        dirnames[:] = sorted(d for d in dirnames if not _ignored(rel_dir + d, True, patterns))
        for d in dirnames:
            (dest / rel_dir / d).mkdir(exist_ok=True)
        for name in sorted(filenames):
            rel = rel_dir + name
            if _ignored(rel, False, patterns):
                continue
            src = Path(dirpath) / name
            if src.is_symlink() and not src.exists():
                continue  # a dangling link has nothing to copy
            total += src.stat().st_size
            if total > limit_mb * 1024 * 1024:
                raise PhalanxError(
                    f"code folder {code} holds more than {limit_mb} MB; list data and large files "
                    f"in {code / '.amlignore'} or raise {LIMIT_ENV}"
                )
            shutil.copy2(src, dest / rel)
    return total
