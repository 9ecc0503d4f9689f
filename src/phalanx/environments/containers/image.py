"""An image made ready on this machine (there, or pulled) and probed for its Python.

phalanx runs its launcher (torchrun) and worker wrapper on the image's Python. The
probe asks the image once which Python it has (``python3``, else ``python``), its
version, its ``PATH`` and whether it has torch; the answer is kept per image ID
under ``$PHALANX_HOME/containers/images``, so a later job of the same image starts
without asking again.

An image without torch borrows phalanx's: phalanx's site-packages are mounted
read-only and put on ``PYTHONPATH`` inside. Compiled packages only load on the
Python they were built for, so that is allowed only when the image's Python has
phalanx's major.minor version.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from phalanx.environments.containers.engine import Engine, find_engine, last_line
from phalanx.environments.progress import QUIET, Progress, Step
from phalanx.errors import PhalanxError

PULL_TIMEOUT_S = 900.0
_PROBE = (
    "import importlib.util, json, os, shutil, subprocess, sys; "
    "m = shutil.which('mpirun') or ''; "
    "v = subprocess.run([m, '--version'], capture_output=True, text=True).stdout if m else ''; "
    "print(json.dumps({'python': sys.executable, "
    "'version': '%d.%d' % sys.version_info[:2], 'path': os.environ.get('PATH', ''), "
    "'pythonpath': os.environ.get('PYTHONPATH', ''), "
    "'torch': importlib.util.find_spec('torch') is not None, "
    "'pip': importlib.util.find_spec('pip') is not None, "
    "'tensorflow': importlib.util.find_spec('tensorflow') is not None, "
    "'mpirun': m, 'open_mpi': 'Open MPI' in v}))"
)
_PROBED = ("python", "version", "path", "torch", "mpirun", "tensorflow")
"""Keys every kept probe answer has; one kept by an older phalanx is asked again."""
_PYTHONS = ("python3", "python")
HOST_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class ImageRef:
    """An image ready to run a job's nodes."""

    engine: str
    """The engine's name (``podman`` or ``docker``)."""
    engine_path: str
    image: str
    """The image as the job names it."""
    image_id: str
    """The image the job runs: its ID, so a re-tagged name changes nothing mid-job."""
    python: str
    """The image's interpreter (an absolute path inside it)."""
    version: str
    """Its ``major.minor``."""
    path: str
    """The image's ``PATH``."""
    torch: bool
    """Whether the image has torch of its own; phalanx's is lent when it has not."""
    pythonpath: str = ""
    """The image's own ``PYTHONPATH`` (kept inside, after phalanx's package)."""
    pip: bool = True
    """Whether the image has pip (a pip/conda layer borrows phalanx's when it has not)."""
    mpirun: str = ""
    """The image's ``mpirun`` (an absolute path inside it); empty when it has none."""
    open_mpi: bool = False
    """Whether that ``mpirun`` is Open MPI's (phalanx builds Open MPI's command line)."""
    tensorflow: bool = False
    """Whether the image has TensorFlow of its own."""

    def check_mpi(self, field: str = "environment.image") -> None:
        """Refuse an MPI job in an image without Open MPI's ``mpirun``.

        Raises:
            PhalanxError: one line naming the image and what to install in it.
        """
        if self.mpirun and self.open_mpi:
            return
        what = "without mpirun"
        if self.mpirun:
            what = f"whose mpirun ({self.mpirun}) is not Open MPI's"
        raise PhalanxError(
            f"{field} {self.image!r} is an image {what}: distribution type mpi runs the "
            "image's Open MPI; install it in the image (openmpi-bin, with mpi4py or "
            "Horovod built on it), or use type: pytorch"
        )

    def check_tensorflow(self, field: str = "environment.image") -> None:
        """Refuse a TensorFlow job in an image without TensorFlow that is lent none
        (phalanx lends its packages only to an image without torch).

        Raises:
            PhalanxError: one line naming the image and what to install.
        """
        if self.tensorflow:
            return
        if not self.torch:
            if importlib.util.find_spec("tensorflow") is not None:
                return  # phalanx's is lent, with torch
            raise PhalanxError(
                f"{field} {self.image!r} has no TensorFlow, and phalanx has none to lend it: "
                "install tensorflow in the image, or pip install 'phalanx[tensorflow]'"
            )
        raise PhalanxError(
            f"{field} {self.image!r} has torch of its own but no TensorFlow (phalanx lends "
            "its packages only to an image without torch): install tensorflow in the "
            "image, or add it with a pip_file on the image"
        )

    def engine_cli(self) -> Engine:
        return Engine(self.engine, self.engine_path)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ImageRef:
        return cls(**data)  # type: ignore[arg-type]


