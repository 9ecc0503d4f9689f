"""How a process relates to its parent and its orphans (Linux ``prctl``; a no-op elsewhere).

Here, below every layer, because processes of every layer use it: the
supervisor adopts its job's orphans, and a launcher, a mount's server and a
serving process end with the process that started them.
"""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants of this process re-parent to it (Linux only)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def end_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux only)."""
    return _prctl(_PR_SET_PDEATHSIG, int(sig))


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux
        return False
