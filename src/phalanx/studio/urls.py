"""Where a job's studio page is: on the server the client talks to, else on the
``phalanx studio`` serving this machine's workspace, when one does."""

from __future__ import annotations

from pathlib import Path

from phalanx.client.urls import segment

STUDIO_PORT = 8766
"""Where ``phalanx studio`` serves this machine's workspace by default."""
SERVE_STUDIO = "phalanx studio"
"""The command that serves this machine's workspace's pages (where none serves them)."""


def studio_base(server_url: str | None, home: Path) -> str | None:
    """What serves the workspace's pages: the server at ``server_url`` (its studio is
    under ``/``), or the ``phalanx studio`` of ``home`` running now; ``None`` if nothing
    does (then a link would lead nowhere: say :data:`SERVE_STUDIO` instead)."""
    if server_url:
        return server_url.rstrip("/")
    from phalanx.studio.running import studio_base as running

    return running(home)


def job_page_url(name: str, base: str | None) -> str | None:
    """The page of job ``name`` on the studio at ``base`` (see :func:`studio_base`)."""
    return None if base is None else f"{base.rstrip('/')}/jobs/{segment(name)}"
