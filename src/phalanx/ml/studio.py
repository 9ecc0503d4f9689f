"""Where a job's web page is: the SDK's name for :func:`phalanx.studio.urls.job_page_url`."""

from __future__ import annotations

from phalanx.studio.urls import STUDIO_PORT, job_page_url

#: Where ``phalanx studio`` serves this machine's workspace by default.
LOCAL_STUDIO = f"http://127.0.0.1:{STUDIO_PORT}"


def studio_url(job_name: str, server_url: str | None) -> str:
    """The page of ``job_name``: on the server the client talks to, else on ``phalanx studio``."""
    return job_page_url(job_name, server_url)