def image_id(engine: Engine, image: str) -> str | None:
    """The ID of ``image`` on this machine; ``None`` if it is not here."""
    proc = engine.run(["image", "inspect", "--format", "{{.Id}}", image], timeout=60)
    ident = proc.stdout.strip().splitlines()
    return ident[0].removeprefix("sha256:") if proc.returncode == 0 and ident else None


def ready_image(
    image: str,
    cache_dir: Path | None,
    *,
    field: str = "environment.image",
    progress: Progress = QUIET,
) -> ImageRef:
    """``image`` on this machine (pulled if it is not), probed, checked.

    Args:
        cache_dir: Where probe answers are kept per image ID (none kept when ``None``).
        field: The spec's field, for messages.
        progress: Told of a pull.

    Raises:
        PhalanxError: no engine, the image is not here and cannot be pulled, it has no
            Python, or it has neither torch nor phalanx's Python version. One line each.
    """
    engine = find_engine()
    ident = image_id(engine, image)
    if ident is None:
        with progress.step(Step(f"pulling image {image} (not on this machine yet)")):
            pulled = engine.run(["pull", "--quiet", image], timeout=PULL_TIMEOUT_S)
        ident = image_id(engine, image) if pulled.returncode == 0 else None
        if ident is None:
            why = last_line(pulled.stderr or pulled.stdout)
            raise PhalanxError(
                f"{field} {image!r} is not on this machine and cannot be pulled ({why}); "
                f"pull or build it with {engine.name}, or fix the name"
            )
    cached = cache_dir / f"{ident}.json" if cache_dir is not None else None
    probe: dict[str, object] | None = None
    if cached is not None and cached.is_file():
        try:
            probe = json.loads(cached.read_text())
        except (OSError, ValueError):
            probe = None
        if not isinstance(probe, dict) or not all(key in probe for key in _PROBED):
            probe = None
    if probe is None:
        probe = _probe(engine, image, ident, field)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
            tmp.write_text(json.dumps(probe) + "\n")
            os.replace(tmp, cached)
    ref = ImageRef(
        engine=engine.name,
        engine_path=engine.path,
        image=image,
        image_id=ident,
        python=str(probe["python"]),
        version=str(probe["version"]),
        path=str(probe["path"]),
        torch=bool(probe["torch"]),
        pythonpath=str(probe.get("pythonpath") or ""),
        pip=bool(probe.get("pip", True)),
        mpirun=str(probe.get("mpirun") or ""),
        open_mpi=bool(probe.get("open_mpi")),
        tensorflow=bool(probe.get("tensorflow")),
    )
    if not ref.torch and ref.version != HOST_VERSION:
        raise PhalanxError(
            f"{field} {image!r} has Python {ref.version} and no torch; phalanx lends the "
            f"image its own torch only on the same Python ({HOST_VERSION}): install torch in "
            f"the image, or use an image with Python {HOST_VERSION}"
        )
    return ref


def _probe(engine: Engine, image: str, ident: str, field: str) -> dict[str, object]:
    """Ask the image for its Python (no network, no mounts)."""
    errors: list[str] = []
    for python in _PYTHONS:
        proc = engine.run(
            ["run", "--rm", "--network", "none", "--entrypoint", python, ident, "-c", _PROBE],
            timeout=120,
        )
        if proc.returncode == 0:
            try:
                answer = json.loads(proc.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                errors.append(f"{python}: {last_line(proc.stdout)}")
                continue
            if isinstance(answer, dict):
                return answer
        errors.append(f"{python}: {last_line(proc.stderr or proc.stdout)}")
    raise PhalanxError(
        f"{field} {image!r} has no Python that phalanx's launcher can run on (python3 or "
        f"python on its PATH; {errors[-1]}): use an image with Python {HOST_VERSION}"
    )
