"""What one server process was started with."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request

from phalanx.service.access import DEFAULT_MAX_QUEUED, Caller, ServerLimits
from phalanx.workspace import Workspace

DEFAULT_MAX_UPLOAD = 1 << 30
DEFAULT_MAX_BODY = 4 << 20


@dataclass(frozen=True)
class ServerSettings:
    home: Path
    """The workspace folder the server owns."""
    auth: bool
    """Every request but ``/api/v1/health`` needs a token."""
    max_upload: int = DEFAULT_MAX_UPLOAD
    """The most bytes one upload may hold, packed or unpacked."""
    max_body: int = DEFAULT_MAX_BODY
    """The most bytes of any other request's body (:mod:`phalanx.server.bounds`)."""
    datastore_roots: tuple[Path, ...] = ()
    """The folders a ``local`` datastore made through the server may name
    (``--datastore-root``)."""
    max_queued_per_user: int | None = DEFAULT_MAX_QUEUED
    """The most jobs one user may have waiting (``--max-queued-per-user``; ``None``: no
    bound)."""

    @property
    def limits(self) -> ServerLimits:
        """What callers may reach on the server's machine, and how much they may queue."""
        return ServerLimits(
            datastore_roots=self.datastore_roots, max_queued=self.max_queued_per_user
        )

    @property
    def uploads(self) -> Path:
        """Uploads not yet turned into a job (removed once used), a folder per caller."""
        return self.home / "server" / "uploads"

    def uploads_of(self, who: Caller) -> Path:
        """The caller's own uploads: nobody uses another's, and each has a quota."""
        return self.uploads / (who.user or "_")

    @property
    def bundles(self) -> Path:
        """Unpacked job files the spec points at (pip files, local inputs), kept."""
        return self.home / "server" / "bundles"


def settings_of(request: Request) -> ServerSettings:
    """The settings of the server answering ``request``."""
    settings: ServerSettings = request.app.state.settings
    return settings


def request_workspace(request: Request) -> Workspace:
    """The workspace, through this request thread's connection."""
    return workspace(settings_of(request))


_local = threading.local()


def workspace(settings: ServerSettings) -> Workspace:
    """This thread's connection to the workspace (request handlers run on a pool)."""
    ws: Workspace | None = getattr(_local, "ws", None)
    if ws is None or ws.home != settings.home:
        ws = Workspace(settings.home)
        _local.ws = ws
    return ws
