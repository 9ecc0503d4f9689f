"""Downloading a folder of a job from a server (``GET /api/v1/jobs/{name}/files/{path}``).

The tar the server sends is unpacked with the same checks as an upload (no
entry outside the destination, no links out, no devices).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from phalanx.archives import NO_LIMIT, unpack
from phalanx.client.http import NotFound, ServerClient
from phalanx.client.urls import segment


def fetch(client: ServerClient, name: str, rel: str, dest: Path) -> Path | None:
    """Download ``rel`` of job ``name`` into the folder ``dest``; where it landed
    (``dest / <last part of rel>``), or ``None`` when the job has nothing there.

    A 404 (no such path, or no such job: ask for the job first to tell them
    apart) is ``None``.

    Raises:
        PhalanxError: a refused path, or an unreadable answer.
    """
    dest.mkdir(parents=True, exist_ok=True)
    quoted = "/".join(segment(part) for part in rel.split("/"))
    with tempfile.NamedTemporaryFile(prefix="phalanx-files-", suffix=".tar") as archive:
        try:
            with client.stream(f"/jobs/{segment(name)}/files/{quoted}") as body:
                while chunk := body.read():
                    archive.write(chunk)
        except NotFound:
            return None
        archive.flush()
        unpack(Path(archive.name), dest, NO_LIMIT, entries=NO_LIMIT)
    landed = dest / rel.rsplit("/", 1)[-1]
    return landed if landed.exists() else None
