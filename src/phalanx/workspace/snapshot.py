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


def _limit_bytes() -> int:
    raw = os.environ.get(LIMIT_ENV, str(DEFAULT_LIMIT_MB))
    try:
        return int(float(raw) * 1024 * 1024)
    except ValueError:
        raise PhalanxError(f"{LIMIT_ENV}={raw!r} is not a number of megabytes") from None


def snapshot_code(code: Path, dest: Path, *, exclude: tuple[Path, ...] = ()) -> int:
    """Copy ``code`` into ``dest`` (which must not exist) and return the bytes copied.

    Symbolic links are copied as links, so a link to a data folder stays a
    link and a link loop stays harmless. Sockets, pipes and devices are left
    out. Folders in ``exclude`` (the workspace itself, when it lies inside the
    code folder) are never entered.

    Raises:
        PhalanxError: the folder holds more than the snapshot limit, or a file
            cannot be read.
    """
    limit = _limit_bytes()
    patterns = list(ALWAYS_IGNORED) + _read_patterns(code)
    skip = {p.resolve() for p in (*exclude, dest)}
    total = 0

    def unreadable(exc: OSError) -> None:
        raise exc

    dest.mkdir(parents=True)
    try:
        for dirpath, dirnames, filenames in os.walk(code, onerror=unreadable):
            here = Path(dirpath)
            rel_dir = os.path.relpath(dirpath, code)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            kept = []
            for name in sorted(dirnames):
                src = here / name
                if _ignored(rel_dir + name, True, patterns) or src.resolve() in skip:
                    continue
                if src.is_symlink():
                    filenames.append(name)  # copied as a link below, never entered
                    continue
                (dest / rel_dir / name).mkdir()
                kept.append(name)
            dirnames[:] = kept
            for name in sorted(filenames):
                rel = rel_dir + name
                src = here / name
                if _ignored(rel, False, patterns):
                    continue
                if src.is_symlink():
                    os.symlink(os.readlink(src), dest / rel)
                    continue
                if not src.is_file():
                    continue  # a socket, pipe or device has no contents to keep
                total += src.stat().st_size
                if total > limit:
                    raise PhalanxError(
                        f"code folder {code} holds more than {limit // (1024 * 1024)} MB; list "
                        f"data and large files in {code / '.amlignore'} or raise {LIMIT_ENV}"
                    )
                shutil.copy2(src, dest / rel)
    except OSError as exc:
        where = exc.filename or code
        raise PhalanxError(
            f"cannot snapshot code folder {code}: {where}: {exc.strerror or exc}; make it "
            f"readable or list it in {code / '.amlignore'}"
        ) from exc
    return total
