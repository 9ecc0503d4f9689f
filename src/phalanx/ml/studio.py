"""Where a job's web page is (the studio): the one place that knows its URL."""

from __future__ import annotations

from phalanx.client.urls import segment

#: Where ``phalanx studio`` serves this machine's workspace by default.
LOCAL_STUDIO = "http://127.0.0.1:8766"


def studio_url(job_name: str, server_url: str | None) -> str:
    """The page of ``job_name``: on the server the client talks to, else on ``phalanx studio``."""
    base = (server_url or LOCAL_STUDIO).rstrip("/")
    return f"{base}/jobs/{segment(job_name)}"
