"""Turn a validated spec into what the launcher needs: paths, values, command.

Outputs: a local ``path`` (or none: the job's ``outputs/<name>`` folder) is
written in place. A datastore ``path`` with ``mode: upload`` is written
locally under ``outputs/<name>`` and copied to the datastore while the job runs
(every :data:`UPLOAD_INTERVAL_S`, and when a rank asks with
``phalanx.train.request_upload()``) and after every attempt, so a failed or
preempted attempt's files are kept too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from phalanx.compute.inputs import InputsReady, is_local_fs
from phalanx.compute.plan import JobPlan, OutputPlan
from phalanx.compute.ready import Ready, make_ready
from phalanx.environments.containers.image import ImageRef
from phalanx.environments.containers.nodebuild import for_nodes
from phalanx.environments.progress import QUIET, Progress
from phalanx.environments.pythonenv import (
    EnvironmentRequest,
    conda_pip_packages,
    ensure_environment,
    ray_runtime_env,
    request_for,
)
from phalanx.errors import PhalanxError
from phalanx.jobs.accounts import account_for, own_folder
from phalanx.jobs.inputs import check_inputs
from phalanx.launch.account import JobAccount
from phalanx.spec import InputSpec, JobSpec, OutputSpec, render_literal
from phalanx.spec.environment import EnvironmentSpec
from phalanx.storage.location import Location, local
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace
from phalanx.workspace.layout import JobPaths

log = logging.getLogger(__name__)

UPLOAD_INTERVAL_S = 60.0


@dataclass
class Prepared:
    """The job planned, and made ready on the supervisor's side: its outputs' folders and
    uploads, and, where the supervisor makes it ready for the nodes (local compute), its
    inputs, command, environment and account."""

    plan: JobPlan
    command: str
    """The command as the nodes get it (substituted here, or by each node)."""
    inputs: Mapping[str, str]
    uploads: dict[str, tuple[Path, Location]] = field(default_factory=dict)
    """Outputs copied to a datastore: name → (local folder, destination)."""
    ready: InputsReady | None = None
    """What holds the inputs and the read-write output mounts of this machine."""
    env_prefix: Path | None = None
    """The job's built environment (``environment.pip_file``/``conda_file``), if any."""
    image: ImageRef | None = None
    """The image the job's nodes run in (``environment.image``), made ready here."""
    account: JobAccount | None = None
    """A walled-off job's own account (:mod:`phalanx.jobs.accounts`), released at
    :meth:`close`."""
    datastores_file: Path | None = None
    """The datastores the spec names, credentials resolved; removed at :meth:`close`."""
    job_dir: Path | None = None

    @property
    def outputs(self) -> dict[str, str]:
        return self.plan.output_values

    @property
    def env(self) -> dict[str, str]:
        return self.plan.env

    def upload(self) -> list[str]:
        """Copy every upload-mode output's new and changed files to its datastore.

        Returns:
            One line per output that could not be copied (also logged); empty if all were.
        """
        from phalanx.storage.upload import upload_folder

        problems: list[str] = []
        for name, (folder, dest) in self.uploads.items():
            # What was sent is kept where the job's account cannot write (a walled-off
            # job could swap its output folder for a link to the server's).
            manifest = None
            if self.job_dir is not None and self.account is not None:
                manifest = self.job_dir / "system_logs" / f"upload_{name}.json"
            try:
                report = upload_folder(folder, dest, manifest=manifest)
            except PhalanxError as exc:
                log.error("outputs.%s: upload to %s failed: %s", name, dest.url, exc)
                problems.append(f"outputs.{name}: {exc}")
                continue
            if report.uploaded:
                log.info(
                    "outputs.%s: %d file(s), %.1f MB uploaded to %s",
                    name, report.uploaded, report.bytes / 1e6, dest.url,
                )  # fmt: skip
        return problems

    def finish(self) -> None:
        """Make the outputs final before the job is called Completed: every upload-mode
        output copied, every mount unmounted (a read-write one uploads what is left).

        Raises:
            PhalanxError: naming each output that could not be made final.
        """
        problems = self.upload()
        ready, self.ready = self.ready, None
        if ready is not None:
            try:
                ready.close()
            except PhalanxError as exc:
                problems.append(str(exc))
        if problems:
            raise PhalanxError("; ".join(problems))

    def close(self) -> None:
        """Unmount what was mounted (a read-write mount first uploads what is left); forget
        the job's credentials and end its account."""
        if self.ready is not None:
            try:
                self.ready.close()
            except PhalanxError as exc:
                log.error("unmounting: %s", exc)
            self.ready = None
        if self.datastores_file is not None:
            self.datastores_file.unlink(missing_ok=True)
        if self.account is not None and self.job_dir is not None:
            from phalanx.jobs.accounts import release

            release(self.job_dir)
            self.account = None


