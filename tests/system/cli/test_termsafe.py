"""Rank output on the terminal: no escape sequence gets through, colours only to a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

import pytest
from rich.console import Console
from rich.style import Style

from conftest import PHALANX, Cli
from phalanx.terminal.termsafe import rank_text, sanitize

# Any control character but tab and newline.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;title\x07after", "after"),  # window title, BEL-terminated
        ("\x1b]2;title\x1b\\after", "after"),  # ST-terminated
        ("\x1b[2J\x1b[1;1Hhome", "home"),  # screen clear, cursor move
        ("\x1b]52;c;aGk=\x07clip", "clip"),  # clipboard write
        ("\x1bP1$qm\x1b\\dcs", "dcs"),  # device control string
        ("\x9b2Jc1\x9d0;t\x9cosc", "c1osc"),  # C1 CSI and C1 OSC
        ("\x1b(Bcharset \x1b7saved", "charset saved"),
        ("bell\x07 del\x7f nel\x85", "bell^G del^? nel\\x85"),
        ("lone\x1b", "lone^["),
        ("\x1b[?25lhidden cursor", "hidden cursor"),
        ("\x1b[31mred\x1b[0m \x1b[38;5;196mx\x1b[m", "\x1b[31mred\x1b[0m \x1b[38;5;196mx\x1b[m"),
        ("\x9b1mbold", "\x1b[1mbold"),  # a C1 colour, kept in its 7-bit form
        ("tab\there\nnext line", "tab\there\nnext line"),
        ("[red]not markup[/red] café", "[red]not markup[/red] café"),
    ],
)
def test_sanitize_keeps_text_and_colours_only(raw: str, shown: str) -> None:
    assert sanitize(raw) == shown


def test_rank_text_turns_colours_into_styles_and_never_reads_markup() -> None:
    text = rank_text("\x1b[31mred\x1b[0m [bold]plain[/bold]\x1b]0;t\x07")
    assert text.plain == "red [bold]plain[/bold]"
    [span] = text.spans
    assert isinstance(span.style, Style) and span.style.color is not None
    assert (text.plain[span.start : span.end], span.style.color.number) == ("red", 1)  # ANSI red
    console = Console(record=True, force_terminal=False, width=80)
    console.print(text)
    assert console.export_text() == "red [bold]plain[/bold]\n"


NASTY = r"""
import sys
out = sys.stdout.buffer
out.write(b"\x1b]0;pwned-title\x07title set\n")
out.write(b"\x1b[2J\x1b[Hscreen cleared\n")
out.write(b"\x1b]52;c;cm0gLXJmIH4K\x07clipboard written\n")
out.write(b"bell\x07 rung\n")
out.write("\x9b2Jc1 clear\n".encode())  # C1 CSI, as UTF-8
out.write(b"\x1bP1$qm\x1b\\device control\n")
out.write(b"\x1b[31mred text\x1b[0m\n")
out.write(b"[red]rich markup[/red]\n")
"""

SHOWN = [
    "title set",
    "screen cleared",
    "clipboard written",
    "bell^G rung",
    "c1 clear",
    "device control",
    "red text",
    "[red]rich markup[/red]",
]


def _nasty_job(cli: Cli) -> str:
    cli.write("src/nasty.py", NASTY)
    name = cli.create(cli.write("job.yml", "command: python nasty.py\ncode: src\n"))
    cli.wait(name, ("Completed",))
    return name


def test_stream_shows_rank_text_without_its_escape_sequences(cli: Cli) -> None:
    name = _nasty_job(cli)
    for args in ((), ("--all-ranks",)):
        proc = cli.run("job", "stream", name, *args)
        assert proc.returncode == 0, proc.stderr
        assert CONTROL.search(proc.stdout) is None, repr(proc.stdout)
        lines = [ln.removeprefix("[rank 0] ") for ln in proc.stdout.splitlines()]
        start = lines.index(SHOWN[0])
        assert lines[start : start + len(SHOWN)] == SHOWN
        assert "pwned-title" not in proc.stdout and "cm0gLXJmIH4K" not in proc.stdout


def _on_a_terminal(cli: Cli, *args: str) -> str:
    """What ``phalanx ARGS`` writes to a terminal (a pseudo-terminal here)."""
    env = {k: v for k, v in cli.env.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    main, side = pty.openpty()
    proc = subprocess.Popen(
        [PHALANX, *args], env=env, cwd=cli.workdir, stdout=side, stderr=subprocess.DEVNULL
    )
    os.close(side)
    chunks = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not select.select([main], [], [], 1)[0]:
                continue
            try:
                data = os.read(main, 1 << 16)
            except OSError:  # EIO: the command closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=10) == 0
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    return b"".join(chunks).decode()


def test_on_a_terminal_only_colours_get_through(cli: Cli) -> None:
    name = _nasty_job(cli)
    out = _on_a_terminal(cli, "job", "stream", name)
    assert "\x1b[31mred text" in out  # the rank's colour, as a style
    # No other sequence (phalanx's own are colours too), no other control character.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out).replace("\r\n", "\n")  # the terminal's "\r\n"
    assert CONTROL.search(plain) is None, repr(out)
    assert "[red]rich markup[/red]" in out and "pwned-title" not in out


FAILS = r"""
raise RuntimeError("\x1b]0;pwned-title\x07\x1b[2Jboom [bold red]not markup[/bold red]")
"""


def test_root_cause_shows_the_message_without_escapes_or_markup(cli: Cli) -> None:
    cli.write("src/fails.py", FAILS)
    spec = cli.write("job.yml", "name: fails\ncommand: python fails.py\ncode: src\n")
    run = cli.run("run", str(spec))
    assert run.returncode == 1
    show = cli.run("job", "show", "fails", check=True)
    for out in (run.stdout, show.stdout):
        assert "boom [bold red]not markup[/bold red]" in out
        assert CONTROL.search(out) is None, repr(out)


METRIC = r"""
from phalanx.train import log_metric
log_metric("loss\x1b]0;pwned-title\x07[red]x[/red]", 1.0, step=1)
"""


def test_metric_names_are_shown_as_written_without_escapes(cli: Cli) -> None:
    cli.write("src/metric.py", METRIC)
    name = cli.create(cli.write("job.yml", "command: python metric.py\ncode: src\n"))
    cli.wait(name, ("Completed",))
    out = cli.run("job", "metrics", name, check=True).stdout
    assert "loss[red]x[/red]" in out
    assert CONTROL.search(out) is None, repr(out)
