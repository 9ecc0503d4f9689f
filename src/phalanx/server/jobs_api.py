"""``/api/v1/jobs``: create, list, show, cancel, preempt, logs and metrics of jobs.

Only HTTP lives here (the caller, uploads, the wire format): every verb is
:class:`phalanx.service.jobs.LocalJobs`'s, the one the CLI calls on this machine,
asked by the request's caller (who may do what is decided there).
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from phalanx.archives import UploadError, unpack
from phalanx.errors import PhalanxError
from phalanx.server.auth import User
from phalanx.server.logread import parse_offsets, read_logs
from phalanx.server.settings import ServerSettings, request_workspace, settings_of, workspace
from phalanx.service.access import Caller
from phalanx.service.jobs import LocalJobs, SpecText
from phalanx.workspace import JobRecord
from phalanx.workspace.joblist import MAX_LIMIT, JobQuery
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.trials import view_to_wire
from phalanx.workspace.wire import job_to_wire, page_to_wire

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

# The spec fields a client may point at an uploaded file (see phalanx.client.bundle).
_PLACEABLE = re.compile(  # a sweep's trial has its code and environment under `trial.`
    r"(trial\.)?(code|environment\.(pip_file|conda_file|build\.path))"
    r"|inputs\.[A-Za-z0-9_-]+\.path"
)
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")


class JobCreate(BaseModel):
    """A job to create: the spec as the user wrote it, and the files it names."""

    model_config = ConfigDict(extra="forbid")

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
    model_config = ConfigDict(extra="forbid")

    nodes: list[int] | None = None


def _wire(job: JobRecord) -> dict[str, Any]:
    """The record with its log files (the service lists them where the caller may not
    read the server's paths)."""
    logs = job.logs if job.logs is not None else JobPaths(Path(job.job_dir)).log_files()
    return job_to_wire(job, logs)


def _placed(
    body: JobCreate, settings: ServerSettings, who: Caller
) -> tuple[list[str], Path | None]:
    """Unpack the upload into a kept folder; the ``--set`` items that point the spec at it."""
    if not body.places:
        return [], None
    if body.upload is None or not _UPLOAD_ID.fullmatch(body.upload):
        raise PhalanxError("places given without an upload id; PUT /api/v1/uploads first")
    archive = settings.uploads_of(who) / body.upload
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


def _jobs(request: Request, who: Caller) -> LocalJobs:
    return LocalJobs(request_workspace(request), who)


@router.post("", status_code=201)
def create_job(body: JobCreate, request: Request, who: User) -> dict[str, Any]:
    """Create a job (or, with ``validate_only``, only check it); the answer carries the
    notes a local ``job create`` prints (``notes``)."""
    settings = settings_of(request)
    jobs = LocalJobs(workspace(settings), who)
    who.require_member("job create")  # before an upload is unpacked
    placed, folder = _placed(body, settings, who)
    spec = SpecText(body.spec, body.source, folder or settings.bundles, tuple(placed))
    try:
        submission = jobs.create(spec, body.overrides, validate_only=body.validate_only)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    if submission.validation is not None:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        return {**submission.validation, "notes": submission.notes}
    return {**_wire(submission.created()), "notes": submission.notes}


@router.get("")
def list_jobs(
    request: Request,
    who: User,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    status: Annotated[list[str], Query(max_length=20)] = [],  # noqa: B006 (FastAPI copies it)
    experiment: Annotated[str | None, Query(max_length=1000)] = None,
    user: Annotated[str | None, Query(max_length=1000)] = None,
    tag: Annotated[list[str], Query(max_length=20)] = [],  # noqa: B006
    text: Annotated[str | None, Query(max_length=1000)] = None,
    parent: Annotated[str | None, Query(max_length=1000)] = None,
    trials: bool = False,
    sort: str | None = None,
    order: str | None = None,
    cursor: Annotated[str | None, Query(max_length=10_000)] = None,
) -> dict[str, Any]:
    """A page of jobs (newest first unless ``sort``/``order`` say otherwise), with how
    many match in all and the cursors of the pages around it (see
    :mod:`phalanx.workspace.joblist`). ``status`` and ``tag`` may repeat; a tag is
    ``key`` or ``key=value``; ``text`` matches name, display name, experiment, user.
    Sweeps' trials are left out unless ``parent`` names the sweep or ``trials`` is set."""
    query = JobQuery.parse(
        status=status,
        experiment=experiment,
        user=user,
        tag=tag,
        text=text,
        parent=parent,
        trials=trials,
        sort=sort,
        order=order,
        limit=limit,
        cursor=cursor,
    )
    return page_to_wire(_jobs(request, who).page(query))


@router.get("/{name}/sweep")
def sweep_view(name: str, request: Request, who: User) -> dict[str, Any]:
    """A sweep's state and trials (each trial's params, status, result and points)."""
    return view_to_wire(_jobs(request, who).sweep(name))


@router.get("/{name}")
def show_job(name: str, request: Request, who: User) -> dict[str, Any]:
    """One job: its record, attempts and log files."""
    return _wire(_jobs(request, who).get(name))


@router.get("/{name}/spec")
def job_spec(name: str, request: Request, who: User) -> dict[str, Any]:
    """The spec as submitted (the YAML text, ``--set`` items noted) and as resolved."""
    submitted, resolved = _jobs(request, who).submitted(name)
    return {"submitted": submitted, "resolved": resolved}


@router.post("/{name}/cancel")
def cancel_job(name: str, request: Request, who: User) -> dict[str, Any]:
    """Stop every process of the job; answers once it has ended (or 30 s passed)."""
    already_ended, job = _jobs(request, who).cancel(name)
    return {"already_ended": already_ended, "job": _wire(job)}


@router.post("/{name}/preempt")
def preempt_job(name: str, body: Preempt, request: Request, who: User) -> dict[str, Any]:
    """Evict some or all nodes of a running job, as a spot reclaim would."""
    return _wire(_jobs(request, who).preempt(name, body.nodes or None))


@router.get("/{name}/logs")
def job_logs(
    name: str,
    request: Request,
    who: User,
    all_ranks: bool = False,
    at: Annotated[str, Query(max_length=100_000, pattern=r"^[0-9:,]*$")] = "",
    times: bool = False,
) -> dict[str, Any]:
    """Bytes of rank 0's log (or every rank's) from the offsets ``at`` (``rank:offset,…``),
    with ``times``: the entries of each log's time index for them."""
    paths = _jobs(request, who).paths(name)
    try:
        offsets = parse_offsets(at)
    except ValueError:
        raise PhalanxError("at: give rank:offset pairs, e.g. at=0:1200,1:0") from None
    return {"files": read_logs(paths, all_ranks=all_ranks, offsets=offsets, timed=times)}


@router.get("/{name}/metrics")
def job_metrics(
    name: str,
    request: Request,
    who: User,
    points: Annotated[int | None, Query(ge=10, le=1_000_000)] = None,
    elapsed: bool = False,
) -> dict[str, Any]:
    """Every metric's history (``[step, value]`` pairs), the job's and the system's;
    with ``points``, each series downsampled on the server to about that many (a
    chart of 100,000 steps draws from 2,000 that show its shape, spikes included);
    with ``elapsed``, the system's as ``[seconds since the job started, value]``."""
    from phalanx.workspace.metrics import downsample

    def wire(history: Mapping[str, list[tuple[Any, float | None]]]) -> dict[str, Any]:
        return {
            k: list(map(list, v if points is None else downsample(v, points)))
            for k, v in history.items()
        }

    jobs = _jobs(request, who)
    metrics, system = jobs.metrics(name)
    if elapsed:
        return {"metrics": wire(metrics), "system": wire(jobs.system_timeline(name))}
    return {"metrics": wire(metrics), "system": wire(system)}
