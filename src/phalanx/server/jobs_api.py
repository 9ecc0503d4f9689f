"""``/api/v1/jobs``: create, list, show, cancel, preempt, logs and metrics of jobs."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from phalanx.errors import PhalanxError
from phalanx.server.auth import User
from phalanx.server.logread import parse_offsets, read_logs
from phalanx.server.settings import ServerSettings, request_workspace, settings_of, workspace
from phalanx.server.uploads import UploadError, unpack
from phalanx.workspace import JobRecord, JobStatus, Workspace
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.wire import job_to_wire

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

# The spec fields a client may point at an uploaded file (see phalanx.client.bundle).
_PLACEABLE = re.compile(
    r"code|environment\.(pip_file|conda_file|build\.path)|inputs\.[A-Za-z0-9_-]+\.path"
)
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")


class JobCreate(BaseModel):
    """A job to create: the spec as the user wrote it, and the files it names."""

    spec: str = Field(max_length=1 << 20)
    """The YAML text."""
    source: str = Field("job.yml", max_length=1000)
    """The spec file's name on the client, named in errors."""
    overrides: list[str] = Field(default_factory=list, max_length=1000)
    """``--set key=value`` items."""
    upload: str | None = None
    """The id ``PUT /api/v1/uploads`` returned for the bundle of local files."""
    places: dict[str, str] = Field(default_factory=dict, max_length=1000)
    """Spec field → folder or file inside the upload."""
    validate_only: bool = False
    """Check the spec (``job validate``) without creating a job."""


class Preempt(BaseModel):
    nodes: list[int] | None = None


def _wire(job: JobRecord) -> dict[str, Any]:
    return job_to_wire(job, JobPaths(Path(job.job_dir)).log_files())


def _placed(body: JobCreate, settings: ServerSettings) -> tuple[list[str], Path | None]:
    """Unpack the upload into a kept folder; the ``--set`` items that point the spec at it."""
    if not body.places:
        return [], None
    if body.upload is None or not _UPLOAD_ID.fullmatch(body.upload):
        raise PhalanxError("places given without an upload id; PUT /api/v1/uploads first")
    archive = settings.uploads / body.upload
    if not archive.is_file():
        raise PhalanxError(f"upload {body.upload} not found (used already, or expired)")
    folder = settings.bundles / uuid.uuid4().hex
    folder.mkdir(parents=True)
    try:
        unpack(archive, folder, settings.max_upload)
        items = []
        for key, member in body.places.items():
            if not _PLACEABLE.fullmatch(key):
                raise UploadError(f"places: {key!r} is not a spec field that names a local file")
            target = (folder / member).resolve()
            if not target.is_relative_to(folder.resolve()) or not target.exists():
                raise UploadError(f"places.{key}: {member!r} is not in the upload")
            items.append(f"{key}={target}")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        archive.unlink(missing_ok=True)
    return items, folder


def _validate_and_submit(ws: Workspace, body: JobCreate, user: str | None,
                         settings: ServerSettings) -> dict[str, Any]:  # fmt: skip
    from phalanx.jobs.control import submit
    from phalanx.jobs.prepare import check
    from phalanx.spec import load_spec_text

    placed, folder = _placed(body, settings)
    try:
        spec = load_spec_text(
            body.spec,
            source=body.source,
            base_dir=folder or settings.bundles,
            overrides=[*body.overrides, *placed],
        )
        spec.check_supported()
        check(spec, ws)
        if body.validate_only:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            return {"valid": True, "nodes": spec.instance_count,
                    "processes_per_node": spec.process_count_per_instance,
                    "compute": spec.compute}  # fmt: skip
        text = body.spec
        if body.overrides:
            text += "".join(f"\n# --set {item}" for item in body.overrides) + "\n"
        return _wire(submit(ws, spec, text, created_by=user))
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise


