"""What ``phalanx model create --path`` may name: any data URI, or a job's output.

A job's output is written the Azure ML way,
``azureml://jobs/<job>/outputs/<output>[/paths/<path inside it>]``; the
built-in output ``checkpoints`` names the job's checkpoint folder. The output
is found wherever the job's spec put it (the job's own folder, a local path, a
datastore), and a path inside it may not climb out of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.registry.files import inside, safe_relpath
from phalanx.storage.location import Location, local
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace

JOB_OUTPUT_URI = re.compile(
    r"^azureml://jobs/(?P<job>[^/]+)/outputs/(?P<output>[^/]+)(?:/paths/(?P<path>.*))?$"
)


@dataclass(frozen=True)
class Source:
    """Where a model's files come from."""

    location: Location
    uri: str
    """As recorded: the URI the user gave (never a credential)."""
    job_name: str | None = None
    """The job whose output it is, if it is one."""


def resolve_source(uri: str, ws: Workspace) -> Source:
    """The files ``uri`` names, and the job they came from.

    Raises:
        PhalanxError: an unknown job or output, a path that leaves the output, or
            anything :func:`phalanx.storage.uri.resolve` refuses.
    """
    match = JOB_OUTPUT_URI.match(uri)
    if match is None:
        if uri.startswith("azureml://jobs/"):
            raise PhalanxError(
                f"{uri!r}: write a job output as azureml://jobs/<job>/outputs/<output> "
                "[/paths/<path inside it>]"
            )
        return Source(resolve(uri, ws), uri)
    job_name, output, sub = match["job"], match["output"], (match["path"] or "").rstrip("/")
    ws.get_job(job_name)  # a one-line error for an unknown job
    root = job_output(ws, job_name, output)
    if not sub:
        return Source(root, uri, job_name)
    safe_relpath(sub, "--path inside the output")
    loc = root.child(sub)
    if root.url.startswith("file://") and not inside(Path(root.path), Path(loc.path)):
        raise PhalanxError(f"{uri!r} leads outside the job's output {output}; remove the link")
    return Source(loc, uri, job_name)


def job_output(ws: Workspace, job_name: str, output: str) -> Location:
    """Where the output ``output`` of ``job_name`` keeps its files.

    Raises:
        PhalanxError: the job has no such output.
    """
    from phalanx.spec import JobSpec

    paths = ws.paths(job_name)
    if output == "checkpoints":
        return _in_job_folder(paths.root, paths.checkpoints)
    spec = JobSpec.model_validate(ws.get_job(job_name).spec)
    out = spec.outputs.get(output)
    if out is None:
        names = ", ".join(sorted([*spec.outputs, "checkpoints"]))
        raise PhalanxError(f"job {job_name} has no output {output!r} (outputs: {names})")
    if out.path is None:
        return _in_job_folder(paths.root, paths.outputs / output)
    if out.is_local:
        return local(str(out.local_path))
    return resolve(out.path, ws)


def _in_job_folder(job_root: Path, folder: Path) -> Location:
    """``folder``, refused when a link (the job could have made one) leads it elsewhere."""
    if not inside(job_root, folder):
        raise PhalanxError(
            f"{folder} leads outside the job's folder through a symbolic link; it cannot be "
            "registered"
        )
    return local(str(folder))
