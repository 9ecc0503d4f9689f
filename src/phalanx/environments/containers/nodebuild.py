"""An image that each Ray node builds for itself, from files the supervisor sends.

On local compute the supervisor builds a job's image (``environment.build``, or an
``image`` with a ``pip_file``/``conda_file`` layer) where its nodes run. A Ray
cluster's nodes are other machines with engines and image stores of their own, and
no registry is assumed between them, so each node builds the image itself, once per
content as on local compute (a second job of the same content finds it):

- the supervisor packs what the build needs (:func:`for_nodes`): the build
  context, or the pip file with the files it names (``-r``/``-c`` files, local
  packages), or the conda file's content. It travels with the job's set-up, as
  the code does;
- each node's agent unpacks it under ``$PHALANX_NODE_HOME/containers/contexts``
  (one folder per content) and builds through :mod:`phalanx.environments.containers.build`
  (:func:`ready_on_node`), with the build's output in that node's
  ``system_logs/image_build_node<K>.txt``, shipped back with its other logs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from phalanx.errors import PhalanxError

if TYPE_CHECKING:
    from phalanx.environments.containers.build import ContextBuild
    from phalanx.environments.containers.image import ImageRef
    from phalanx.spec.environment import EnvironmentSpec


@dataclass(frozen=True)
class NodeBuild:
    """What a node needs to build a job's image."""

    files: Any
    """A tar archive (bytes, or a Ray object reference to them): the build context, or
    the pip file and what it names."""
    dockerfile: str = ""
    """A build context: the Dockerfile's path inside it."""
    base: str = ""
    """A layer: the image it goes on."""
    pip_file: str = ""
    """A layer from a pip file: the file's name inside :attr:`files`."""
    conda: dict[str, Any] | None = None
    """A layer from a conda file: its content (its ``pip:`` packages are installed)."""

    @property
    def digest(self) -> str:
        content = hashlib.sha256(self.files)
        content.update(f"\0{self.dockerfile}\0{self.base}\0{self.pip_file}\0".encode())
        content.update(yaml.safe_dump(self.conda).encode())
        return content.hexdigest()[:20]


def for_nodes(env: EnvironmentSpec, *, check_only: bool = False) -> NodeBuild | None:
    """What Ray nodes need to build ``env``'s image; ``None`` when it asks for no build.

    Args:
        check_only: Check that what the build needs is there (at ``job create``),
            without packing a build context.

    Raises:
        PhalanxError: the build context, Dockerfile, pip or conda file is missing or
            names files outside its folder. One line each.
    """
    from phalanx.archives import pack_folder
    from phalanx.environments.containers.build import context_build
    from phalanx.environments.pythonenv import copy_requirements

    if env.build is not None:
        context = context_build(env.build)
        dockerfile = context.dockerfile.relative_to(context.path).as_posix()
        sent = _sent(context)  # the ignore files read: a bad pattern is refused here
        if check_only:
            return None
        return NodeBuild(files=pack_folder(context.path, sent), dockerfile=dockerfile)
    if env.image is None or not env.builds:
        return None
    if env.pip_file is not None:
        with tempfile.TemporaryDirectory(prefix="phalanx-pip-") as tmp:
            copied = copy_requirements(Path(env.pip_file), Path(tmp))
            return NodeBuild(files=pack_folder(Path(tmp)), base=env.image, pip_file=copied.name)
    conda = env.conda_file
    if not isinstance(conda, dict):
        from phalanx.spec.yamldoc import load_yaml, read_text

        try:
            text = read_text(str(conda), str(conda))
        except OSError as exc:
            raise PhalanxError(f"environment.conda_file {env.conda_file}: {exc}") from exc
        conda = load_yaml(text, str(conda)) or {}
        if not isinstance(conda, dict):
            raise PhalanxError(f"environment.conda_file {env.conda_file}: not a conda file")
    for entry in _pip_entries(conda):
        if entry.startswith((".", "/", "file:")):
            raise PhalanxError(
                f"environment.conda_file: {entry} is a path on this machine, which Ray nodes "
                "do not see; give the packages in a pip_file (its local files are sent to "
                "the nodes) or from an index"
            )
    return NodeBuild(files=b"", base=env.image, conda=conda)


