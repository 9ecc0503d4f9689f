"""Where a job's studio page is: on the server the client talks to, else on ``phalanx studio``."""

from __future__ import annotations

from phalanx.client.urls import segment

STUDIO_PORT = 8766
"""Where ``phalanx studio`` serves this machine's workspace by default."""


def job_page_url(name: str, server_url: str | None) -> str:
    """The page of job ``name`` on the server at ``server_url`` (its studio is under
    ``/``), or on a ``phalanx studio`` of this machine when there is no server."""
    base = (server_url or f"http://127.0.0.1:{STUDIO_PORT}").rstrip("/")
    return f"{base}/jobs/{segment(name)}"
