"""A job's Python environment, built once per content and kept on the node.

``environment: {pip_file: requirements.txt}`` (or a ``conda_file``) becomes a
virtual environment under ``$PHALANX_HOME/envs/<key>``, where the key hashes
the file's content, the interpreter and phalanx's own environment: a second
job asking for the same packages starts at once. The environment is *layered*
on phalanx's: a ``.pth`` file adds phalanx's site-packages after the
environment's own, so torch and phalanx stay importable and a package the file
pins wins over phalanx's copy. pip runs from phalanx's environment against the
new interpreter (``pip --python``), so the build needs no ``ensurepip``.

A ``conda_file`` is built with conda (``micromamba``, ``mamba`` or ``conda``,
the first on ``PATH``) when one is installed; otherwise its ``pip:`` packages
are layered as above, and conda packages other than ``python`` and ``pip`` are
refused with a message saying so.

Builds are serialised per key with a file lock and happen at the
environment's own path (pip and conda write that path into scripts, so the
folder cannot be moved afterwards); the ready marker is written last, and a
folder without it, from a failed or killed build, is removed before the next
try.

On a server that walls jobs off, a build runs what the job's files say (a
package's ``setup.py`` or build backend runs code), so it runs as the job's own
account from the base environment, never as root: it reads copies of the files the
spec names and writes only the environment's folder. Once it is done, whatever of
that account still runs is stopped, and the folder becomes root's and read-only to
everyone else (set-id bits cleared) before it is marked ready, so no job, this one
included, can change an environment another job will run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from phalanx import __version__
from phalanx.cancelable import held, run_logged
from phalanx.environments.progress import QUIET, Progress, Step, builder_words, building
from phalanx.errors import PhalanxError
from phalanx.launch.account import JobAccount

log = logging.getLogger(__name__)

READY = ".phalanx-ready"
_CONDA_TOOLS = ("micromamba", "mamba", "conda")
# Conda dependency specs phalanx can honour without conda: the interpreter and pip.
_PYTHON_SPEC = re.compile(r"^python(?:\s*[=<>!~].*)?$")
_PIP_SPEC = re.compile(r"^pip(?:\s*[=<>!~].*)?$")


@dataclass(frozen=True)
class EnvironmentRequest:
    """What a job asked for: the packages file's content and what kind it is."""

    kind: str
    """``pip`` (requirements), ``conda`` (built with conda) or ``conda-pip`` (a conda
    file's pip packages, layered)."""
    text: str
    """The requirements, or the conda file, as text."""
    folder: Path | None
    """Where the file was: relative paths inside it resolve against this."""
    path: Path | None = None
    """The requirements file itself, which pip reads (its ``-r`` includes are relative to it)."""
    label: str = "of the job"
    """How people know it (no part of its key): a registered environment's
    ``NAME:VERSION``, or ``from requirements.txt``."""

    def described(self, more: str = "") -> str:
        """``environment torch-cpu:2 (pip, MORE)``: the environment, for people."""
        kind = {"conda-pip": "pip, from a conda file"}.get(self.kind, self.kind)
        return f"environment {self.label} ({kind}{', ' if more else ''}{more})"

    @cached_property  # hashes included files and walks local paths: once
    def key(self) -> str:
        """The environment's cache key: content (with the files a pip file includes and the
        local paths it installs), interpreter and phalanx's environment."""
        digest = hashlib.sha256()
        for part in (self.kind, self.text, sys.version, sys.prefix, __version__):
            digest.update(part.encode() + b"\0")
        if self.path is not None:
            for part in _referenced(self.path, set()):
                digest.update(part.encode() + b"\0")
        return digest.hexdigest()[:20]


