"""Sending a local file or folder to a server: packed into a tar, ``PUT /api/v1/uploads``.

The id the server answers goes into the request that uses the files (``data
create``, ``model create``); the server unpacks the archive with the same checks
as a job's files (:mod:`phalanx.server.uploads`).
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from phalanx.client.http import ServerClient

# Large uploads take as long as they take; the server bounds their size.
UPLOAD_TIMEOUT_S = 3600.0


def pack(archive: Path, files: dict[str, Path]) -> None:
    """Write ``files`` (archive name → local file or folder) into a gzip tar.

    Data is sent as the files it holds: a link inside a folder is followed.
    """
    with tarfile.open(archive, "w:gz", compresslevel=1, dereference=True) as tar:
        for name, path in sorted(files.items()):
            tar.add(path, arcname=name)


def contents(folder: Path) -> dict[str, Path]:
    """A folder's entries by name: packed, they unpack as the folder's contents."""
    return {child.name: child for child in folder.iterdir()}


def upload(client: ServerClient, files: dict[str, Path]) -> str:
    """Pack and send ``files``; the upload's id."""
    with tempfile.TemporaryDirectory(prefix="phalanx-upload-") as tmp:
        archive = Path(tmp) / "upload.tar.gz"
        pack(archive, files)
        with open(archive, "rb") as f:
            answer = client.request(
                "PUT",
                "/uploads",
                content=f,
                headers={"content-type": "application/x-tar"},
                idempotent=False,
                timeout=UPLOAD_TIMEOUT_S,
            )
    return str(answer["upload"])
