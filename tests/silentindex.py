"""A package index that accepts connections and never answers.

pip waits on it (for its own timeout, minutes), so a job whose environment names it
stays Preparing, building, for as long as a test looks at it; a cancel ends it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class SilentIndex:
    url: str
    """``http://127.0.0.1:PORT/simple``."""
    held: list[socket.socket] = field(default_factory=list)
    """The connections pip opened (none yet: pip has not reached the index)."""


@contextlib.contextmanager
def silent_index() -> Iterator[SilentIndex]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    index = SilentIndex(f"http://127.0.0.1:{server.getsockname()[1]}/simple")
    stop = threading.Event()

    def hang() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                index.held.append(server.accept()[0])  # read nothing, answer nothing

    threading.Thread(target=hang, daemon=True).start()
    try:
        yield index
    finally:
        stop.set()
        for conn in index.held:
            conn.close()
        server.close()