def request_for(
    pip_file: str | None, conda_file: str | dict[str, Any] | None
) -> EnvironmentRequest:
    """Read the job's packages file into a request.

    Raises:
        PhalanxError: the file cannot be read, or a conda file asks for conda packages
            and no conda is installed.
    """
    if pip_file is not None:
        path = Path(pip_file)
        text = _read(pip_file, "pip_file")
        return EnvironmentRequest("pip", text, path.parent, path, f"from {path.name}")
    assert conda_file is not None  # the spec allows one of the two
    if isinstance(conda_file, dict):
        doc, folder, label = conda_file, None, "of the job"
        text = yaml.safe_dump(conda_file, sort_keys=True)
    else:
        text, folder = _read(conda_file, "conda_file"), Path(conda_file).parent
        doc, label = _conda_doc(text, conda_file), f"from {Path(conda_file).name}"
    if conda_tool() is not None:
        return EnvironmentRequest("conda", text, folder, label=label)
    packages = "\n".join(_pip_packages(doc)) + "\n"
    return EnvironmentRequest("conda-pip", packages, folder, label=label)


def ray_runtime_env(
    pip_file: str | None, conda_file: str | dict[str, Any] | None
) -> dict[str, Any]:
    """The job's environment as Ray's ``runtime_env``: Ray builds it on each node (once per
    content) and runs the node agent, and so the node's launcher and ranks, inside it.

    A pip file's ``-r`` includes are read in; a conda file with conda packages goes to
    Ray's ``conda`` (the nodes need conda), one with only pip packages to ``pip``.

    Raises:
        PhalanxError: a file cannot be read, or it installs from a path or a constraints
            file on this machine, which the cluster's nodes do not have.
    """
    if pip_file is not None:
        _read(pip_file, "pip_file")
        return {"pip": {"packages": _pip_lines(Path(pip_file), set()), "pip_check": False}}
    assert conda_file is not None  # the spec allows one of the two
    doc: Any = conda_file
    if not isinstance(conda_file, dict):
        doc = _conda_doc(_read(conda_file, "conda_file"), conda_file)
    if _conda_only(doc):
        return {"conda": doc}
    return {"pip": {"packages": _pip_packages(doc), "pip_check": False}}


def conda_pip_packages(
    conda_file: str | dict[str, Any], image_python: str
) -> tuple[list[str], Path | None]:
    """A conda file's ``pip:`` packages (what phalanx layers on an image) and its folder.

    Args:
        image_python: The image's Python (``major.minor``), which a ``python=`` pin
            must name.

    Raises:
        PhalanxError: the file cannot be read, it lists conda packages, or pins another
            Python than the image's.
    """
    if isinstance(conda_file, dict):
        return _pip_packages(conda_file, image_python), None
    doc = _conda_doc(_read(conda_file, "conda_file"), conda_file)
    return _pip_packages(doc, image_python), Path(conda_file).parent


def _conda_doc(text: str, conda_file: str) -> Any:
    """A conda file's document, read within the YAML limits (an empty file is ``{}``).

    Raises:
        SpecError: not YAML, or over :mod:`phalanx.spec.yamldoc`'s limits (named, with
            the line).
    """
    from phalanx.spec.yamldoc import load_yaml

    return load_yaml(text, conda_file) or {}


def _pip_lines(path: Path, seen: set[Path]) -> list[str]:
    """A requirements file's lines with its ``-r`` includes read in."""
    real = path.resolve()
    if real in seen:
        return []
    seen.add(real)
    lines: list[str] = []
    for line in _read(str(real), "pip_file").splitlines():
        stripped = line.split(" #")[0].strip()
        if not stripped or stripped.startswith("#"):
            continue
        if match := _INCLUDE.match(stripped):
            if stripped.startswith(("-c", "--constraint")):
                raise PhalanxError(
                    f"environment.pip_file {path}: a constraints file ({match[1]}) is not on the "
                    "Ray cluster's nodes; pin the versions in the requirements instead"
                )
            lines += _pip_lines(real.parent / match[1], seen)
        elif _LOCAL.match(stripped):
            raise PhalanxError(
                f"environment.pip_file {path}: {stripped!r} installs from a path on this "
                "machine, which the Ray cluster's nodes do not have; publish the package to "
                "an index, or put it in the job's code"
            )
        else:
            lines.append(stripped)
    return lines