class NodeBuildError(PhalanxError):
    """A node's image build failed. It carries the build's log, which would otherwise
    stay on the node (with ``files: local``, in a folder removed with the attempt)."""

    def __init__(self, message: str, log_name: str, log_text: str) -> None:
        super().__init__(message, log_name, log_text)  # all in args: it crosses Ray
        self.message, self.log_name, self.log_text = message, log_name, log_text

    def __str__(self) -> str:
        return self.message

    def kept_in(self, folder: Path) -> str:
        """Write the log into the workspace's ``folder``; the one-line error naming it."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.log_name
        path.write_text(self.log_text)
        return f"{self.message.split('; see ')[0]} on a Ray node; see {path}"


def _pip_entries(conda: dict[str, Any]) -> list[str]:
    """The ``pip:`` entries of a conda file's dependencies."""
    found: list[str] = []
    for dep in conda.get("dependencies") or []:
        if isinstance(dep, dict):
            found += [str(entry).strip() for entry in dep.get("pip") or []]
    return found


def _sent(context: ContextBuild) -> set[Path]:
    """The context's files a node's engine may read: those podman or docker keeps (the
    node's engine is not known here; it applies its own ignore file again), the
    Dockerfile and the ignore files themselves."""
    from phalanx.environments.containers.build import SKIPPED
    from phalanx.environments.containers.ignore import ContextIgnore, ignore_file

    sent = {context.dockerfile}
    for engine in ("podman", "docker"):
        found = ignore_file(context.path, context.dockerfile, engine)
        sent.update(ContextIgnore.read(found).files(context.path, SKIPPED))
        if found is not None:
            sent.add(found)
    return sent


def ready_on_node(
    build: NodeBuild, home: Path, log_path: Path, canceled: Callable[[], bool] = lambda: False
) -> ImageRef:
    """The job's image built on this node (or found, built by an earlier job), probed.

    Args:
        home: This node's phalanx folder (``$PHALANX_NODE_HOME``).
        log_path: Where the build's output is appended.

    Raises:
        PhalanxError: the base image cannot be had, or the build failed (naming the log).
    """
    from phalanx.environments.containers.build import LayerBuild, context_build, ensure_built
    from phalanx.environments.containers.image import ready_image
    from phalanx.environments.pythonenv import conda_pip_packages

    images = home / "containers"
    folder = _unpacked(build, images / "contexts")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if build.dockerfile:
        request = context_build({"path": str(folder), "dockerfile_path": build.dockerfile})
        tag = ensure_built(request, images / "builds", log_path, canceled)
        return ready_image(tag, images / "images", field="environment.build")
    base = ready_image(build.base, images / "images")
    if build.pip_file:
        text, packages_folder = (folder / build.pip_file).read_text(), folder
    else:
        assert build.conda is not None
        packages, _ = conda_pip_packages(build.conda, base.version)
        text, packages_folder = "\n".join(packages) + "\n", None
    layer = LayerBuild(base, text, packages_folder)
    tag = ensure_built(layer, images / "builds", log_path, canceled)
    return ready_image(tag, images / "images", field="environment.image")


def _unpacked(build: NodeBuild, contexts: Path) -> Path:
    """The build's files in a folder of their own, named by their content; unpacked once
    (two jobs' agents on one machine may race: the first rename wins)."""
    from phalanx.archives import unpack_folder

    folder = contexts / build.digest
    if folder.is_dir():
        return folder
    contexts.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{build.digest}.", dir=contexts))
    try:
        unpack_folder(build.files, tmp)
        os.rename(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
