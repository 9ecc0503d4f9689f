"""Plain-text tables that fit the terminal's width without cutting a word.

A cell is never cut: when the columns are wider than the terminal, whole optional
columns are left out (the least useful first), and a row's long free text (why a job
waits) goes on the lines under the row, wrapped at spaces, rather than in a column
that would have to be squeezed.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import textwrap
import time
from collections.abc import Sequence

from rich.console import Console

from phalanx.terminal.termsafe import sanitize

GAP = "  "
# Where a note with a word too long to sit under the second column starts.
NOTE_LEAD = "    "
# A colour sequence, which termsafe keeps and a cell does not (it would count as width).
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    optional: Sequence[str] = (),
    notes: Sequence[str | None] | None = None,
    under: str | None = None,
    left_out: list[str] | None = None,
) -> list[str]:
    """Lines of a table no wider than ``width`` (unless its kept columns alone are wider).

    Args:
        headers: The column headers.
        rows: The cells, one sequence per row, as many as ``headers``.
        width: The terminal's width in characters.
        optional: Headers of columns that may be left out, the first left out first.
        notes: Per row, text printed under it from its second column on, wrapped at spaces
            to the width (``None``: none).
        under: The header of a long column that, when the table is too wide, goes
            under its row as that row's note (whose own note, if any, follows it) before
            any optional column is left out.
        left_out: A list the headers of the optional columns left out are added to.

    Returns:
        The header line, then each row's line and its note's lines.
    """
    keep = list(range(len(headers)))

    def widths() -> list[int]:
        return [max([len(headers[i]), *(len(r[i]) for r in rows)]) for i in keep]

    def total() -> int:
        return sum(widths()) + len(GAP) * (len(keep) - 1)

    if under is not None and total() > width:
        moved = headers.index(under)
        keep.remove(moved)
        notes = [
            " · ".join(part for part in (row[moved], notes[n] if notes else None) if part)
            for n, row in enumerate(rows)
        ]
    for header in optional:
        if total() <= width:
            break
        keep.remove(headers.index(header))
        if left_out is not None:
            left_out.append(header)
    sizes = widths()

    def line(cells: Sequence[str]) -> str:
        return GAP.join(cells[i].ljust(w) for i, w in zip(keep, sizes, strict=True)).rstrip()

    lines = [line(headers)]
    indent = " " * (sizes[0] + len(GAP)) if len(keep) > 1 else ""
    for n, row in enumerate(rows):
        lines.append(line(row))
        note = notes[n] if notes is not None else None
        if note:
            # A word too long for the room under the second column (a path, a URI) starts
            # further left; one longer than the line is left whole (never cut).
            lead = indent
            if max(map(len, note.split()), default=0) > width - len(lead):
                lead = NOTE_LEAD
            room = max(20, width - len(lead))
            for part in textwrap.wrap(note, room, break_long_words=False, break_on_hyphens=False):
                lines.append(lead + part)
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


def print_table(
    out: Console,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    optional: Sequence[str] = (),
    notes: Sequence[str | None] | None = None,
    under: str | None = None,
    indent: int = 0,
) -> list[str]:
    """A table fitted to ``out``'s width (see :func:`fit_table`), its header in bold.

    Cells are printed as plain text: neither rich markup nor an escape sequence in a
    name or a user's words reaches the terminal (sequences are dropped as
    :func:`~phalanx.terminal.termsafe.sanitize` drops them, colours too; other control
    characters show as ``^X``).

    Returns:
        The headers of the optional columns left out, to say so.
    """
    clean = [[_plain(cell) for cell in row] for row in rows]
    tidy = None if notes is None else [None if n is None else _plain(n) for n in notes]
    left_out: list[str] = []
    lines = fit_table(headers, clean, out.width - indent, optional=optional, notes=tidy,
                      under=under, left_out=left_out)  # fmt: skip
    pad = " " * indent
    for i, line in enumerate(lines):
        out.print((pad + line).rstrip(), style="bold" if i == 0 else None, markup=False,
                  highlight=False, overflow="ignore", crop=False, soft_wrap=True)  # fmt: skip
    return left_out


def _plain(text: str) -> str:
    """``text`` as one line of plain characters for a cell."""
    return _SGR.sub("", sanitize(text)).replace("\n", " ").replace("\t", " ")


def short_time(value: float | str | None, *, now: float | None = None) -> str:
    """A moment in local time as ``ls -l`` shows one: ``Nov 27 14:03`` within the last
    half year, ``2025-03-01`` before that (or in the future); ``-`` for none.

    ``value`` is seconds since the epoch or an ISO 8601 string (as the registries keep).
    """
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        seconds = moment.timestamp()
    else:
        seconds = float(value)
    age = (time.time() if now is None else now) - seconds
    local = dt.datetime.fromtimestamp(seconds)
    if -60 <= age <= 182 * 86400:
        return local.strftime("%b %d %H:%M")
    return local.strftime("%Y-%m-%d")