def conda_tool() -> str | None:
    """The first conda-like tool on ``PATH``."""
    return next((exe for t in _CONDA_TOOLS if (exe := shutil.which(t))), None)


def ensure_environment(
    request: EnvironmentRequest,
    root: Path,
    log_path: Path,
    canceled: Callable[[], bool] = lambda: False,
    builder: JobAccount | None = None,
    progress: Progress = QUIET,
) -> Path:
    """The ready environment for ``request`` under ``root``, built if it is not there.

    Args:
        root: The node's environments folder (``$PHALANX_HOME/envs``).
        log_path: The build's output is appended here.
        canceled: Asked every half second while waiting for another job's build and while
            building; ``True`` stops the build (nothing half-built is kept).
        builder: The walled-off job's account the build runs as (``None``: this
            process's own); see the module docstring.
        progress: Told of the build, or of the wait for another job's build.

    Returns:
        The environment's folder (its ``bin/python`` is the job's ``python``).

    Raises:
        PreparationCanceled: ``canceled()`` said so.
        PhalanxError: the build failed (the last line of its output, and the log named).
    """
    root.mkdir(parents=True, exist_ok=True)
    target = root / request.key
    if (ready := _ready(target)) is not None:
        log.info("environment %s: reused (%s)", request.key, ready)
        return ready
    lock = root / f"{request.key}.lock"

    def waits() -> None:  # another job is building it: it is then ready
        words = builder_words(lock)
        progress.announce(Step(f"waiting for {request.described()}, {words}"))

    try:
        with held(lock, canceled, "the environment", waits):
            if (ready := _ready(target)) is not None:  # built by another job meanwhile
                log.info("environment %s: built by another job meanwhile", request.key)
                return ready
            progress.announce(Step(f"building {request.described('first use')}", log_path))
            with building(lock, progress):
                prefix = _built(request, target, log_path, canceled, builder)
    finally:
        progress.announce(None)
    log.info("environment %s: ready (%s)", request.key, prefix)
    return prefix


def _built(
    request: EnvironmentRequest,
    target: Path,
    log_path: Path,
    canceled: Callable[[], bool],
    builder: JobAccount | None,
) -> Path:
    """Build the environment at ``target`` (under its lock), marked ready last; its prefix.
    A failed or canceled build leaves nothing, and nothing of it running."""
    shutil.rmtree(target, ignore_errors=True)  # a build killed before it was ready
    log.info("environment %s: building (%s)", request.key, request.kind)
    try:
        prefix = _build_as(builder, request, target, log_path, canceled)
        marker = {"kind": request.kind, "prefix": prefix.relative_to(target).as_posix()}
        (target / READY).write_text(json.dumps(marker) + "\n")
    except BaseException:
        if builder is not None:
            from phalanx.launch.procs import kill_user

            kill_user(builder.uid)  # what the build started must not outlive it
        shutil.rmtree(target, ignore_errors=True)
        raise
    return prefix


def _ready(target: Path) -> Path | None:
    """The environment's prefix if ``target`` holds a finished build, else ``None``."""
    try:
        marker = json.loads((target / READY).read_text())
    except (OSError, ValueError):
        return None
    relative = marker.get("prefix", ".") if isinstance(marker, dict) else "."
    return target if relative == "." else target / str(relative)


