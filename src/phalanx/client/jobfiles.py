"""Downloading a folder of a job from a server (``GET /api/v1/jobs/{name}/files/{path}``).

The tar the server sends is unpacked with the same checks as an upload (no
entry outside the destination, no links out, no devices), and every file is checked
against the sha256 the server sent beside it before it is moved into place
(:func:`phalanx.service.jobfiles.receive`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from phalanx.client.http import NotFound, ServerClient
from phalanx.client.urls import segment
from phalanx.service.jobfiles import Landed, receive


def fetch(client: ServerClient, name: str, rel: str, dest: Path) -> Landed | None:
    """Download ``rel`` of job ``name`` into the folder ``dest``; what landed
    (``dest / <last part of rel>``), or ``None`` when the job has nothing there.

    A 404 (no such path, or no such job: ask for the job first to tell them
    apart) is ``None``.

    Raises:
        PhalanxError: a refused path, an unreadable answer, or a file altered on the way.
    """
    quoted = "/".join(segment(part) for part in rel.split("/"))
    with tempfile.NamedTemporaryFile(prefix="phalanx-files-", suffix=".tar") as archive:
        try:
            with client.stream(f"/jobs/{segment(name)}/files/{quoted}") as body:
                while chunk := body.read():
                    archive.write(chunk)
        except NotFound:
            return None
        archive.flush()
        return receive(Path(archive.name), rel, dest)
