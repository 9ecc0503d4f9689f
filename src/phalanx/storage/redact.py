"""Keeping credentials out of logs and records.

Every credential phalanx resolves is remembered (in this process only) and
replaced by ``***`` wherever :func:`redact` runs: the supervisor's log
formatter, mount logs, failure records, and what a Preparing job shows of its
build. Known shapes are masked too (``AccountKey=…``,
``SharedAccessSignature=…``, a SAS ``sig=…``, the password of a URL's
``user:password@``, as a pip index's), for values that reached a message some
other way, such as a URL quoted by a cloud SDK or a package tool.
"""

from __future__ import annotations

import logging
import re

_SHAPES = re.compile(
    r"(?P<name>AccountKey=|SharedAccessSignature=|[?&]sig=|aws_secret_access_key=)"
    r"(?P<value>[^;&\s'\"]+)",
    re.IGNORECASE,
)
# ``scheme://user:password@host``: the password goes, the user and host stay.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<value>[^/\s@]+)@", re.I)
_known: set[str] = set()


def remember(secret: str) -> None:
    """Mask ``secret`` in everything :func:`redact` sees from now on."""
    if len(secret) >= 6:  # shorter values would mask ordinary words
        _known.add(secret)


def redact(text: str) -> str:
    """``text`` with every remembered credential and every credential-shaped value masked."""
    for secret in sorted(_known, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _SHAPES.sub(lambda m: f"{m['name']}***", text)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}***@", text)


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output never holds a credential (tracebacks included)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