def _build_as(
    builder: JobAccount | None,
    request: EnvironmentRequest,
    target: Path,
    log_path: Path,
    canceled: Callable[[], bool],
) -> Path:
    """Build into ``target`` (as ``builder`` when given); the environment's prefix."""
    if builder is None:
        _build(request, target, log_path, canceled)
        return target
    import os

    from phalanx.launch.procs import kill_user

    ids = (builder.uid, builder.gid)
    target.mkdir()
    os.chown(target, *ids)
    if request.path is not None:  # the job's files are root's: the build reads a copy
        files = target / ".phalanx-files"
        request = _with_copied_files(request, files)
        _chown_tree(files, ids)
    # conda makes its prefix itself: a folder inside the one the account may write.
    prefix = target / "env" if request.kind == "conda" else target
    env = builder.base_env(os.environ)
    _build(request, prefix, log_path, canceled, env=env, as_account=builder)
    kill_user(builder.uid)  # a process the build left behind could change it later
    shutil.rmtree(target / ".phalanx-files", ignore_errors=True)
    _seal(target, builder.uid)
    return prefix


def _with_copied_files(request: EnvironmentRequest, files: Path) -> EnvironmentRequest:
    """``request`` pointed at a copy of its requirements file and what it names."""
    assert request.path is not None
    copied = copy_requirements(request.path, files)
    return EnvironmentRequest(request.kind, request.text, copied.parent, copied)


def _chown_tree(top: Path, ids: tuple[int, int]) -> None:
    import os

    os.chown(top, *ids, follow_symlinks=False)
    for folder, dirs, names in os.walk(top):
        for name in (*dirs, *names):
            os.chown(os.path.join(folder, name), *ids, follow_symlinks=False)


def _seal(target: Path, builder: int) -> None:
    """Make a built environment root's: no account can change it, every account can
    read and run it. Set-user/group-id bits and access lists are cleared (an entry the
    build gave its own account would outlast the change of owner), links are left as
    links, and a file the build did not make (a hard link to another's) is removed."""
    import os
    import stat

    for folder, dirs, names in os.walk(target, topdown=False):
        for name in (*names, *dirs):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid not in (builder, 0):
                os.unlink(path)
                continue
            os.chown(path, 0, 0, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                continue
            _drop_access_lists(path)
            mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
            mode &= ~0o022
            os.chmod(
                path, mode | 0o444 | (0o111 if mode & 0o100 or stat.S_ISDIR(info.st_mode) else 0)
            )
    os.chown(target, 0, 0)
    _drop_access_lists(str(target))
    os.chmod(target, 0o755)


def _drop_access_lists(path: str) -> None:
    import contextlib
    import os

    for name in ("system.posix_acl_access", "system.posix_acl_default"):
        with contextlib.suppress(OSError):
            os.removexattr(path, name, follow_symlinks=False)


def _build(
    request: EnvironmentRequest,
    prefix: Path,
    log_path: Path,
    canceled: Callable[[], bool],
    *,
    env: dict[str, str] | None = None,
    as_account: JobAccount | None = None,
) -> None:
    cwd = request.folder if request.folder is not None and request.folder.is_dir() else None

    def _run(argv: list[str], log_path: Path, cwd: Path | None, what: str,
             canceled: Callable[[], bool]) -> None:  # fmt: skip
        _run_as(argv, log_path, cwd, what, canceled, env, as_account)

    if request.kind == "conda":
        tool = conda_tool()
        assert tool is not None  # chosen because it was there
        conda_yml = prefix.with_suffix(".yml")
        conda_yml.write_text(request.text)
        conda_yml.chmod(0o644)
        try:
            _run([tool, "env", "create", "--yes", "-p", str(prefix), "-f", str(conda_yml)],
                 log_path, cwd, "conda env create", canceled)  # fmt: skip
        finally:
            conda_yml.unlink(missing_ok=True)
        return
    _run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], log_path, cwd, "venv",
         canceled)  # fmt: skip
    _layer_on_phalanx(prefix)
    if as_account is not None:  # the .pth this process wrote, for pip to see
        _chown_tree(prefix / "lib", (as_account.uid, as_account.gid))
    requirements = request.path
    if requirements is None:  # a conda file's pip section
        requirements = prefix / "requirements.txt"
        requirements.write_text(request.text)
        requirements.chmod(0o644)
    python = prefix / "bin" / "python"
    if any(
        line.strip() and not line.lstrip().startswith("#") for line in request.text.splitlines()
    ):
        _run(
            [sys.executable, "-m", "pip", "--python", str(python), "install",
             "--no-input", "--disable-pip-version-check", "-r", str(requirements)],
            log_path, cwd, "pip install", canceled,
        )  # fmt: skip


