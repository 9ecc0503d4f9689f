"""A file or folder on some datastore, as the rest of phalanx handles it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


@dataclass(frozen=True)
class Location:
    """Where data lives: an fsspec file system, a path inside it, and a printable URL.

    ``url`` never carries a credential; it names the object for people and is
    the key under which the node cache keeps its copy (``az://account/container/a/b``,
    ``s3://bucket/a/b``, ``file:///abs/path``).
    """

    fs: AbstractFileSystem
    """The file system, already authenticated."""
    path: str
    """The path as ``fs`` spells it (no scheme)."""
    url: str
    """Credential-free URL naming the same object; stable across processes and jobs."""

    def child(self, name: str) -> Location:
        """The location of ``name`` inside this folder (``name`` uses ``/``)."""
        name = name.strip("/")
        return Location(
            self.fs, f"{self.path.rstrip('/')}/{name}", f"{self.url.rstrip('/')}/{name}"
        )

    def __str__(self) -> str:
        return self.url


def local(path: str) -> Location:
    """A location on this machine's file system."""
    import os

    from fsspec.implementations.local import LocalFileSystem

    absolute = os.path.abspath(path)
    return Location(LocalFileSystem(), absolute, f"file://{absolute}")
