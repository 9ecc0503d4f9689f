"""``phalanx job …``: create, show, list, stream, metrics, download, cancel, preempt,
validate."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from phalanx.cli.metrics import metrics_cmd
from phalanx.client.backends import jobs_backend
from phalanx.errors import PhalanxError, SpecError
from phalanx.limits import bounded
from phalanx.service.jobs import Jobs, SpecText
from phalanx.terminal.render import job_json, list_jobs, show_job
from phalanx.terminal.stream import stream_job
from phalanx.workspace import JobStatus
from phalanx.workspace.joblist import SORTS, JobQuery

console = Console()
err_console = Console(stderr=True)

# `phalanx run` exits with the job's result.
EXIT_CODES = {JobStatus.COMPLETED: 0, JobStatus.FAILED: 1, JobStatus.CANCELED: 3}
EXIT_INTERRUPTED = 130

file_option = click.option(
    "-f",
    "--file",
    "spec_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The job spec (Azure ML v2 command-job YAML).",
)
set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec field by its dotted path, e.g. --set inputs.epochs=3 (repeatable).",
)


def print_notes(notes: list[str]) -> None:
    """What the job will not get here, as ``note:`` lines on stderr."""
    for note in notes:
        err_console.print(f"note: {bounded(note)}", highlight=False)


def create_and_maybe_stream(
    spec_file: Path, overrides: tuple[str, ...], *, stream: bool, all_ranks: bool
) -> int:
    jobs = jobs_backend()
    submission = jobs.create(SpecText.read(spec_file), overrides)
    print_notes(submission.notes)
    job = submission.created()
    if not stream:
        click.echo(job.name)
        return 0
    return follow(jobs, job.name, all_ranks=all_ranks)


def follow(jobs: Jobs, name: str, *, all_ranks: bool, timestamps: bool = False) -> int:
    """Stream the job; the job's exit code, or 130 when the user stops streaming."""
    try:
        job = stream_job(jobs, name, console, all_ranks=all_ranks, timestamps=timestamps)
    except KeyboardInterrupt:
        err_console.print(
            f"\nstopped streaming; job {name} goes on "
            f"(`phalanx job stream {name}` to follow it, `phalanx job cancel {name}` to stop it)",
            style="yellow",
            soft_wrap=True,
        )
        return EXIT_INTERRUPTED
    return EXIT_CODES.get(job.status, 1)


@click.group("job")
def job_group() -> None:
    """Create and manage training jobs."""


@job_group.command("create")
@file_option
@set_option
@click.option("--stream", is_flag=True, help="Stream rank 0's log until the job ends.")
@click.option("--all-ranks", is_flag=True, help="With --stream: every rank, prefixed.")
def create_cmd(spec_file: Path, overrides: tuple[str, ...], stream: bool, all_ranks: bool) -> int:
    """Submit a job; prints its name (or streams it with --stream)."""
    return create_and_maybe_stream(spec_file, overrides, stream=stream, all_ranks=all_ranks)


@job_group.command("validate")
@file_option
@set_option
def validate_cmd(spec_file: Path, overrides: tuple[str, ...]) -> int:
    """Check a job spec without running it; lists every problem, a line each."""
    from phalanx.client.http import ServerSpecError

    try:
        submission = jobs_backend().create(SpecText.read(spec_file), overrides, validate_only=True)
    except (SpecError, ServerSpecError) as exc:
        exc.every_problem = True  # main's error policy prints them (exit 2)
        raise
    print_notes(submission.notes)
    result = submission.validation
    assert result is not None
    shape = f"{result['nodes']} node(s) × {result['processes_per_node']} process(es)"
    if result.get("type") == "sweep":
        shape = (
            f"a sweep of {result['max_total_trials']} trial(s), "
            f"{result['max_concurrent_trials']} at once, each {shape}"
        )
    console.print(f"[green]valid[/]: {spec_file} · {shape} on {result['compute']}", highlight=False)
    return 0


@job_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show_cmd(name: str, as_json: bool) -> int:
    """Status, attempts, root cause and paths of a job."""
    from phalanx.client.config import server_config
    from phalanx.studio.urls import SERVE_STUDIO, job_page_url, studio_base
    from phalanx.workspace.trials import SWEEP_TARGET, view_to_wire

    jobs = jobs_backend()
    job = jobs.get(name)
    server = server_config()
    page = job_page_url(job.name, studio_base(server.url if server else None, Path(jobs.where)))
    view = jobs.sweep(name) if job.target == SWEEP_TARGET else None
    if as_json:
        shown = {**job_json(job, remote=jobs.remote), "studio_url": page}
        if view is not None:
            shown["sweep"] = view_to_wire(view)
        click.echo(json.dumps(shown, indent=2))
    else:
        show_job(console, job, remote=jobs.remote)
        if view is not None:
            from phalanx.terminal.sweeps import show_sweep

            show_sweep(console, job, view)
        if page is None:  # a link nothing serves would lead nowhere
            console.print(
                f"studio: not running; `{SERVE_STUDIO}` serves this page", highlight=False
            )
        else:
            console.print(f"studio: {page}", highlight=False, soft_wrap=True)
    return 0