@router.post("", status_code=201)
def create_job(body: JobCreate, request: Request, user: User) -> dict[str, Any]:
    """Create a job (or, with ``validate_only``, only check it)."""
    settings = settings_of(request)
    return _validate_and_submit(workspace(settings), body, user, settings)


@router.get("")
def list_jobs(
    request: Request,
    _: User,
    limit: Annotated[int, Query(ge=1, le=10000)] = 50,
    status: JobStatus | None = None,
    experiment: str | None = None,
) -> dict[str, Any]:
    """The newest jobs first."""
    from phalanx.jobs.control import refresh

    ws = request_workspace(request)
    jobs = ws.list_jobs(limit=limit, status=status, experiment=experiment)
    return {"jobs": [job_to_wire(refresh(ws, j)) for j in jobs]}


@router.get("/{name}")
def show_job(name: str, request: Request, _: User) -> dict[str, Any]:
    """One job: its record, attempts and log files."""
    from phalanx.jobs.control import refresh

    ws = request_workspace(request)
    return _wire(refresh(ws, ws.get_job(name)))


@router.get("/{name}/spec")
def job_spec(name: str, request: Request, _: User) -> dict[str, Any]:
    """The spec as submitted (the YAML text, ``--set`` items noted) and as resolved."""
    ws = request_workspace(request)
    job = ws.get_job(name)
    try:
        text = ws.paths(name).spec_yaml.read_text()
    except FileNotFoundError:
        text = None
    return {"submitted": text, "resolved": job.spec}


@router.post("/{name}/cancel")
def cancel_job(name: str, request: Request, _: User) -> dict[str, Any]:
    """Stop every process of the job; answers once it has ended (or 30 s passed)."""
    from phalanx.jobs.control import cancel

    ws = request_workspace(request)
    before = ws.get_job(name).status
    return {"already_ended": before.is_terminal, "job": _wire(cancel(ws, name))}


@router.post("/{name}/preempt")
def preempt_job(name: str, body: Preempt, request: Request, _: User) -> dict[str, Any]:
    """Evict some or all nodes of a running job, as a spot reclaim would."""
    from phalanx.jobs.control import preempt

    ws = request_workspace(request)
    return _wire(preempt(ws, name, body.nodes or None))


@router.get("/{name}/logs")
def job_logs(
    name: str,
    request: Request,
    _: User,
    all_ranks: bool = False,
    at: Annotated[str, Query(max_length=100_000, pattern=r"^[0-9:,]*$")] = "",
) -> dict[str, Any]:
    """Bytes of rank 0's log (or every rank's) from the offsets ``at`` (``rank:offset,…``)."""
    ws = request_workspace(request)
    ws.get_job(name)
    try:
        offsets = parse_offsets(at)
    except ValueError:
        raise PhalanxError("at: give rank:offset pairs, e.g. at=0:1200,1:0") from None
    return {"files": read_logs(ws.paths(name), all_ranks=all_ranks, offsets=offsets)}


@router.get("/{name}/metrics")
def job_metrics(
    name: str,
    request: Request,
    _: User,
    points: Annotated[int | None, Query(ge=10, le=1_000_000)] = None,
) -> dict[str, Any]:
    """Every metric's history (``[step, value]`` pairs), the job's and the system's;
    with ``points``, each series downsampled on the server to about that many (a
    chart of 100,000 steps draws from 2,000 that show its shape, spikes included)."""
    from phalanx.workspace.metrics import SYSTEM_METRICS_FILE, downsample, read_metrics

    def wire(history: dict[str, list[tuple[int | None, float | None]]]) -> dict[str, Any]:
        return {
            k: list(map(list, v if points is None else downsample(v, points)))
            for k, v in history.items()
        }

    ws = request_workspace(request)
    job_dir = Path(ws.get_job(name).job_dir)
    return {
        "metrics": wire(read_metrics(job_dir)),
        "system": wire(read_metrics(job_dir, SYSTEM_METRICS_FILE)),
    }
