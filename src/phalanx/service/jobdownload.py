"""``phalanx job download``: a job's outputs onto this machine, from its own workspace
or a server's, one verb for the CLI and the SDK.

What a job writes is the job's: its folder is packed without following a link (a
link it planted pointing elsewhere is left out, one on the way refused), and every
file that arrives is checked against the sha256 the sender read
(:mod:`phalanx.service.jobfiles`).

Without an output name it is the job's ``outputs`` folder: its default outputs and
every declared output kept in the job's folder (they are ``outputs/<name>``). With
one, that output, or ``checkpoints``. An output kept elsewhere (``path:`` in the
spec: a datastore, a folder) is read from there, not through its job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.service.jobfiles import Landed
from phalanx.service.jobs import Jobs
from phalanx.workspace import JobRecord

CHECKPOINTS = "checkpoints"
"""The built-in output every job has: its checkpoint folder."""


def output_uri(job: str, output: str) -> str:
    """The URI of a job's output, as Azure ML writes it (``Model(path=...)`` reads it)."""
    return f"azureml://jobs/{job}/outputs/{output}"


def kept_elsewhere(job: JobRecord) -> dict[str, str]:
    """The declared outputs the job keeps outside its folder, with where (``path:``)."""
    outputs = job.spec.get("outputs") or {}
    return {k: str(v["path"]) for k, v in outputs.items() if isinstance(v, dict) and v.get("path")}


def output_rel(job: JobRecord, output: str | None) -> str:
    """The part of the job's folder that holds ``output`` (``None``: all its outputs).

    Raises:
        PhalanxError: the job declares no such output, or keeps it outside its folder.
    """
    if output is None:
        return "outputs"
    if output == CHECKPOINTS:
        return CHECKPOINTS
    declared = job.spec.get("outputs") or {}
    if output not in declared:
        known = ", ".join(sorted(declared)) or "none"
        raise PhalanxError(
            f"job {job.name} has no output {output!r}; its outputs: {known} (and {CHECKPOINTS})"
        )
    elsewhere = kept_elsewhere(job).get(output)
    if elsewhere is not None:
        raise PhalanxError(
            f"output {output!r} of job {job.name} is kept at {elsewhere}; read it from there"
        )
    return f"outputs/{output}"


@dataclass(frozen=True)
class Download:
    """What ``job download`` wrote."""

    landed: Landed
    skipped: dict[str, str]
    """Declared outputs kept elsewhere, not in what was downloaded: name → where."""


def download_outputs(jobs: Jobs, name: str, output: str | None, dest: Path) -> Download:
    """Download job ``name``'s outputs (or ``output`` of them) into the folder ``dest``:
    ``dest/outputs`` or ``dest/<output>``.

    Raises:
        PhalanxError: an unknown job or output, ``dest`` a file, the folder it would
            write already there, nothing written there by the job, or a file that did
            not arrive as sent.
    """
    job = jobs.get(name)
    rel = output_rel(job, output)
    if dest.exists() and not dest.is_dir():
        raise PhalanxError(f"--dest {dest} is a file; give a folder (it is made if missing)")
    target = dest / rel.rsplit("/", 1)[-1]
    if target.exists() or target.is_symlink():
        raise PhalanxError(f"{target} exists already; remove it or choose another --dest")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PhalanxError(f"--dest {dest}: cannot make the folder ({exc.strerror})") from None
    landed = jobs.download(name, rel, dest)
    if landed is None:
        what = "outputs" if output is None else f"output {output!r}"
        raise PhalanxError(f"job {name} has written nothing to its {what} (yet)")
    skipped = kept_elsewhere(job) if output is None else {}
    return Download(landed, skipped)
