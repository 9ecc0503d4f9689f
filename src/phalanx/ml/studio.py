"""Where a job's web page is: the SDK's name for :func:`phalanx.studio.urls.job_page_url`."""

from __future__ import annotations

from phalanx.studio.urls import job_page_url


def studio_url(job_name: str, studio: str | None) -> str | None:
    """The page of ``job_name`` on the studio at ``studio`` (the server the client talks
    to, or a running ``phalanx studio`` of this machine's workspace); ``None`` when
    nothing serves it."""
    return job_page_url(job_name, studio)