def _layer_on_phalanx(prefix: Path) -> None:
    """Make phalanx's packages importable from the environment, after its own."""
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = prefix / "lib" / version / "site-packages"
    site_packages.mkdir(parents=True, exist_ok=True)
    # addsitedir, not a bare path: it also runs the .pth files there (editable installs).
    lines = [f"import site; site.addsitedir({p!r})" for p in paths]
    (site_packages / "zz_phalanx_base.pth").write_text("\n".join(lines) + "\n")


def _run_as(
    argv: list[str],
    log_path: Path,
    cwd: Path | None,
    what: str,
    canceled: Callable[[], bool],
    env: dict[str, str] | None,
    account: JobAccount | None,
) -> None:
    code = run_logged(
        argv, log_path, canceled, f"the environment's {what}", cwd=cwd, env=env,
        popen=account.popen_kwargs() if account is not None else None,
    )  # fmt: skip
    if code != 0:
        last = _last_line(log_path)
        raise PhalanxError(f"environment: {what} failed (exit {code}): {last}; see {log_path}")


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1][:300]


_INCLUDE = re.compile(r"^\s*(?:-r|--requirement|-c|--constraint)\s*=?\s*(\S+)")
_LOCAL = re.compile(r"^\s*(?:-e\s+|--editable\s+|--find-links\s+|-f\s+)?(\.{1,2}/\S*|/\S+)")


def copy_requirements(source: Path, dest: Path) -> Path:
    """Copy a requirements file and what it names (``-r``/``-c`` files, local packages)
    into ``dest``, each at its place relative to the file; the copy of the file.

    Only those: the file's folder may be a whole project (or hold the workspace).

    Raises:
        PhalanxError: something it names lies outside its folder.
    """
    base = source.resolve().parent
    for path in requirement_files(source):
        if not path.is_relative_to(base):
            raise PhalanxError(
                f"environment pip_file {source}: {path} is outside the file's folder; "
                "keep the files it includes or installs beside it"
            )
        target = dest / path.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, symlinks=True, dirs_exist_ok=True)
        elif path.is_file():
            shutil.copy2(path, target)
    return dest / source.name


def requirement_files(path: Path) -> list[Path]:
    """A requirements file and what it needs beside it: the ``-r``/``-c`` files it
    includes (and theirs), and the local files and folders it installs from."""
    found: list[Path] = []
    pending = [path.resolve()]
    while pending:
        real = pending.pop()
        if real in found:
            continue
        found.append(real)
        try:
            lines = real.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if match := _INCLUDE.match(line):
                pending.append((real.parent / match[1]).resolve())
            elif (match := _LOCAL.match(line)) and (real.parent / match[1]).exists():
                found.append((real.parent / match[1]).resolve())
    return found


def _referenced(path: Path, seen: set[Path]) -> list[str]:
    """What else a requirements file depends on: its ``-r``/``-c`` files' text, and a
    fingerprint (names, sizes, times) of the local paths it installs from."""
    real = path.resolve()
    if real in seen:
        return []
    seen.add(real)
    try:
        lines = real.read_text().splitlines()
    except OSError:
        return [f"missing {real}"]
    parts: list[str] = []
    for line in lines:
        if match := _INCLUDE.match(line):
            included = (real.parent / match[1]).resolve()
            parts += [f"include {included}", *_referenced(included, seen)]
            parts.append(included.read_text() if included.is_file() else "missing")
        elif match := _LOCAL.match(line):
            local = (real.parent / match[1]).resolve()
            files = (
                [local] if local.is_file() else sorted(local.rglob("*")) if local.is_dir() else []
            )
            parts += [
                f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files if p.is_file()
            ]
    return parts


