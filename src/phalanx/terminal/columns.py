"""Plain-text tables that fit the terminal's width without cutting a word.

A cell is never cut: when the columns are wider than the terminal, whole optional
columns are left out (the least useful first), and a row's long free text (why a job
waits) goes on the lines under the row, wrapped at spaces, rather than in a column
that would have to be squeezed.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

GAP = "  "


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    optional: Sequence[str] = (),
    notes: Sequence[str | None] | None = None,
) -> list[str]:
    """Lines of a table no wider than ``width`` (unless its kept columns alone are wider).

    Args:
        headers: The column headers.
        rows: The cells, one sequence per row, as many as ``headers``.
        width: The terminal's width in characters.
        optional: Headers of columns that may be left out, the first left out first.
        notes: Per row, text printed under it from its second column on, wrapped at spaces
            to the width (``None``: none).

    Returns:
        The header line, then each row's line and its note's lines.
    """
    keep = list(range(len(headers)))

    def widths() -> list[int]:
        return [max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in keep]

    def total() -> int:
        return sum(widths()) + len(GAP) * (len(keep) - 1)

    for header in optional:
        if total() <= width:
            break
        keep.remove(headers.index(header))
    sizes = widths()

    def line(cells: Sequence[str]) -> str:
        return GAP.join(cells[i].ljust(w) for i, w in zip(keep, sizes, strict=True)).rstrip()

    lines = [line(headers)]
    indent = " " * (sizes[0] + len(GAP)) if len(keep) > 1 else ""
    for n, row in enumerate(rows):
        lines.append(line(row))
        note = notes[n] if notes is not None else None
        if note:
            # Words longer than the room are left whole (break_long_words=False): never cut.
            room = max(20, width - len(indent))
            for part in textwrap.wrap(note, room, break_long_words=False, break_on_hyphens=False):
                lines.append(indent + part)
    return lines


def starts_in(start: float | None, now: float) -> str:
    """An estimated start from ``now``: ``in 45s``, ``in 12m``, ``in 2.5h``, ``in 3d``;
    ``now`` once it is due, ``-`` when unknown. Rounded up: never sooner than said."""
    if start is None:
        return "-"
    left = start - now
    if left <= 0:
        return "now"
    if left < 60:
        return f"in {math.ceil(left)}s"
    if left < 3600:
        return f"in {math.ceil(left / 60)}m"
    if left < 86400:
        return f"in {math.ceil(left / 360) / 10:g}h"
    return f"in {math.ceil(left / 8640) / 10:g}d"


def short_duration(seconds: float | None) -> str:
    """``45s``, ``3m 20s``, ``2h 05m``, ``3d 4h``; ``-`` for none."""
    if seconds is None:
        return "-"
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        text = f"{days}d {hours}h"
    elif hours:
        text = f"{hours}h {minutes:02d}m"
    elif minutes:
        text = f"{minutes}m {secs:02d}s"
    else:
        return f"{secs}s"
    # A round limit reads as one: ``15m``, ``2h``, ``1d``.
    for zero in (" 0h", " 00m", " 00s"):
        text = text.removesuffix(zero)
    return text
