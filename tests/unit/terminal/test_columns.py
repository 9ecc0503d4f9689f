"""The CLI's plain tables: fitted to the terminal's width, no cell cut (no job runs)."""

from __future__ import annotations

import datetime as dt
import io

from rich.console import Console

from phalanx.terminal.columns import fit_table, print_table, short_time

HEADERS = ("NAME", "VERSION", "CREATED", "PATH")
ROWS = [
    ("imagenet-train-shards-2024-full", "12", "Nov 27 02:55", "azureml://datastores/blobs/paths/x"),
    ("tiny", "1", "Nov 27 02:56", "/data/tiny"),
]


def test_a_long_column_goes_under_its_row_when_the_table_is_too_wide() -> None:
    lines = fit_table(HEADERS, ROWS, 60, under="PATH")
    assert lines[0].split() == ["NAME", "VERSION", "CREATED"]
    assert max(map(len, lines)) <= 60, lines
    # Each path whole, on the line under its row: under the second column where it fits
    # there, further left where it would not.
    assert lines[2] == "    " + ROWS[0][3]
    assert lines[4] == " " * 33 + ROWS[1][3]


def test_a_table_that_fits_keeps_its_long_column_in_place() -> None:
    lines = fit_table(HEADERS, ROWS, 200, under="PATH")
    assert lines[0].split() == list(HEADERS) and len(lines) == 3
    assert lines[1].split()[-1] == ROWS[0][3]


def test_optional_columns_go_after_the_long_one_has_moved() -> None:
    lines = fit_table(HEADERS, ROWS, 46, optional=("CREATED",), under="PATH")
    assert lines[0].split() == ["NAME", "VERSION"], lines
    assert ROWS[0][0] in lines[1].split()  # never cut


def test_printed_cells_carry_no_markup_and_no_control_sequence() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    rows = [("[bold]x[/bold]", "a\x1b]8;;evil\x07b\x1b[31mc\x01")]
    print_table(console, ("NAME", "WHO"), rows)
    text = out.getvalue()
    # Markup shown as written; a link sequence and a colour dropped whole; ^A visible.
    assert "[bold]x[/bold]" in text and "\x1b" not in text and "abc^A" in text, text


def test_short_time_reads_like_ls() -> None:
    now = dt.datetime(2026, 11, 27, 12, 0).timestamp()
    recent = dt.datetime(2026, 11, 26, 9, 5)
    assert short_time(recent.timestamp(), now=now) == "Nov 26 09:05"
    old = dt.datetime(2025, 3, 1, 9, 5)
    assert short_time(old.timestamp(), now=now) == "2025-03-01"
    iso = recent.astimezone(dt.timezone.utc).isoformat()  # as the registries keep times
    assert short_time(iso, now=now) == "Nov 26 09:05"
    assert short_time(None) == "-" and short_time("not a time") == "not a time"
