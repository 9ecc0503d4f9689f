"""A Python every account can run, for the servers the tests start.

A server started as root walls its jobs off: their processes run as accounts of their
own, which must be able to run phalanx's Python. When the test environment's
interpreter lies where other accounts cannot go (a ``pyenv`` under a 0700 ``/root``),
the tests' servers run on a copy of it that other accounts reach: the interpreter and
its standard library hard-linked (no space, no change to the original) into the
system's temporary folder, and a virtual environment there whose ``site-packages`` is
this one's (a link: nothing is installed). The interpreter finds its ``libpython``
through ``LD_LIBRARY_PATH`` (searched before the build's own ``RUNPATH``, which other
accounts cannot enter). Made once per machine, beside its place and renamed in, so
sessions running side by side agree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from phalanx.jobs.walls import blocking_folder


def job_python() -> tuple[str, dict[str, str]]:
    """An interpreter with this environment's packages that every account can run, and
    the variables it needs."""
    if blocking_folder(Path(sys.executable).resolve()) is None:
        return sys.executable, {}
    base = Path(sys.base_prefix)
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    key = hashlib.sha256(f"{base}\n{site}".encode()).hexdigest()[:12]
    where = Path(tempfile.gettempdir()) / f"phalanx-jobpython-{key}"
    env = {"LD_LIBRARY_PATH": str(where / "base" / "lib")}
    python = where / "venv" / "bin" / "python"
    if python.exists():
        return str(python), env
    staging = Path(tempfile.mkdtemp(prefix=f".{where.name}-", dir=where.parent))
    try:
        _copy_base(base, staging / "base")
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        venv = staging / "venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "lib" / version).mkdir(parents=True)
        (venv / "bin" / "python").symlink_to(where / "base" / "bin" / version)
        (venv / "lib" / version / "site-packages").symlink_to(site)
        (venv / "pyvenv.cfg").write_text(
            f"home = {where / 'base' / 'bin'}\ninclude-system-site-packages = false\n"
            f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
        )
        for folder in [staging, *staging.rglob("*")]:
            if folder.is_dir() and not folder.is_symlink():
                os.chmod(folder, 0o755)  # every account enters and reads it
        try:
            os.rename(staging, where)
        except OSError:  # another session made it first
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return str(python), env


def _link_or_copy(source: str | Path, dest: str | Path) -> None:
    """A hard link (no space used), or a copy where the two lie on different devices."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _copy_base(base: Path, dest: Path) -> None:
    """The interpreter, its ``libpython`` and its standard library (without its own
    ``site-packages``), hard-linked (else copied) from ``base`` into ``dest``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (dest / "bin").mkdir(parents=True)
    _link_or_copy((base / "bin" / version).resolve(), dest / "bin" / version)
    (dest / "lib").mkdir()
    for lib in (base / "lib").glob("libpython*.so*"):
        if lib.is_symlink():
            (dest / "lib" / lib.name).symlink_to(os.readlink(lib))
        else:
            _link_or_copy(lib, dest / "lib" / lib.name)
    stdlib = base / "lib" / version
    shutil.copytree(
        stdlib, dest / "lib" / version, symlinks=True, copy_function=_link_or_copy,
        ignore=lambda folder, names: ["site-packages"] if Path(folder) == stdlib else [],
    )  # fmt: skip
    (dest / "lib" / version / "site-packages").mkdir()


WORKSPACES = "phalanx-ws-"
_OWNER = ".tmp_path"


def workspace_home(tmp_path: Path) -> Path:
    """A workspace folder for a test, which walled-off jobs reach: outside pytest's
    temporary folders (``pytest-of-<user>`` is 0700, and every pytest session that starts
    on the machine makes it 0700 again), linked as ``tmp_path/home``. Its real path is
    returned (every process of the workspace names it so); its parent is the test's own
    too (a client's workspace, a server's log go there). Removed once pytest has removed
    ``tmp_path`` (:func:`remove_orphans`)."""
    top = Path(tempfile.mkdtemp(prefix=WORKSPACES)).resolve()
    os.chmod(top, 0o711)
    (top / _OWNER).write_text(str(tmp_path))
    home = top / "home"
    home.mkdir()
    (tmp_path / "home").symlink_to(home)
    return home


def remove_orphans() -> None:
    """Remove the test workspaces whose test folder pytest has removed."""
    for home in Path(tempfile.gettempdir()).glob(f"{WORKSPACES}*"):
        try:
            owner = Path((home / _OWNER).read_text())
        except OSError:
            continue
        if not owner.exists():
            shutil.rmtree(home, ignore_errors=True)
