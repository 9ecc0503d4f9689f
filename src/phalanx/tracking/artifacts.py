"""A run's MLflow artifacts are its job's outputs.

A job's run has the artifact URI ``mlflow-artifacts:/jobs/<name>``; the client
resolves it against its tracking URI and sends ``PUT``/``GET
…/api/2.0/mlflow-artifacts/artifacts/jobs/<name>/<path>``. ``<path>`` is a file
of the job's ``outputs/`` (what ``job show`` lists, what the model registry and
``job download`` take), so ``mlflow.log_artifact("model.pt")`` and a script
writing ``$PHALANX_OUTPUTS_DIR/model.pt`` land in the same place.

This module serves the endpoint beside the ranks (it runs as the job, in the
job's folder). The team server reads the same files through
:mod:`phalanx.service.jobfiles` (by descriptor, never through a link).
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from phalanx.tracking.protocol import invalid, not_found

OUTPUTS = "outputs"
_PART = re.compile(r"[^/\x00]{1,255}")


def split(run_id: str, artifact_path: str) -> str:
    """The path inside the job's outputs that ``jobs/<run_id>/<rest>`` names (``""``: the
    outputs folder itself).

    Raises:
        TrackingError: another run's path, or a path that would leave the outputs.
    """
    parts = [p for p in artifact_path.strip("/").split("/") if p]
    if parts[:2] != ["jobs", run_id]:
        raise not_found(f"artifact path {artifact_path!r} is not run {run_id}'s")
    rest = parts[2:]
    for part in rest:
        if part in (".", "..") or not _PART.fullmatch(part):
            raise invalid(f"artifact path {artifact_path!r}: invalid part {part!r}")
    return str(PurePosixPath(*rest)) if rest else ""


def _inside(job_dir: Path, rel: str) -> Path:
    root = (job_dir / OUTPUTS).resolve()
    path = (root / rel).resolve() if rel else root
    if path != root and root not in path.parents:
        raise invalid(f"artifact path {rel!r} leaves the run's outputs")
    return path


def target(job_dir: Path, run_id: str, artifact_path: str) -> Path:
    """The file the artifact goes to, its folder made.

    Raises:
        TrackingError: no file name, another run's path, or one leaving the outputs.
    """
    rel = split(run_id, artifact_path)
    if not rel:
        raise invalid("an artifact needs a file name")
    path = _inside(job_dir, rel)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a part of the path is a file
        raise invalid(f"artifact path {artifact_path!r}: a part of it is a file") from None
    if path.is_dir():
        raise invalid(f"artifact path {artifact_path!r} is a folder of the run's artifacts")
    return path


def put(
    job_dir: Path, run_id: str, artifact_path: str, body: io.BufferedIOBase, length: int
) -> None:
    """Store ``length`` bytes of ``body`` as the artifact (written aside, then renamed)."""
    dest = target(job_dir, run_id, artifact_path)
    rel = dest.name
    tmp = dest.with_name(f".{dest.name}.uploading")
    with open(tmp, "wb") as out:
        left = length
        while left > 0 and (chunk := body.read(min(left, 1 << 20))):
            out.write(chunk)
            left -= len(chunk)
    if left > 0:
        tmp.unlink(missing_ok=True)
        raise invalid(f"artifact {rel!r}: the upload ended {left} bytes early")
    os.replace(tmp, dest)


def file(job_dir: Path, run_id: str, artifact_path: str) -> Path:
    """The artifact's file, for download."""
    rel = split(run_id, artifact_path)
    path = _inside(job_dir, rel)
    if not path.is_file():
        raise not_found(f"artifact {rel!r} of run {run_id} not found")
    return path


def listing(job_dir: Path, run_id: str, artifact_path: str) -> dict[str, Any]:
    """MLflow's listing of one folder: ``{"files": [{"path", "is_dir", "file_size"}]}``,
    each path the entry's name (the client joins it to the folder it asked for)."""
    rel = split(run_id, artifact_path)
    folder = _inside(job_dir, rel)
    if folder.is_file():
        return {"files": [{"path": folder.name, "is_dir": False,
                           "file_size": folder.stat().st_size}]}  # fmt: skip
    files = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir():
            files.append({"path": entry.name, "is_dir": True})
        elif entry.is_file():
            files.append({"path": entry.name, "is_dir": False,
                          "file_size": entry.stat().st_size})  # fmt: skip
    return {"files": files}
