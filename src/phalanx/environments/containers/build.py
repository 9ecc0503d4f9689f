"""Images phalanx builds: a Docker build context, or an image with a pip/conda layer.

``environment: {build: {path: DIR, dockerfile_path: Dockerfile}}`` is built from the
context as it is; ``environment: {image: BASE, pip_file: requirements.txt}`` (or a
``conda_file``'s ``pip:`` packages) is built as a derived image: ``FROM BASE``, the
packages installed with pip into ``/opt/phalanx/packages``, which the image puts first
on ``PYTHONPATH`` (and its ``bin`` on ``PATH``), so they win over phalanx's lent
packages. A base image without pip borrows phalanx's (podman mounts it into the
build); the host's CA bundle is mounted too, so the build reaches the package index
through a proxy that the host trusts.

Each build is named by a hash of what goes into it (the context's files, the
Dockerfile, the base image's ID, the packages file): ``phalanx-env:<key>``. A
context's files are those the engine keeps: its ``.dockerignore`` or
``.containerignore`` is honoured as the engine honours it
(:mod:`phalanx.environments.containers.ignore`), so editing a file it leaves out builds nothing;
``.git`` and ``__pycache__`` folders are never hashed. A second
job asking for the same content finds the image and starts at once; builds of one
key are serialised with a file lock. The build's output is appended to the job's
``system_logs/image_build.txt``; a failed build fails the job in one line that names
that log.

Every job that uses a built image touches its record in the workspace's builds folder;
:func:`prune` (``phalanx environment prune``) removes the images no job used lately.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from phalanx.cancelable import held, run_logged
from phalanx.environments.containers.engine import Engine, find_engine, last_line
from phalanx.environments.containers.ignore import ContextIgnore, ignore_file
from phalanx.environments.containers.image import ImageRef, image_id
from phalanx.environments.containers.run import site_packages
from phalanx.environments.progress import QUIET, Progress, Step, builder_words, building
from phalanx.errors import PhalanxError, PreparationCanceled
from phalanx.hashing import file_digest

log = logging.getLogger(__name__)

TAG = "phalanx-env"
LABEL = "phalanx.env"
"""The label of every image phalanx builds: its key (``podman images --filter label=…``)."""
USED = ".used"
"""A build record's suffix: its time is the image's last use by a job of the workspace."""
LAYER = "/opt/phalanx/packages"
"""Where a derived image's pip packages are installed."""
_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_LENT_PIP = "/opt/phalanx/pip"
SKIPPED = (".git", "__pycache__")
"""Never hashed: history and caches (a new commit does not rebuild)."""
_IGNORE_FILES = (".dockerignore", ".containerignore")


@dataclass(frozen=True)
class ContextBuild:
    """``environment.build``: a folder with a Dockerfile."""

    path: Path
    dockerfile: Path

    @property
    def described(self) -> str:
        """The image, for people: ``from build context docker``."""
        return f"from build context {self.path.name}"

    def key(self, engine: Engine) -> str:
        """The hash of what the build reads: the Dockerfile (even one the ignore file
        names: the engine reads it all the same) and the files the engine keeps.

        Raises:
            PhalanxError: the ignore file cannot be read, or holds a bad pattern.
        """
        digest = hashlib.sha256(f"context\0{engine.name}\0".encode())
        digest.update(str(self.dockerfile.relative_to(self.path)).encode() + b"\0")
        digest.update(file_digest(self.dockerfile).encode())
        ignore = ContextIgnore.read(ignore_file(self.path, self.dockerfile, engine.name))
        for file in ignore.files(self.path, SKIPPED):
            digest.update(str(file.relative_to(self.path)).encode() + b"\0")
            digest.update(file_digest(file).encode())
        return digest.hexdigest()[:20]