def _read(path: str, field: str) -> str:
    from phalanx.spec.yamldoc import read_text

    try:
        return read_text(path, path)
    except OSError as exc:
        raise PhalanxError(f"environment.{field} {path}: {exc.strerror}") from exc


def _dependencies(doc: Any) -> list[Any]:
    return list((doc.get("dependencies") if isinstance(doc, dict) else None) or [])


def _conda_only(doc: Any) -> list[str]:
    """A conda file's dependencies that only conda installs (not python, pip, its pip list)."""
    return [
        str(dep)
        for dep in _dependencies(doc)
        if not (isinstance(dep, dict) and isinstance(dep.get("pip"), list))
        and not (
            isinstance(dep, str)
            and (_PYTHON_SPEC.match(dep.strip()) or _PIP_SPEC.match(dep.strip()))
        )
    ]


def _pip_packages(doc: Any, image_python: str | None = None) -> list[str]:
    """A conda file's ``pip:`` packages; anything else but python and pip is refused.

    Args:
        image_python: Layered on an image with this Python (``major.minor``) rather than
            on phalanx's.
    """
    pip: list[str] = []
    for dep in _dependencies(doc):
        if isinstance(dep, dict) and isinstance(dep.get("pip"), list):
            pip.extend(str(p) for p in dep["pip"])
        elif isinstance(dep, str) and _PYTHON_SPEC.match(dep.strip()):
            _check_python(dep.strip(), image_python)
    if (conda_only := _conda_only(doc)) and image_python is not None:
        raise PhalanxError(
            f"environment.conda_file lists conda packages ({', '.join(conda_only[:5])}); on an "
            "image phalanx layers only its pip: packages: install the others in the image "
            "(environment.build), or move them to the file's pip: section"
        )
    if conda_only:
        raise PhalanxError(
            f"environment.conda_file lists conda packages ({', '.join(conda_only[:5])}) and no "
            "conda, mamba or micromamba is installed; install one on the nodes, or move the "
            "packages to the file's pip: section (or a pip_file)"
        )
    return pip


def _check_python(spec: str, image_python: str | None = None) -> None:
    """Refuse ``python=X.Y`` (conda's pin) when the interpreter the packages are layered on
    (phalanx's, or an image's ``major.minor``) is another version."""
    if not re.match(r"^python\s*==?\s*[0-9]", spec):
        return  # no pin, or a range: pip-layering keeps phalanx's interpreter anyway
    wanted = re.sub(r"^python\s*==?\s*", "", spec).rstrip(".*")
    if image_python is not None:
        if ".".join(wanted.split(".")[:2]) != image_python:
            raise PhalanxError(
                f"environment.conda_file asks for {spec}, the image has Python {image_python}; "
                "phalanx layers pip packages on the image's Python: drop the pin or use an "
                f"image with Python {wanted}"
            )
        return
    have = ".".join(str(v) for v in sys.version_info[:3])
    if have != wanted and not have.startswith(wanted + "."):
        raise PhalanxError(
            f"environment.conda_file asks for {spec}, phalanx runs Python {have}; without "
            "conda phalanx only layers pip packages on its own Python: drop the pin or "
            "install conda on the nodes"
        )


def environment_notes(environment: Any) -> list[str]:
    """What a job's ``environment`` will not get here, one sentence each.

    Args:
        environment: The spec's ``environment``: a registered name, an inline
            :class:`~phalanx.spec.environment.EnvironmentSpec`, or ``None``.
    """
    if environment is None:
        return []
    if isinstance(environment, str):
        return [
            f"environment {environment!r} is not registered here (phalanx environment list), "
            "so it is recorded and the job runs in phalanx's Python environment; register it "
            "with `phalanx environment create -f env.yml`, or give environment: {image: …} "
            "or {pip_file: requirements.txt}"
        ]
    # an image runs (phalanx.environments.containers); what it cannot do is refused at create
    return []
