"""Uploads a server received (``PUT /api/v1/uploads``), turned into folders with the
checks of :mod:`phalanx.archives`."""

from __future__ import annotations

from pathlib import Path

from phalanx.archives import UploadError, unpack
from phalanx.errors import PhalanxError


def receive(uploads: Path, upload_id: str, dest: Path, limit: int) -> None:
    """Unpack the upload ``upload_id`` (from ``PUT /api/v1/uploads``) into the new folder
    ``dest``; the archive is used up either way, and a refused one leaves no folder.

    Raises:
        UploadError: not an upload id, or a refused archive.
        PhalanxError: no such upload.
    """
    import re
    import shutil

    if not re.fullmatch(r"[0-9a-f]{32}", upload_id):
        raise UploadError(f"upload: {upload_id!r} is not an upload id; PUT /api/v1/uploads first")
    archive = uploads / upload_id
    if not archive.is_file():
        raise PhalanxError(f"upload {upload_id} not found (used already, or expired)")
    try:
        dest.mkdir(parents=True)
        unpack(archive, dest, limit)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        archive.unlink(missing_ok=True)
