"""A file or folder of a job's folder, packed as a tar: what a client downloads
(``phalanx tensorboard`` through a server reads a job's event files this way).

Only what lies inside the job's folder is served: the path is a plain relative
one (no ``..``, nothing absolute or encoded), no part of it may be a symbolic
link, and a link met inside the folder is left out, never followed.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.registry.files import inside, safe_relpath
from phalanx.workspace import Workspace


class NoSuchPath(PhalanxError):
    """The job has nothing at that path (the server answers 404)."""


def job_path(ws: Workspace, name: str, rel: str) -> Path:
    """Where ``rel`` is in job ``name``'s folder, checked.

    Raises:
        PhalanxError: an unknown job, an unsafe path or a link on the way.
        NoSuchPath: nothing there.
    """
    root = Path(ws.get_job(name).job_dir)
    safe_relpath(rel, "path")
    here = root
    for part in rel.split("/"):
        here = here / part
        if here.is_symlink():
            raise PhalanxError(f"job {name}: {rel!r} goes through a symbolic link; not served")
    if not here.exists():
        raise NoSuchPath(f"job {name} has no {rel} ({here})")
    if not inside(root, here):
        raise PhalanxError(f"job {name}: {rel!r} is outside the job's folder; not served")
    return here


def pack(path: Path, archive: Path) -> int:
    """Write the file or folder ``path`` into the tar ``archive`` (under its own name);
    links are left out. The number of files packed."""
    count = 0
    with tarfile.open(archive, "w") as tar:
        if path.is_file():
            tar.add(path, arcname=path.name, recursive=False)
            return 1
        for dirpath, dirs, names in os.walk(path, followlinks=False):
            base = Path(dirpath)
            rel = base.relative_to(path.parent).as_posix()
            tar.add(base, arcname=rel, recursive=False)
            dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())
            for name in sorted(names):
                mode = (base / name).lstat().st_mode
                if stat.S_ISREG(mode):
                    tar.add(base / name, arcname=f"{rel}/{name}", recursive=False)
                    count += 1
    return count


def tree(ws: Workspace, name: str, rel: str, *, most: int = 2000) -> dict[str, object]:
    """The plain files under ``rel`` of job ``name``'s folder (e.g. ``outputs``,
    ``checkpoints``), each ``{"path", "size"}`` relative to the job's folder, sorted;
    links left out; at most ``most`` (``complete`` says whether all are listed).

    Raises:
        PhalanxError, NoSuchPath: as :func:`job_path`.
    """
    top = job_path(ws, name, rel)
    root = Path(ws.get_job(name).job_dir)
    files: list[dict[str, object]] = []
    for dirpath, dirs, names in os.walk(top, followlinks=False):
        base = Path(dirpath)
        dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())
        for entry in sorted(names):
            info = (base / entry).lstat()
            if stat.S_ISREG(info.st_mode):
                if len(files) >= most:
                    return {"files": files, "complete": False}
                path = (base / entry).relative_to(root).as_posix()
                files.append({"path": path, "size": info.st_size})
    return {"files": files, "complete": True}
