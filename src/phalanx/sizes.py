"""Sizes in bytes, as people write them (``500M``, ``20G``, ``10GiB``) and read them."""

from __future__ import annotations

import re
from decimal import Decimal

_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(i?))?b?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in a size such as ``500M``, ``20G``, ``1.5GB``, ``10GiB`` or ``1048576``.

    ``k M G T P`` are powers of 1000 and ``Ki Mi Gi Ti Pi`` powers of 1024, as in
    Kubernetes; a trailing ``B`` and case are ignored. Fractions of a byte round down.

    Raises:
        ValueError: ``text`` is not a size.
    """
    match = _SIZE_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size; write e.g. 500M, 20G, 1.5GB, 10GiB or 1048576")
    number, unit, binary = match.groups()
    power = "kmgtp".index(unit.lower()) + 1 if unit else 0
    return int(Decimal(number) * (1024 if binary else 1000) ** power)


def human_size(n: int) -> str:
    """Bytes for people: ``812 B``, ``3.4 MB`` (powers of 1000)."""
    value, units = float(n), ["B", "kB", "MB", "GB", "TB"]
    while value >= 1000 and len(units) > 1:
        value /= 1000
        units.pop(0)
    return f"{n} B" if units[0] == "B" else f"{value:.1f} {units[0]}"
