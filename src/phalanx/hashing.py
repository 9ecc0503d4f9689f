"""Hashing a whole file, the one way every package does it (stdlib only, imports nothing)."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of the file at ``path`` (``algorithm``: any hashlib name)."""
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
