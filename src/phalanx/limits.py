"""What a user's text may hold: characters, tags, names and descriptions.

One home for these rules, so a job spec, the registries (models, data,
environments) and the server's edge refuse the same things with the same
words. Each check answers the problem as a sentence (``None`` when there is
none); the caller names the field and raises its own error.

Characters: the C0 controls (U+0000–U+001F) but tab, line feed and carriage
return, DEL (U+007F), the C1 controls (U+0080–U+009F) and lone surrogates
are refused anywhere. A terminal or a log reader acts on the controls,
PostgreSQL cannot store NUL in text, and a lone surrogate is not UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from phalanx.errors import PhalanxError

MAX_TAGS = 100
"""Tags one record (job, model, data asset, environment) may carry."""
MAX_TAG_KEY = 256
"""Characters of a tag's key."""
MAX_TAG_VALUE = 1024
"""Characters of a tag's value."""
MAX_NAME = 256
"""Characters of a display name or an experiment name."""
MAX_DESCRIPTION = 4096
"""Characters of a description."""

_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# The ASCII names of the C0 controls, by code point.
_C0_NAMES = (
    "NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "BS", "HT", "LF", "VT", "FF", "CR",
    "SO", "SI", "DLE", "DC1", "DC2", "DC3", "DC4", "NAK", "SYN", "ETB", "CAN", "EM", "SUB",
    "ESC", "FS", "GS", "RS", "US",
)  # fmt: skip
FIX = "remove it (tabs and line breaks are fine)"


def bad_character(text: str) -> int | None:
    """Where the first refused character of ``text`` is, or ``None``."""
    found = _BAD.search(text)
    return None if found is None else found.start()


def describe_character(char: str) -> str:
    """``control character U+0007 (BEL)``, ``lone surrogate U+D800 (not UTF-8 text)``."""
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return f"lone surrogate U+{code:04X} (not UTF-8 text)"
    name = _C0_NAMES[code] if code < 0x20 else ("DEL" if code == 0x7F else "C1")
    return f"control character U+{code:04X} ({name})"


def character_problem(text: str) -> str | None:
    """``control character U+0000 (NUL) at character 3; remove it …``, or ``None``.

    For text of several lines the place is a line and a column.
    """
    at = bad_character(text)
    if at is None:
        return None
    what = describe_character(text[at])
    if "\n" in text:
        line = text.count("\n", 0, at) + 1
        column = at - text.rfind("\n", 0, at)
        return f"{what} at line {line}, column {column}; {FIX}"
    return f"{what} at character {at + 1}; {FIX}"


def text_problem(text: str, limit: int) -> str | None:
    """A refused character, or more than ``limit`` characters; ``None`` if neither."""
    if len(text) > limit:
        return f"is {len(text)} characters long; at most {limit} are allowed"
    return character_problem(text)


def tags_problem(tags: Mapping[str, object]) -> tuple[str | None, str] | None:
    """``(key or None, problem)`` for tags over the limits, or ``None``.

    Values are checked as text (``str(value)``); the key is ``None`` when the
    problem is their number.
    """
    if len(tags) > MAX_TAGS:
        return None, f"{len(tags)} tags; at most {MAX_TAGS} are allowed, drop some"
    for key, value in tags.items():
        key_text = str(key)
        shown = clip(key_text)
        if len(key_text) > MAX_TAG_KEY:
            return shown, f"the key is {len(key_text)} characters; at most {MAX_TAG_KEY}"
        problem = character_problem(key_text)
        if problem is not None:
            return shown, f"the key holds {problem}"
        value_text = "" if value is None else str(value)
        if len(value_text) > MAX_TAG_VALUE:
            return shown, f"the value is {len(value_text)} characters; at most {MAX_TAG_VALUE}"
        problem = character_problem(value_text)
        if problem is not None:
            return shown, f"the value holds {problem}"
    return None


def check_labels(what: str, description: str | None, tags: Mapping[str, object] | None) -> None:
    """Refuse a record's description or tags over the limits (or holding a control
    character); ``what`` names the record in the message (``model 'resnet'``).

    Raises:
        PhalanxError: naming the tag.
    """
    if description is not None:
        if not isinstance(description, str):
            raise PhalanxError(f"{what}: description: must be text")
        problem = text_problem(description, MAX_DESCRIPTION)
        if problem is not None:
            raise PhalanxError(f"{what}: description: {problem}")
    if tags is not None and not isinstance(tags, Mapping):
        raise PhalanxError(f"{what}: tags: must be a mapping of key: value")
    found = tags_problem(tags or {})
    if found is not None:
        key, problem = found
        raise PhalanxError(f"{what}: {'tags' if key is None else f'tag {key!r}'}: {problem}")


LONGEST_WORD = 500
"""Characters of a message between two spaces: a message may quote what a user gave (a
name, a path, a URL), never 100 KB of it. Longer than any path a user writes."""
_WORD = re.compile(rf"\S{{{LONGEST_WORD + 1},}}")
LONGEST_LINE = 1000
"""Characters of one line of a message: a value of 100 KB with spaces in it (``--set
compute='a b …'``) is no word, and is not echoed whole either."""
_TAIL = 300
"""What a line cut short keeps of its end: where its fix is said."""


def bounded(message: str) -> str:
    """``message`` with each run of more than :data:`LONGEST_WORD` characters but spaces
    cut to that many, ending in ``…``, and each line longer than :data:`LONGEST_LINE`
    cut in its middle (its start says what, its end the fix): what the CLI prints and a
    server answers, whatever a message quotes."""
    message = _WORD.sub(lambda word: word[0][: LONGEST_WORD - 1] + "…", message)
    return "\n".join(
        line if len(line) <= LONGEST_LINE else
        line[: LONGEST_LINE - _TAIL - 1] + "…" + line[-_TAIL:]
        for line in message.split("\n")
    )  # fmt: skip


def clip(text: str, limit: int = 80) -> str:
    """``text`` as a message quotes it: at most ``limit`` characters, with ``…`` if cut,
    and ``?`` for each refused character (a message must not carry them either)."""
    text = _BAD.sub("?", text if len(text) <= limit else text[: limit - 1] + "…")
    return text