@job_group.command("list")
@click.option("--limit", default=50, show_default=True, help="How many jobs (one page).")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
    help="Only jobs in this state (repeat for several).",
)
@click.option("--experiment", help="Only jobs of this experiment.")
@click.option("--user", help="Only jobs this server user created.")
@click.option("--tag", "tags", multiple=True, help="Only jobs with tag KEY or KEY=VALUE.")
@click.option("--search", help="Only jobs whose name, display name, experiment or user has this.")
@click.option(
    "--sort",
    type=click.Choice(list(SORTS)),
    default="created",
    show_default=True,
    help="Order by this (created, started and duration: the latest or longest first).",
)
@click.option(
    "--order",
    type=click.Choice(["asc", "desc"]),
    help="asc or desc (default: desc for created, started and duration, else asc).",
)
@click.option("--cursor", help="The page a previous listing named (its `--cursor …`).")
@click.option("--parent", help="Only the trials of this sweep job.")
@click.option("--trials", is_flag=True, help="Sweeps' trials too (left out by default).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: the jobs.")
@click.option(
    "--json-page",
    "as_json_page",
    is_flag=True,
    help="Machine-readable page: {jobs, total, start, next, prev, last}, as the API's;"
    " give next, prev or last to --cursor for that page.",
)
def list_cmd(
    limit: int,
    statuses: tuple[str, ...],
    experiment: str | None,
    user: str | None,
    tags: tuple[str, ...],
    search: str | None,
    sort: str,
    order: str | None,
    cursor: str | None,
    parent: str | None,
    trials: bool,
    as_json: bool,
    as_json_page: bool,
) -> int:
    """A page of jobs, newest first; filtered and sorted over the whole workspace."""
    if as_json and as_json_page:
        raise PhalanxError("--json, --json-page: give one (--json-page: the jobs and the cursors)")
    query = JobQuery.parse(
        status=statuses,
        experiment=experiment,
        user=user,
        tag=tags,
        text=search,
        parent=parent,
        trials=trials,
        sort=sort,
        order=order,
        limit=limit,
        cursor=cursor,
    )
    backend = jobs_backend()
    page = backend.page(query)
    if as_json or as_json_page:
        jobs = [job_json(j, remote=backend.remote) for j in page.jobs]
        # --json stays a list (as scripts had it before pages); --json-page adds the cursors.
        out: object = jobs
        if as_json_page:
            out = {"jobs": jobs, "total": page.total, "start": page.start, "next": page.next,
                   "prev": page.prev, "last": page.last}  # fmt: skip
        click.echo(json.dumps(out, indent=2))
    else:
        list_jobs(console, page)
    return 0


@job_group.command("stream")
@click.argument("name")
@click.option("--all-ranks", is_flag=True, help="Every rank's log, each line prefixed by its rank.")
@click.option(
    "--timestamps", is_flag=True, help="Begin each line with when it was written (local time)."
)
def stream_cmd(name: str, all_ranks: bool, timestamps: bool) -> int:
    """Follow a job's logs until it ends; exits with the job's result."""
    jobs = jobs_backend()
    jobs.get(name)
    return follow(jobs, name, all_ranks=all_ranks, timestamps=timestamps)


@job_group.command("metrics")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Every metric's history, as JSON.")
def job_metrics_cmd(name: str, as_json: bool) -> int:
    """Latest value of each metric the job logged, with a compact history."""
    return metrics_cmd(name, as_json)


@job_group.command("download")
@click.argument("name")
@click.option(
    "--output",
    "output",
    metavar="NAME",
    help="Only this output (one the spec declares, or checkpoints); default: all outputs.",
)
@click.option(
    "--dest",
    type=click.Path(path_type=Path),
    help="The folder to write into (made if missing)  [default: ./NAME]",
)
def download_cmd(name: str, output: str | None, dest: Path | None) -> int:
    """Copy a job's outputs here (from a server too), each file checked by its sha256.

    Writes DEST/outputs (every output kept in the job's folder), or DEST/OUTPUT with
    --output. Links the job made are not followed.
    """
    from phalanx.service.jobdownload import download_outputs
    from phalanx.sizes import human_size

    got = download_outputs(jobs_backend(), name, output, dest or Path(name))
    landed = got.landed
    size = f"{landed.size} bytes"
    if landed.size >= 1000:
        size = f"{human_size(landed.size)} ({size})"
    console.print(
        f"downloaded {landed.files} file(s), {size}, each sha256-checked, "
        f"to {landed.path.absolute()}",
        highlight=False,
        soft_wrap=True,
    )
    for key, where in got.skipped.items():
        err_console.print(
            f"note: output {key} is kept at {where}, not in the job's folder: read it from there",
            highlight=False,
            soft_wrap=True,
        )
    return 0


@job_group.command("cancel")
@click.argument("name")
def cancel_cmd(name: str) -> int:
    """Stop every process of a job."""
    already_ended, job = jobs_backend().cancel(name)
    if already_ended:
        console.print(f"job {name} had already ended: {job.status}")
    else:
        console.print(f"job {name}: {job.status}")
    return 0


@job_group.command("preempt")
@click.argument("name")
@click.option(
    "--node",
    "nodes",
    type=int,
    multiple=True,
    help="Node rank to evict (repeatable); every node when left out.",
)
def preempt_cmd(name: str, nodes: tuple[int, ...]) -> int:
    """Simulate a spot/low-priority eviction: the job checkpoints and resumes."""
    job = jobs_backend().preempt(name, list(nodes) or None)
    which = f"node(s) {', '.join(map(str, nodes))}" if nodes else "every node"
    grace = (job.spec.get("retry") or {}).get("preemption_grace", 30)
    console.print(
        f"job {name}: preemption of {which} requested; every rank gets SIGTERM and "
        f"{grace} s to checkpoint, then a new attempt resumes",
        soft_wrap=True,
    )
    return 0
