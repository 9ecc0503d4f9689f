"""Notes the SDK shows once per process (not on every call), on stderr."""

from __future__ import annotations

import sys

_shown: set[str] = set()


def note_once(key: str, text: str) -> None:
    """Print ``note: text`` the first time ``key`` is noted in this process."""
    if key in _shown:
        return
    _shown.add(key)
    print(f"note: {text}", file=sys.stderr, flush=True)


def note(text: str) -> None:
    """Print ``note: text`` (a note about one call, such as a job's environment)."""
    print(f"note: {text}", file=sys.stderr, flush=True)
