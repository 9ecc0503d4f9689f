"""Tell phalanx a rank is making progress, for its hang watchdog.

With ``limits.stall_timeout`` set, phalanx stops an attempt in which no rank
has shown progress for that long. Any line a rank writes to its log counts;
``heartbeat(step)`` counts too and also records the step, so a script that is
silent between epochs is not taken for hung. It writes at most once a second,
so calling it every step costs nothing measurable.
"""

from __future__ import annotations

import os
import time

_MIN_INTERVAL_S = 1.0
_last = 0.0


def heartbeat(step: int | None = None) -> None:
    """Record that this rank is alive (and at ``step``); a no-op outside phalanx."""
    global _last
    path = os.environ.get("PHALANX_HEARTBEAT_FILE")
    now = time.monotonic()
    if not path or now - _last < _MIN_INTERVAL_S:
        return
    _last = now
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(f"{'' if step is None else step} {time.time():.3f}\n")
        os.replace(tmp, path)
    except OSError:
        pass  # the watchdog falls back on the log; never fail training over this