def check_outputs(spec: JobSpec, ws: Workspace) -> dict[str, Location]:
    """Fail before launch on an output that cannot be written; return the datastore ones.

    Raises:
        PhalanxError: naming the output and the path.
    """
    remote: dict[str, Location] = {}
    for name, out in spec.outputs.items():
        if out.path is None:
            continue
        if not out.is_local:
            try:
                loc = resolve(out.path, ws)
            except PhalanxError as exc:
                raise PhalanxError(f"outputs.{name}: {exc}") from exc
            remote[name] = loc
            if out.mode == "rw_mount" and not is_local_fs(loc):
                from phalanx.storage.mount import fuse_available

                if out.type == "uri_file":
                    raise PhalanxError(
                        f"outputs.{name}: rw_mount mounts folders; use type: uri_folder, "
                        "or mode: upload for a single file"
                    )
                if (reason := fuse_available()) is not None:
                    raise PhalanxError(
                        f"outputs.{name}: rw_mount needs FUSE ({reason}); use mode: upload"
                    )
            continue
        existing = out.local_path
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise PhalanxError(
                f"outputs.{name}: cannot write {out.local_path} ({existing} is not a writable "
                "folder); fix `path` or its permissions"
            )
    return remote


def _rw_mount(
    name: str,
    dest: Location,
    paths: JobPaths,
    ready: InputsReady,
    account: JobAccount | None = None,
) -> Path:
    """Mount a datastore folder read-write for the whole job; files land there on close."""
    from phalanx.storage.mount import cleanup_stale
    from phalanx.storage.rwmount import start_rw_mount

    mountpoint = paths.root / "mounts" / f"out_{name}"
    cleanup_stale(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    log_path = paths.system_logs / f"mount_out_{name}.txt"
    try:
        handle = start_rw_mount(
            dest, mountpoint, paths.root / "staging" / name, log_path=log_path,
            owner=(account.uid, account.gid) if account is not None else None,
        )  # fmt: skip
    except PhalanxError as exc:
        raise PhalanxError(f"outputs.{name}: {exc}") from exc
    ready.keep_mount(handle)  # its unmount uploads what is still open
    log.info("outputs.%s: %s mounted read-write at %s", name, dest.url, mountpoint)
    return mountpoint


def check(spec: JobSpec, ws: Workspace) -> None:
    """Everything :func:`prepare` would refuse, checked before a job is created."""
    from phalanx.jobs.control import queue_entry
    from phalanx.jobs.register import check_registrations

    spec = with_registered_environment(spec, ws)
    queue_entry(ws, spec)  # the counts against the target, before anything uses them
    check_launcher(spec)
    on_ray = check_compute(spec, ws)
    if check_image(spec, ws, on_ray=on_ray) is not None or has_image(spec):
        pass  # the image is the job's environment
    elif on_ray:
        runtime_env_for(spec)
    else:
        check_environment(spec)
    check_inputs(spec, ws)
    check_outputs(spec, ws)
    check_registrations(spec, ws)


def has_image(spec: JobSpec) -> bool:
    """Whether the job's nodes run in a container image (given, or built)."""
    env = spec.inline_environment
    return env is not None and (env.image is not None or env.build is not None)


def check_environment(spec: JobSpec) -> EnvironmentRequest | None:
    """The environment the job asks phalanx to build, read and checked; ``None`` if none.

    Raises:
        PhalanxError: its file cannot be read or asks for what cannot be built here.
    """
    env = spec.inline_environment
    if env is None or not env.builds:
        return None
    return request_for(env.pip_file, env.conda_file)


def with_registered_environment(spec: JobSpec, ws: Workspace) -> JobSpec:
    """``spec`` with a registered environment (``azureml:NAME:VERSION``, ``@latest``)
    put inline; as it is when its environment is inline, or a name nothing is
    registered under (recorded, and noted at ``job create``).

    Raises:
        PhalanxError: the name is registered, but not in that version.
    """
    return _registered(spec, ws)[0]


def _registered(spec: JobSpec, ws: Workspace) -> tuple[JobSpec, str | None]:
    """:func:`with_registered_environment`, and the ``NAME:VERSION`` it put inline."""
    if not isinstance(spec.environment, str):
        return spec, None
    from phalanx.environments.registered import find_environment, split_reference

    found = find_environment(ws, *split_reference(spec.environment))
    if found is None:
        return spec, None
    return spec.model_copy(update={"environment": found.environment()}), (
        f"{found.name}:{found.version}"
    )


def check_image(
    spec: JobSpec,
    ws: Workspace,
    *,
    on_ray: bool,
    build_log: Path | None = None,
    canceled: Callable[[], bool] = lambda: False,
    progress: Progress = QUIET,
) -> ImageRef | None:
    """The job's image made ready on this machine and probed; ``None`` if it has none.

    Args:
        build_log: Build what the job's environment asks to build (a build context, an
            image with a pip/conda layer), its output appended here. ``None`` (at ``job
            create``) checks what can be checked without building.
        progress: Told of a pull or a build, and of a wait for another job's build.

    Raises:
        PhalanxError: no container engine, an image that is not here and cannot be
            pulled, one without a Python phalanx can run on, a build that fails, or one
            without what the job's distribution needs (Open MPI, TensorFlow). One line each.
    """
    env = spec.inline_environment
    if env is None or (env.image is None and env.build is None):
        return None
    if on_ray:
        # Each node makes the image ready itself (its engine, its copy; built there):
        # what can be checked here is that the files a build needs are there.
        for_nodes(env, check_only=True)
        return None
    ref = _ready_image(env, ws.home / "containers", build_log, canceled, progress)
    if ref is not None and spec.distribution_type == "mpi":
        ref.check_mpi("environment.build" if env.build is not None else "environment.image")
    layer_pending = env.builds and build_log is None  # a pip layer may bring TensorFlow
    if ref is not None and spec.distribution_type == "tensorflow" and not layer_pending:
        ref.check_tensorflow("environment.build" if env.build else "environment.image")
    return ref


def _ready_image(
    env: EnvironmentSpec,
    images: Path,
    build_log: Path | None,
    canceled: Callable[[], bool],
    progress: Progress,
) -> ImageRef | None:
    """:func:`check_image`'s image, built first where the environment asks for a build
    (only when ``build_log`` is given; ``None`` then until it is)."""
    from phalanx.environments.containers.build import LayerBuild, context_build, ensure_built
    from phalanx.environments.containers.engine import find_engine
    from phalanx.environments.containers.image import ready_image

    if env.build is not None:
        request = context_build(env.build)
        if build_log is None:
            find_engine()  # no engine: say so now
            return None
        tag = ensure_built(request, images / "builds", build_log, canceled, progress)
        return ready_image(tag, images / "images", field="environment.build")
    assert env.image is not None
    base = ready_image(env.image, images / "images", progress=progress)
    if not env.builds:
        return base
    folder: Path | None
    if env.pip_file is not None:
        text, folder = Path(env.pip_file).read_text(), Path(env.pip_file).parent
    else:
        assert env.conda_file is not None
        packages, folder = conda_pip_packages(env.conda_file, base.version)
        text = "\n".join(packages) + "\n"
    if build_log is None:
        return base
    layer = LayerBuild(base, text, folder)
    tag = ensure_built(layer, images / "builds", build_log, canceled, progress)
    return ready_image(tag, images / "images", field="environment.image")


def runtime_env_for(spec: JobSpec) -> dict[str, Any] | None:
    """The job's environment as Ray's ``runtime_env``; ``None`` if it asks for none.

    Raises:
        PhalanxError: its file cannot be read or cannot be installed on a cluster's nodes.
    """
    env = spec.inline_environment
    if env is None or not env.builds:
        return None
    return ray_runtime_env(env.pip_file, env.conda_file)


def check_compute(spec: JobSpec, ws: Workspace) -> bool:
    """Refuse an unknown compute target, or one that cannot be opened (its token
    cannot be read).

    Returns:
        Whether the job's nodes make its environment ready themselves, on machines of
        their own (a Ray cluster's), rather than its supervisor here.

    Raises:
        PhalanxError: naming the target.
    """
    from phalanx.compute.registry import kind_of
    from phalanx.compute.targets import resolve_target

    target = resolve_target(spec.compute, ws)
    kind = kind_of(target)
    kind.check_open(ws, target)
    return kind.capabilities(target).prepares_on_nodes


def check_launcher(spec: JobSpec) -> None:
    """Refuse a distribution whose launcher or framework this machine lacks.

    Raises:
        PhalanxError: naming what to install.
    """
    if spec.distribution_type == "mpi" and not has_image(spec):  # an image brings its own
        from phalanx.launch.mpi import mpirun_path

        mpirun_path()
    own_environment = spec.inline_environment is not None and spec.inline_environment.builds
    # An image's TensorFlow (its own, or phalanx's lent) is checked with the image.
    if spec.distribution_type == "tensorflow" and not own_environment and not has_image(spec):
        import importlib.util

        if importlib.util.find_spec("tensorflow") is None:
            raise PhalanxError(
                "distribution type tensorflow needs TensorFlow in phalanx's Python "
                "environment: pip install 'phalanx[tensorflow]'"
            )


def plan(spec: JobSpec, paths: JobPaths, ws: Workspace, *, walled: bool = False) -> JobPlan:
    """The job's plan, the same whatever compute runs it: inputs located and checked,
    what each output becomes, the command and environment asked for. Changes nothing.

    Args:
        walled: The job runs as an account of its own (it then writes every output in
            its folder, and the supervisor copies what it wrote).

    Raises:
        PhalanxError: an input or output cannot be provided.
    """
    from phalanx.storage import jobstores

    spec = with_registered_environment(spec, ws)
    remote = check_outputs(spec, ws)
    literals = {
        name: render_literal(value)
        for name, value in spec.inputs.items()
        if not isinstance(value, InputSpec)
    }
    return JobPlan(
        job_dir=paths.root,
        command=spec.command,
        literals=literals,
        data_inputs=spec.data_inputs(),
        locations=check_inputs(spec, ws),
        outputs={
            name: _plan_output(name, out, remote.get(name), paths, walled)
            for name, out in spec.outputs.items()
        },
        env=_variables(spec, paths, ws),
        environment=spec.inline_environment,
        datastores=jobstores.build(spec, ws),
    )


def _variables(spec: JobSpec, paths: JobPaths, ws: Workspace) -> dict[str, str]:
    """The spec's ``environment_variables``, each ``${{secrets.NAME}}`` replaced by the
    value the job's owner stored (:mod:`phalanx.storage.usersecrets`): here, as its
    processes are about to start, and nowhere else.

    Raises:
        PhalanxError: a secret the spec names is not set (any more).
    """
    from phalanx.storage.datastore_records import secrets_of
    from phalanx.storage.usersecrets import references, resolve_variables

    variables = {k: str(v) for k, v in spec.environment_variables.items()}
    if not any(references(v) for v in variables.values()):
        return variables
    owner = ws.get_job(paths.root.name).created_by
    return resolve_variables(variables, secrets_of(ws), owner)


def _plan_output(
    name: str, out: OutputSpec, dest: Location | None, paths: JobPaths, walled: bool
) -> OutputPlan:
    """Where output ``name`` is written, and where it goes after."""
    if walled and dest is None and out.path is not None:
        dest = local(str(out.local_path))  # see below: copied there, as uploads are
    if dest is not None and out.mode == "rw_mount" and not is_local_fs(dest):
        mountpoint = paths.root / "mounts" / f"out_{name}"
        return OutputPlan(value=mountpoint, folder=mountpoint, dest=dest, rw_mount=True)
    if dest is not None and is_local_fs(dest) and not walled:
        # A datastore on this machine's file system (`default`, a shared folder): written
        # in place, nothing to upload or mount. (A walled-off job cannot write there: it
        # writes in its folder and the supervisor copies the files.)
        folder, dest = Path(dest.path), None
    elif out.path is not None and dest is None:
        folder = out.local_path
    else:
        folder = paths.outputs / name
    if out.type != "uri_file":
        return OutputPlan(value=folder, folder=folder, dest=dest)
    if dest is not None:
        # Written as outputs/<name>/<file name>; that folder goes to the file's folder.
        folder = folder / dest.path.rpartition("/")[2]
        dest = Location(dest.fs, dest.path.rpartition("/")[0], dest.url.rpartition("/")[0])
    return OutputPlan(value=folder, folder=folder.parent, file=folder.name, dest=dest)


def prepare(
    spec: JobSpec,
    paths: JobPaths,
    ws: Workspace,
    canceled: Callable[[], bool] = lambda: False,
    *,
    on_nodes: bool = False,
    progress: Progress = QUIET,
) -> Prepared:
    """Plan the job, create its output folders, and make it ready for its nodes here.

    Args:
        on_nodes: The nodes make the job ready themselves (through the same
            :func:`phalanx.compute.ready.make_ready`), and build its environment: here
            it is only planned, and its outputs' folders made.
        progress: Told of the long steps here (a build, a pull, a wait for another
            job's build), for the people watching the job.

    Raises:
        PreparationCanceled: ``canceled()`` answered ``True`` while inputs were prepared.
        PhalanxError: an input or output cannot be provided.
    """
    spec, registered = _registered(spec, ws)
    account = None if on_nodes else account_for(ws.home, paths)
    try:
        job_plan = plan(spec, paths, ws, walled=account is not None)
        if on_nodes:
            ready = Ready(InputsReady(), dict(job_plan.literals), job_plan.command)
            return _with_outputs(job_plan, paths, ready, None)
        return _prepare_here(
            spec, job_plan, paths, ws, canceled, account, progress=progress, label=registered
        )
    except BaseException:
        from phalanx.storage.jobstores import file_for

        file_for(ws.home, paths.root.name).unlink(missing_ok=True)
        if account is not None:  # nothing of the job runs: its account ends here
            from phalanx.jobs.accounts import release

            release(paths.root)
        raise


def _prepare_here(
    spec: JobSpec,
    job_plan: JobPlan,
    paths: JobPaths,
    ws: Workspace,
    canceled: Callable[[], bool],
    account: JobAccount | None,
    *,
    progress: Progress,
    label: str | None,
) -> Prepared:
    """The job made ready on this machine, where its nodes run: environment, the
    datastores file, inputs, command."""
    from phalanx.storage import jobstores

    image, env_prefix = _environment_here(
        spec, paths, ws, canceled, account, progress=progress, label=label
    )
    owner = (account.uid, account.gid) if account is not None else None
    datastores_file = jobstores.write(
        jobstores.file_for(ws.home, paths.root.name), job_plan.datastores, owner
    )
    ready = make_ready(
        job_plan, outputs=job_plan.output_values, checkpoints=paths.checkpoints,
        mounts=paths.root / "mounts", canceled=canceled, owner=owner,
        shown_in=paths.root / "inputs",
    )  # fmt: skip
    return _with_outputs(
        job_plan, paths, ready, account,
        env_prefix=env_prefix, image=image, datastores_file=datastores_file,
    )  # fmt: skip


def _environment_here(
    spec: JobSpec,
    paths: JobPaths,
    ws: Workspace,
    canceled: Callable[[], bool],
    account: JobAccount | None,
    *,
    progress: Progress,
    label: str | None,
) -> tuple[ImageRef | None, Path | None]:
    """The job's image, or its built pip/conda environment, made ready on this machine.

    Args:
        label: The registered environment's ``NAME:VERSION`` (progress names it).
    """
    image = check_image(
        spec, ws, on_ray=False, build_log=paths.system_logs / "image_build.txt",
        canceled=canceled, progress=progress,
    )  # fmt: skip
    if image is not None:
        log.info(
            "environment: nodes run in %s (%s, image %s, Python %s%s)",
            image.image, image.engine, image.image_id[:12], image.version,
            "" if image.torch else ", phalanx's torch lent read-only",
        )  # fmt: skip
        return image, None
    request = None if has_image(spec) else check_environment(spec)
    if request is None:
        return None, None
    if label is not None:
        request = replace(request, label=label)
    env_prefix = ensure_environment(
        request, ws.home / "envs", paths.system_logs / "environment.txt", canceled,
        builder=account, progress=progress,
    )  # fmt: skip
    return None, env_prefix


def _with_outputs(
    job_plan: JobPlan,
    paths: JobPaths,
    ready: Ready,
    account: JobAccount | None,
    **made: Any,
) -> Prepared:
    """The job with its outputs' folders made (and mounted, read-write) on this machine."""
    try:
        uploads = _make_outputs(job_plan, paths, ready.inputs_ready, account)
    except BaseException:
        ready.inputs_ready.close()
        raise
    return Prepared(
        job_plan, ready.command, ready.inputs, uploads=uploads, ready=ready.inputs_ready,
        account=account, job_dir=paths.root, **made,
    )  # fmt: skip


def _make_outputs(
    job_plan: JobPlan, paths: JobPaths, ready: InputsReady, account: JobAccount | None
) -> dict[str, tuple[Path, Location]]:
    """Create each output's folder (a read-write mount held by ``ready``); the uploads."""
    uploads: dict[str, tuple[Path, Location]] = {}
    for name, out in job_plan.outputs.items():
        if out.rw_mount:
            assert out.dest is not None  # a mount of a datastore, by its plan
            _rw_mount(name, out.dest, paths, ready, account)
            continue
        target = out.folder
        try:
            if account is not None and target.is_relative_to(paths.outputs):
                # The job's account wrote here before (an earlier attempt): what it
                # left is never followed, however it looks now.
                own_folder(paths.outputs, target, account.uid, account.gid)
            else:
                target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PhalanxError(f"outputs.{name}: cannot create {target}: {exc.strerror}") from exc
        if out.dest is not None:
            uploads[name] = (target, out.dest)
    return uploads
