"""Where the job verbs go; moved to :mod:`phalanx.service.jobs` and
:mod:`phalanx.client.backends` so the SDK calls the same ones. Kept for the
CLI's imports."""

from phalanx.client.backends import jobs_backend
from phalanx.service.jobs import Jobs, LocalJobs, SpecText, Submission

__all__ = ["Jobs", "LocalJobs", "SpecText", "Submission", "jobs_backend"]
