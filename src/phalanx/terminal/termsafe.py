"""Rank output made safe to print on the user's terminal.

Whatever a rank writes (its log, its error message, its traceback) is text
the job controls, printed on the terminal of whoever runs ``phalanx job
stream`` or ``job show``. Escape sequences in it could set the window title,
clear the screen, move the cursor over earlier lines, or write the user's
clipboard (OSC 52). So every such text goes through :func:`rank_text` (or
:func:`rank_segments`, for a log):

- colours (SGR, ``ESC[…m``) are kept, as rich styles: rich prints them only
  when stdout is a terminal (or ``FORCE_COLOR`` is set; ``NO_COLOR`` drops
  them), so a log piped to a file holds plain text;
- every other escape sequence (CSI, OSC, DCS, SOS, PM, APC, ``ESC`` + one
  character), in its 7-bit or C1 form, is dropped whole: it controls the
  terminal, it is not text;
- every other control character but tab and newline is shown visibly:
  ``^G`` for BEL, ``^[`` for a stray ESC, ``\\x85`` for a C1 control;
- the result is a :class:`rich.text.Text` (or segments), never markup:
  ``[red]`` in rank output prints as written.

A sequence cut in two (a line printed in pieces) loses its introducer and
shows the rest as text.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

# A control character: where a sequence may begin (tab and newline are text).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SEQUENCE = re.compile(
    r"(?P<csi>(?:\x1b\[|\x9b)(?P<params>[\x30-\x3f]*)(?P<mid>[\x20-\x2f]*)(?P<final>[\x40-\x7e]))"
    # OSC, DCS, SOS, PM, APC: a string up to BEL or ST (ESC \ or C1 ST).
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
_SGR_PARAMS = re.compile(r"[0-9;]*")


def sanitize(text: str) -> str:
    """``text`` with no control sequence or character left but SGR colours, tab and newline."""
    # Searching for the rare control character first keeps a long clean line cheap.
    pieces: list[str] = []
    pos = 0
    while (control := _CONTROL.search(text, pos)) is not None:
        start = control.start()
        pieces.append(text[pos:start])
        sequence = _SEQUENCE.match(text, start)
        if sequence is None:
            pieces.append(_visible(text[start]))
            pos = start + 1
            continue
        params = sequence["params"]
        if sequence["final"] == "m" and not sequence["mid"] and _SGR_PARAMS.fullmatch(params):
            pieces.append(f"\x1b[{params}m")  # a colour: kept (the C1 form as ESC [)
        pos = sequence.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _visible(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    return "^?" if code == 0x7F else f"\\x{code:02x}"


def rank_text(text: str, style: str = "") -> Text:
    """Rank-controlled ``text`` as a rich Text, safe to print (its colours as styles)."""
    clean = sanitize(text)
    if "\x1b" in clean:  # only SGR sequences are left
        return Text.from_ansi(clean, style=style)
    return Text(clean, style=style)


def rank_segments(text: str, console: Console) -> list[Segment]:
    """Rank-controlled ``text`` as rich segments, safe to print, for text printed in bulk.

    The same as :func:`rank_text`, without building a rich Text for a line
    with no colour: that scans the whole line several times, which for a log
    of hundreds of megabytes costs seconds.
    """
    clean = sanitize(text)
    if "\x1b" in clean:
        return list(Text.from_ansi(clean, end="").render(console))
    return [Segment(clean)]
