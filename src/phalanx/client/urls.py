"""A user's value as one segment of an API path, whatever it holds."""

from __future__ import annotations

from urllib.parse import quote


def segment(value: str) -> str:
    """``value`` percent-encoded so it stays one path segment (``/`` and ``..`` included).

    The server then sees the value as typed and refuses it with its own one line,
    instead of the HTTP client folding ``.``/``..`` away or the router finding no route.
    """
    if value in (".", ".."):
        return "%2E" * len(value)
    return quote(value, safe="")
