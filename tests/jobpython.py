"""Workspaces for the tests that walled-off jobs reach.

A server started as root walls its jobs off: their processes run as accounts of their
own, which must reach their job's folder in the workspace. pytest's temporary folders
are 0700, so a test's workspace lies outside them, in the system's temporary folder.
(Those accounts run phalanx's Python wherever the tests' interpreter lies: the server
shows it to them itself, :mod:`phalanx.jobs.pythonview`.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

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
