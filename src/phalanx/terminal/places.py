"""Where a user finds a job's files: on this machine, paths; through a server, whose
disk's paths mean nothing on a laptop (and tell it what it need not know), the job's
URIs and the ``phalanx job download`` command that copies them here."""

from __future__ import annotations

from phalanx.service.jobdownload import CHECKPOINTS, kept_elsewhere, output_uri
from phalanx.workspace import JobRecord


def download_command(job: str, output: str | None = None) -> str:
    """The command that copies the job's outputs (or ``output``) to this machine."""
    return f"phalanx job download {job}" + ("" if output is None else f" --output {output}")


def output_uris(job: JobRecord) -> dict[str, str]:
    """Each output the job keeps in its folder, ``checkpoints`` last, with its URI; an
    output kept elsewhere with the ``path`` its spec gave it."""
    elsewhere = kept_elsewhere(job)
    uris = {k: elsewhere.get(k, output_uri(job.name, k)) for k in job.spec.get("outputs") or {}}
    return {**uris, CHECKPOINTS: output_uri(job.name, CHECKPOINTS)}


def in_job_folder(job: JobRecord, path: str) -> str:
    """``path`` (a log the record names by the server's path) relative to the job's
    folder; its last part alone when it lies elsewhere. A server names it so already
    to a caller who may not read its paths."""
    if not path.startswith("/"):
        return path
    root = job.job_dir.rstrip("/") + "/"
    return path[len(root) :] if path.startswith(root) else path.rsplit("/", 1)[-1]
