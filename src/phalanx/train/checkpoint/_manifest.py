"""``manifest.json``: what a checkpoint holds, and the check that it still does.

::

    {"format": "phalanx-checkpoint", "format_version": 1,
     "kind": "replicated",                     # or "sharded" (torch.distributed.checkpoint)
     "step": 1200, "created": "2026-05-09T07:35:25Z", "created_unix": 1778312125.0,
     "torch_version": "2.13.0", "world_size": 8, "attempt": 2,   # null when unknown
     "files": {"state.pt": {"size": 204812345, "sha256": "9f2c…"}}}

Every file of the checkpoint except the manifest and ``COMMITTED`` is listed;
a reader checks each one's size and sha256 before it trusts any byte of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
import torch.distributed as dist

from phalanx.train.checkpoint._fs import COMMITTED, MANIFEST, sha256_of

FORMAT = "phalanx-checkpoint"
FORMAT_VERSION = 1
REPLICATED = "replicated"
SHARDED = "sharded"


class InvalidCheckpoint(Exception):
    """A checkpoint that must not be loaded; the message says why."""


@dataclass(frozen=True)
class FileEntry:
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    kind: str
    step: int
    files: dict[str, FileEntry]


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def encode(kind: str, step: int, files: Mapping[str, FileEntry]) -> bytes:
    """The manifest of a checkpoint of ``step`` made of ``files``, as JSON bytes."""
    now = time.time()
    world_size = (
        dist.get_world_size()
        if dist.is_available() and dist.is_initialized()
        else _env_int("WORLD_SIZE")
    )
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "step": step,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "created_unix": now,
        "torch_version": torch.__version__,
        "world_size": world_size,
        "attempt": _env_int("PHALANX_ATTEMPT"),
        "files": {n: {"size": e.size, "sha256": e.sha256} for n, e in sorted(files.items())},
    }
    return (json.dumps(doc, indent=1) + "\n").encode()


def _plain_name(name: object) -> bool:
    # A manifest must not point outside its own folder.
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", MANIFEST, COMMITTED)
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def read(folder: Path, step: int) -> Manifest:
    """Parse and sanity-check ``folder/manifest.json``.

    Raises:
        InvalidCheckpoint: It is missing, unreadable, malformed, of another
            format or a newer version, or names another step.
    """
    try:
        doc = json.loads((folder / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise InvalidCheckpoint("manifest.json is missing") from None
    except (OSError, ValueError) as e:
        raise InvalidCheckpoint(f"manifest.json is unreadable: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InvalidCheckpoint("manifest.json is not a phalanx checkpoint manifest")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise InvalidCheckpoint(
            f"manifest.json has format version {version!r}; this phalanx reads {FORMAT_VERSION}"
        )
    if doc.get("step") != step:
        raise InvalidCheckpoint(f"manifest.json says step {doc.get('step')!r}, folder says {step}")
    raw_files = doc.get("files")
    kind = doc.get("kind")
    if kind not in (REPLICATED, SHARDED) or not isinstance(raw_files, dict) or not raw_files:
        raise InvalidCheckpoint("manifest.json lacks a valid kind or file list")
    files = {}
    for name, entry in raw_files.items():
        if not _plain_name(name) or not isinstance(entry, dict):
            raise InvalidCheckpoint(f"manifest.json has an invalid file entry {name!r}")
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or not isinstance(sha, str):
            raise InvalidCheckpoint(f"manifest.json has an invalid file entry {name!r}")
        files[name] = FileEntry(size, sha)
    return Manifest(kind=kind, step=step, files=files)


@contextlib.contextmanager
def open_verified(folder: Path, name: str, entry: FileEntry) -> Iterator[BinaryIO]:
    """``folder/name`` opened for reading, positioned at 0, after checking it.

    Checking and reading go through the same open file, so what is read is
    what was checked even if the folder is replaced meanwhile.

    Raises:
        InvalidCheckpoint: The file is missing, unreadable, or its size or
            sha256 differs from ``entry``.
    """
    try:
        f = open(folder / name, "rb")  # noqa: SIM115 (closed below, after the yield)
    except FileNotFoundError:
        raise InvalidCheckpoint(f"{name} is missing") from None
    except OSError as e:
        raise InvalidCheckpoint(f"{name} is unreadable: {e}") from None
    with f:
        try:
            actual = os.fstat(f.fileno()).st_size
            if actual != entry.size:
                raise InvalidCheckpoint(f"{name} is {actual} bytes, the manifest says {entry.size}")
            _, sha = sha256_of(f)
            f.seek(0)
        except OSError as e:
            raise InvalidCheckpoint(f"{name} is unreadable: {e}") from None
        if sha != entry.sha256:
            raise InvalidCheckpoint(f"{name} does not match its sha256 in the manifest")
        yield f


def verify(folder: Path, manifest: Manifest, names: list[str] | None = None) -> None:
    """Check the size and sha256 of ``names`` (default: every file) of a checkpoint.

    Raises:
        InvalidCheckpoint: As :func:`open_verified`.
    """
    for name in manifest.files if names is None else names:
        with open_verified(folder, name, manifest.files[name]):
            pass


def describe(value: BaseException) -> str:
    """An exception as one short line for a log message."""
    lines = [line.strip() for line in str(value).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        # torch's first line suggests weights_only=False, the one thing not to do
        # with a file that holds code; the line naming the refused global says more.
        refused = next((line for line in lines if "GLOBAL" in line), lines[0])
        refused = refused.removeprefix("WeightsUnpickler error: ").split(". Please")[0]
        return f"weights_only=True refused it: {refused}"
    return f"{type(value).__name__}: {lines[0]}" if lines else type(value).__name__