@dataclass(frozen=True)
class LayerBuild:
    """An image with pip packages layered on it."""

    base: ImageRef
    requirements: str
    """The requirements, as text."""
    folder: Path | None
    """Where the packages file was: its folder is the build context (local paths in it)."""

    @property
    def described(self) -> str:
        """The image, for people: ``python:3.11-slim with the job's pip packages``."""
        return f"{self.base.image} with the job's pip packages"

    def key(self, engine: Engine) -> str:
        digest = hashlib.sha256(f"layer\0{engine.name}\0{self.base.image_id}\0".encode())
        digest.update(self.requirements.encode() + b"\0")
        if self.folder is not None:
            for file in ContextIgnore(()).files(self.folder, SKIPPED):
                stat = file.stat()
                digest.update(f"{file}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
        return digest.hexdigest()[:20]


def context_build(build: dict[str, object]) -> ContextBuild:
    """``environment.build`` checked: the folder and its Dockerfile exist.

    Raises:
        PhalanxError: one of them is missing, or the Dockerfile is outside the folder.
    """
    path = Path(str(build.get("path") or ""))
    if not path.is_dir():
        raise PhalanxError(f"environment.build.path: {path} is not a folder")
    dockerfile = path / str(build.get("dockerfile_path") or "Dockerfile")
    if not dockerfile.is_file():
        raise PhalanxError(
            f"environment.build.dockerfile_path: {dockerfile} not found; the path is relative "
            "to the build context"
        )
    if not dockerfile.resolve().is_relative_to(path.resolve()):
        raise PhalanxError(
            f"environment.build.dockerfile_path: {dockerfile} is outside the build context "
            f"{path}; put the Dockerfile in that folder"
        )
    return ContextBuild(path.resolve(), dockerfile.resolve())


def ensure_built(
    request: ContextBuild | LayerBuild,
    lock_dir: Path,
    log_path: Path,
    canceled: Callable[[], bool] = lambda: False,
    progress: Progress = QUIET,
) -> str:
    """The image for ``request``, built if no image of its content is here.

    Args:
        lock_dir: The workspace's builds folder: the build's lock, and the record of
            the image's last use (``phalanx-env-<key>.used``, what :func:`prune` reads).
        progress: Told of the build, or of the wait for another job's build.

    Returns:
        The image's tag (``phalanx-env:<key>``).

    Raises:
        PreparationCanceled: ``canceled()`` said so while waiting or building.
        PhalanxError: the build failed (its last line, and the log named).
    """
    engine = find_engine()
    tag = f"{TAG}:{request.key(engine)}"
    mark_used(lock_dir, tag)  # before it is looked for: prune spares it
    if image_id(engine, tag) is not None:
        log.info("image %s: reused", tag)
        return tag
    lock = lock_dir / f"{_stem(tag)}.lock"
    what = request.described

    def waits() -> None:  # another job is building it: the image is then there
        progress.announce(Step(f"waiting for image {what}, {builder_words(lock)}"))

    try:
        with held(lock, canceled, "the image build", waits):
            if image_id(engine, tag) is not None:
                return tag
            log.info("image %s: building", tag)
            progress.announce(Step(f"building image {what} (first use)", log_path))
            with building(lock, progress):
                if isinstance(request, ContextBuild):
                    _build(engine, tag, request.path, request.dockerfile, [], log_path, canceled)
                else:
                    _build_layer(engine, tag, request, log_path, canceled)
    finally:
        progress.announce(None)
    return tag


@dataclass
class Pruned:
    """What :func:`prune` removed, and what it kept."""

    removed: list[str] = field(default_factory=list)
    """The images removed (or, for a dry run, that would be)."""
    kept: dict[str, str] = field(default_factory=dict)
    """Images that could not be removed (a container uses them): why, in the engine's words."""


def prune(builds: Path, unused_for_s: float | None, *, dry_run: bool = False) -> Pruned:
    """Remove the images the workspace's jobs built or used, unused for ``unused_for_s``
    seconds (all when ``None``). A job that needs one later builds it again.

    Args:
        builds: The workspace's builds folder (``$PHALANX_HOME/containers/builds``).
        dry_run: Only say what would be removed.

    Raises:
        PhalanxError: there are images to remove and no engine to remove them with.
    """
    pruned = Pruned()
    records = sorted(builds.glob(f"{TAG}-*{USED}")) if builds.is_dir() else []
    if not records:
        return pruned
    engine = find_engine()
    cutoff = time.time() - (unused_for_s or 0)
    for record in records:
        tag = f"{TAG}:{record.name[len(TAG) + 1 : -len(USED)]}"
        if _used_at(record) > cutoff:
            continue
        if image_id(engine, tag) is None:  # removed by hand, or its build failed
            if not dry_run:
                record.unlink(missing_ok=True)
            continue
        if dry_run:
            pruned.removed.append(tag)
            continue
        if _used_at(record) > cutoff:
            continue  # a job took it up meanwhile
        # Never forced: the engine refuses an image a container (a running job) uses.
        proc = engine.run(["rmi", tag])
        if proc.returncode == 0:
            record.unlink(missing_ok=True)
            pruned.removed.append(tag)
        else:
            pruned.kept[tag] = last_line(proc.stderr or proc.stdout)
    return pruned


def mark_used(builds: Path, tag: str) -> None:
    """Record that a job of the workspace uses the built image ``tag`` now (each attempt
    marks it again: a job that waits in the queue for weeks keeps its image)."""
    if tag.startswith(f"{TAG}:"):
        builds.mkdir(parents=True, exist_ok=True)
        (builds / f"{_stem(tag)}{USED}").touch()


def _used_at(record: Path) -> float:
    try:
        return record.stat().st_mtime
    except OSError:
        return time.time()  # gone: taken as just used, so left alone


def _stem(tag: str) -> str:
    return tag.replace(":", "-")


def _build_layer(
    engine: Engine, tag: str, request: LayerBuild, log_path: Path, canceled: Callable[[], bool]
) -> None:
    base = request.base
    pip = f"{base.python} -m pip"
    volumes: list[str] = []
    if not base.pip:
        if not engine.is_podman:
            raise PhalanxError(
                f"environment.image {base.image!r} has no pip for its pip_file/conda_file: "
                "install pip in the image"
            )
        # pip is pure Python: phalanx's own runs on the image's interpreter.
        lent = site_packages()[0]
        volumes += ["-v", f"{lent}:{_LENT_PIP}:ro"]
        pip = f"PYTHONPATH={_LENT_PIP} {base.python} -m pip"
    with tempfile.TemporaryDirectory(prefix="phalanx-layer-") as tmp:
        context = Path(tmp) / "context"
        if request.folder is not None and request.folder.is_dir():
            # Without the folder's ignore files: they are for builds of the user's own,
            # and could leave out the packages file written below.
            shutil.copytree(request.folder, context, symlinks=True,
                            ignore=shutil.ignore_patterns(*SKIPPED, *_IGNORE_FILES))  # fmt: skip
        context.mkdir(exist_ok=True)
        (context / ".phalanx-requirements.txt").write_text(request.requirements)
        dockerfile = Path(tmp) / "Dockerfile"
        dockerfile.write_text(
            f"FROM {base.image_id}\n"
            "COPY . /opt/phalanx/context\n"
            "WORKDIR /opt/phalanx/context\n"
            f"RUN {pip} install --no-input --no-cache-dir --disable-pip-version-check "
            f"--root-user-action=ignore --target {LAYER} -r .phalanx-requirements.txt "
            "&& rm -rf /opt/phalanx/context\n"
            f"ENV PYTHONPATH={':'.join(p for p in (LAYER, base.pythonpath) if p)}\n"
            f"ENV PATH={LAYER}/bin:{base.path}\n"
            "WORKDIR /\n"
        )
        _build(engine, tag, context, dockerfile, volumes, log_path, canceled)


def _stop_run_steps(group: str) -> None:
    """Kill what a killed build's RUN steps left running in the control group ``group``,
    then remove the group (cgroup v1 or v2, wherever it is mounted)."""
    marks = (f":/{group}\n", f":/{group}/")
    found = []
    for proc in psutil.process_iter():
        try:
            text = Path(f"/proc/{proc.pid}/cgroup").read_text()
        except OSError:
            continue
        if any(mark in text for mark in marks):
            found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=5)
    root = Path("/sys/fs/cgroup")
    for folder in [root / group, *root.glob(f"*/{group}")]:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _build(
    engine: Engine,
    tag: str,
    context: Path,
    dockerfile: Path,
    volumes: list[str],
    log_path: Path,
    canceled: Callable[[], bool],
) -> None:
    argv = [engine.path, "build", "--network", "host", "-t", tag, "-f", str(dockerfile)]
    argv += ["--label", f"{LABEL}={tag.partition(':')[2]}"]
    if engine.is_podman:
        argv += ["--layers", *volumes]
        if _CA_BUNDLE.is_file():
            argv += ["-v", f"{_CA_BUNDLE}:{_CA_BUNDLE}:ro"]
    for name in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if _CA_BUNDLE.is_file() and engine.is_podman:
            argv += ["--env", f"{name}={_CA_BUNDLE}"]  # for RUN steps only, not kept
    # podman runs a RUN step as a container of its own session, which outlives a killed
    # podman: in a control group named for this build, a cancel finds and stops it.
    group = f"phalanx-build-{os.getpid()}-{tag.partition(':')[2]}"
    if engine.is_podman and os.geteuid() == 0:
        argv += ["--cgroup-parent", f"/{group}"]
    argv.append(str(context))
    try:
        code = run_logged(argv, log_path, canceled, "the image build", env=engine.env())
    except PreparationCanceled:
        _stop_run_steps(group)
        raise
    if code != 0:
        try:
            text = log_path.read_text(errors="replace")
        except OSError:
            text = ""
        raise PhalanxError(
            f"environment: image build failed (exit {code}): {last_line(text)}; see {log_path}"
        )
