"""Whether ``phalanx studio`` serves this machine's workspace now, and where.

``phalanx studio`` writes ``<workspace>/studio.json`` (its pid and port) while it
serves, and removes it when it stops. A reader believes the file only when that
process lives and its port answers a connection within a moment: a studio killed
without a chance to remove the file (``kill -9``, a reboot) leaves a file that
names nothing, and a link printed from it would lead nowhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

FILE = "studio.json"
CONNECT_S = 0.2
"""How long a reader waits for the port: it is this machine's loopback, so a live
studio answers at once; ``job show`` must not wait on a dead one."""


@contextlib.contextmanager
def announced(home: Path, port: int) -> Iterator[None]:
    """Say, while the block runs, that this process serves ``home``'s studio on ``port``."""
    path = home / FILE
    mine = json.dumps({"pid": os.getpid(), "port": port})
    tmp = path.with_name(f".{FILE}.{os.getpid()}")
    tmp.write_text(mine)
    os.replace(tmp, path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # another studio's since: its file, not ours
            if path.read_text() == mine:
                path.unlink()


def studio_base(home: Path) -> str | None:
    """``http://127.0.0.1:<port>`` of the ``phalanx studio`` serving ``home``, or
    ``None`` when none does."""
    try:
        found = json.loads((home / FILE).read_text())
        pid, port = int(found["pid"]), int(found["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another account's
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CONNECT_S):
            pass
    except OSError:
        return None
    return f"http://127.0.0.1:{port}"
