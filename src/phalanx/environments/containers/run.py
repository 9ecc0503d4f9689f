"""The ``run`` command line that starts a node's launcher inside the job's image.

``podman run --rm --init --network host --ipc host … --entrypoint PYTHON IMAGE -m
torch.distributed.run … phalanx.launch.worker COMMAND``:

- ``--init``: a small init (catatonit / tini) is PID 1 and passes signals on; Python
  as PID 1 would ignore SIGTERM. The engine's CLI stays attached and proxies the
  signals it gets (phalanx's stop and preemption SIGTERM) to the container, where the
  init passes them to torchrun, which passes them to the ranks.
- ``--network host`` and ``--ipc host``: NCCL and gloo talk between the nodes (and,
  on one machine, through shared memory) as they would without an image. With
  ``resources.shm_size`` and a node alone on its machine, the node gets a private
  ``/dev/shm`` of that size instead (engines refuse a size with the host's IPC).
- Bind mounts at the same paths: the workspace (the job's folder, the node cache,
  local datastores), the code, checkpoints and outputs folders, every input and
  output path, and, read-only, for an image without torch, phalanx's site-packages,
  which a ``sitecustomize`` puts *after* the image's own packages (an image's mpi4py
  or numpy stays the image's). phalanx's package alone (the worker wrapper, the MPI
  agent: standard library only) is mounted read-only at ``/opt/phalanx/lib``.
- MPI: node 0's container runs the image's ``mpirun``; on local compute the other
  nodes are loopback "hosts" of this machine, whose daemons and ranks run in that
  same container (given every node's GPUs); on Ray each node's daemon runs in a
  container of its own node.
- The node's GPUs only: CDI devices (``nvidia.com/gpu=K``, the NVIDIA container
  toolkit's spec) with podman, ``--gpus device=…`` with docker; inside, the node's
  GPUs are numbered from 0.
- Labels ``phalanx.job``, ``phalanx.job_dir``, ``phalanx.attempt``, ``phalanx.node``,
  which the sweep that ends an attempt removes the containers by.
- The environment contract through an ``--env-file`` (mode 0600, in the attempt's
  system logs, removed by the sweep), so no value shows in ``ps``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import phalanx
from phalanx import prctl
from phalanx.environments.containers.image import ImageRef
from phalanx.environments.containers.sweep import mark
from phalanx.errors import PhalanxError
from phalanx.launch.mpi_agent import SOCKET_ENV
from phalanx.nofollow import write_new

if TYPE_CHECKING:
    from phalanx.launch.node import NodeLaunch

# Host variables that tune the frameworks and reach the ranks inside as they would outside.
# (MLFLOW_*: the node's tracking endpoint, on the host's loopback, which --network host
# shares; the submitter's own MLFLOW_* never reach a launcher.)
_PASSED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "TORCHELASTIC_", "OMP_", "MKL_", "CUDA_",
                    "PHALANX_", "MLFLOW_", "PYTHONHASHSEED", "PYTHONFAULTHANDLER")  # fmt: skip
_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_.-]")


PACKAGE_INSIDE = "/opt/phalanx/lib"
"""Where phalanx's package is mounted inside (as ``…/phalanx``): only the package, so
nothing else of phalanx's environment shadows the image's packages."""
LENT_PATH = "PHALANX_LENT_PATH"
"""phalanx's site-packages lent to an image without torch (after the image's own)."""


def package_dir() -> Path:
    """phalanx's package folder (mounted read-only inside at :data:`PACKAGE_INSIDE`)."""
    return Path(phalanx.__file__).resolve().parent


def site_packages() -> list[Path]:
    """phalanx's environment's site-packages (lent to an image without torch)."""
    paths = sysconfig.get_paths()
    # Resolved: they are mounted, and named inside (LENT_PATH), where they really are.
    return [Path(p).resolve() for p in dict.fromkeys((paths["purelib"], paths["platlib"]))]


def linked_folders(folders: list[Path], depth: int = 3) -> list[Path]:
    """The folders that entries of ``folders`` link into, and those their entries link
    into (``depth`` deep): mounted beside them, so the links resolve inside. A view of
    phalanx's Python, which walled-off jobs run where it lies out of their reach, is such
    links (:mod:`phalanx.jobs.pythonview`)."""
    found: list[Path] = []
    for _ in range(depth):
        step = {
            Path(os.path.normpath(entry.parent / os.readlink(entry))).parent
            for folder in folders
            for entry in folder.iterdir()
            if entry.is_symlink()
        }
        folders = [p for p in step if p not in found and p not in folders and p.is_dir()]
        found += folders
    return found


def container_name(launch: NodeLaunch) -> str:
    where = hashlib.sha256(str(launch.job_dir).encode()).hexdigest()[:8]
    job = _NAME_CHARS.sub("_", launch.job_name)[:60]
    return f"phalanx-{job}-{where}-a{launch.attempt}-n{launch.node_rank}"


def inside_env(launch: NodeLaunch, ref: ImageRef, env: Mapping[str, str]) -> dict[str, str]:
    """The launcher's environment inside: the contract, the job's variables and the host's
    framework settings from ``env``, with the image's ``PATH`` (a ``python`` first) and
    phalanx on ``PYTHONPATH``."""
    contract = launch.env(base={})
    inside = {k: v for k, v in env.items() if k in contract or k.startswith(_PASSED_PREFIXES)}
    inside.pop("VIRTUAL_ENV", None)
    inside["PATH"] = os.pathsep.join((str(python_shim(launch, ref)), ref.path))
    # phalanx's package first (its worker wrapper), then the image's own path (a pip layer
    # of phalanx's builds) and the job's. An image without torch borrows phalanx's
    # site-packages, which its `sitecustomize` puts after the image's own packages.
    parts = [PACKAGE_INSIDE, ref.pythonpath, launch.user_env.get("PYTHONPATH", "")]
    if not ref.torch:
        # First, so no other sitecustomize shadows it; it runs the next one itself.
        parts.insert(0, f"{PACKAGE_INSIDE}/phalanx/environments/containers/lend")
        inside[LENT_PATH] = os.pathsep.join(map(str, site_packages()))
    inside["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    devices = container_devices(launch)
    if devices:
        # The container sees only its GPUs, numbered from 0: the node's own come first.
        own = launch.devices or ()
        inside["CUDA_VISIBLE_DEVICES"] = ",".join(str(devices.index(d)) for d in own)
        if _runs_every_node(launch):
            # mpirun's daemons of the other "hosts" run in this container too: the rsh
            # agent gives each its node's GPUs by their numbers inside.
            inside["PHALANX_MPI_DEVICES"] = json.dumps({
                host: ",".join(str(devices.index(d)) for d in node)
                for host, node in zip(launch.hosts, launch.node_devices, strict=False)
            })  # fmt: skip
    return inside


def _runs_every_node(launch: NodeLaunch) -> bool:
    """MPI on local compute: node 0's container runs ``mpirun`` and, as the machine's
    loopback "hosts", every node's daemon and ranks (on Ray each node has its own)."""
    return launch.distribution == "mpi" and all(h.startswith("127.") for h in launch.hosts)


def container_devices(launch: NodeLaunch) -> tuple[str, ...]:
    """The GPUs the node's container is given: the node's own, or for MPI on one
    machine every node's (node 0's first)."""
    if _runs_every_node(launch) and launch.node_devices:
        return tuple(dict.fromkeys(d for node in launch.node_devices for d in node))
    return tuple(launch.devices or ())


def python_shim(launch: NodeLaunch, ref: ImageRef) -> Path:
    """A folder holding ``python``, the image's interpreter: ``python`` in a command
    means the image's Python, as it means phalanx's without an image."""
    home = launch.job_dir.parent.parent
    shim = home / "containers" / "bin" / hashlib.sha256(ref.python.encode()).hexdigest()[:12]
    link = shim / "python"
    if not link.is_symlink():
        shim.mkdir(parents=True, exist_ok=True)
        tmp = shim / f".python.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(ref.python)
        os.replace(tmp, link)
    return shim


def mounts(launch: NodeLaunch, ref: ImageRef, env: Mapping[str, str]) -> list[tuple[Path, bool]]:
    """``(path, read_only)`` of every bind mount, a path inside another left out.

    A walled-off job's container sees its own folder (its inputs are shown in it) and
    its datastores file, not the workspace: its processes run as the job's account.
    """
    home = launch.job_dir.parent.parent
    cache = env.get("PHALANX_CACHE_DIR")
    writable: list[Path | None] = [
        None if launch.account else home, launch.job_dir, launch.workdir,
        launch.checkpoint_dir, launch.outputs_dir, Path(cache) if cache else None,
        *(_folder(v) for v in launch.outputs.values()),
    ]  # fmt: skip
    if socket := env.get(SOCKET_ENV):  # Ray, MPI: where the rsh agent asks for daemons
        writable.append(Path(socket).parent)
    readonly: list[Path | None] = [_folder(v) for v in launch.inputs.values()]
    readonly += [] if ref.torch else [*site_packages(), *linked_folders(site_packages())]
    if launch.account is not None:
        readonly += [python_shim(launch, ref), launch.datastores_file]
    chosen: list[tuple[Path, bool]] = []
    for path, ro in [*((p, False) for p in writable), *((p, True) for p in readonly)]:
        if path is None or not path.exists() or path == Path("/"):
            continue
        path = path.resolve() if path.is_symlink() else path
        if any(path == p or path.is_relative_to(p) for p, _ in chosen):
            continue
        chosen.append((path, ro))
    return chosen


def _folder(value: str) -> Path | None:
    if not os.path.isabs(value):
        return None  # a literal input, not a path
    path = Path(value)
    return path if path.is_dir() else path.parent if path.parent.is_dir() else None


def gpu_args(launch: NodeLaunch, ref: ImageRef) -> list[str]:
    """The flags that give the container the node's GPUs (and no others)."""
    devices = container_devices(launch)
    if not devices:
        return []
    if ref.engine == "docker":
        return ["--gpus", f'"device={",".join(devices)}"']
    if not any(d.is_dir() and any(d.glob("*nvidia*")) for d in _CDI_DIRS):
        raise PhalanxError(
            "environment.image on GPUs needs the NVIDIA container toolkit's CDI spec, and "
            "/etc/cdi has none: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
        )
    return [arg for d in devices for arg in ("--device", f"nvidia.com/gpu={d}")]


def run_argv(
    launch: NodeLaunch,
    ref: ImageRef,
    env: Mapping[str, str],
    env_file: Path,
    command: list[str] | None = None,
) -> list[str]:
    """The engine's command line for node ``launch.node_rank``; writes ``env_file``.

    Args:
        command: What the container runs instead of the node's launcher (on Ray, an
            MPI node's daemon, which ``mpirun`` on node 0 asks for).

    Values with a newline (an env file cannot hold them) are passed as ``-e NAME``,
    which the engine reads from its own environment: the caller starts it in ``env``.
    """
    inside = inside_env(launch, ref, env)
    multiline = sorted(k for k, v in inside.items() if "\n" in v)
    env_file.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{k}={v}\n" for k, v in inside.items() if k not in multiline)
    write_new(env_file, lines.encode())
    argv = [ref.engine_path, "run", "--rm", "--init", "--network", "host"]
    if ref.engine == "podman":
        argv += ["--replace", "--log-driver", "none", "--pull", "never"]
    if launch.shm_size:
        argv += ["--ipc", "private", "--shm-size", launch.shm_size]
    else:
        argv += ["--ipc", "host"]
    argv += ["--name", container_name(launch)]
    labels = {
        "phalanx.job": launch.job_name,
        "phalanx.job_dir": str(launch.job_dir),
        "phalanx.attempt": str(launch.attempt),
        "phalanx.node": str(launch.node_rank),
    }
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    if launch.account is not None:
        # A walled-off job: its own account inside too, and no way back to root (setuid
        # programs of the image, file capabilities).
        argv += ["--user", f"{launch.account.uid}:{launch.account.gid}", "--cap-drop", "all",
                 "--security-opt", "no-new-privileges"]  # fmt: skip
    elif os.getuid() != 0:  # files the ranks write belong to the user, as without an image
        argv += ["--userns", "keep-id"] if ref.engine == "podman" else [
            "--user", f"{os.getuid()}:{os.getgid()}"
        ]  # fmt: skip
    for path, ro in mounts(launch, ref, env):
        if ":" in str(path) or "," in str(path):
            raise PhalanxError(f"{path}: a path with ':' or ',' cannot be bind-mounted")
        argv += ["-v", f"{path}:{path}{':ro' if ro else ''}"]
    argv += ["-v", f"{package_dir()}:{PACKAGE_INSIDE}/phalanx:ro"]
    argv += gpu_args(launch, ref)
    argv += ["--env-file", str(env_file), *(a for k in multiline for a in ("-e", k))]
    argv += ["--workdir", str(launch.workdir)]
    inner = command or launch.argv(inside, python=ref.python)
    return [*argv, "--entrypoint", inner[0], ref.image_id, *inner[1:]]


def env_file(launch: NodeLaunch) -> Path:
    """Where the container's environment file is: in ``system_logs/``, the server's own
    folder of the job (a walled-off job could swap a file of its attempt's folder, which
    is its own, for a link the engine would read as root)."""
    return launch.job_dir / "system_logs" / f".container_a{launch.attempt}_n{launch.node_rank}.env"


def start_launcher(
    launch: NodeLaunch, env: Mapping[str, str], log_path: Path, *, end_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    """Start node ``launch.node_rank``'s launcher: in a container of its image when it names
    one, else here (:meth:`NodeLaunch.start`)."""
    if launch.image is None:
        return launch.start(env, log_path, end_with_parent=end_with_parent)
    return start(launch, env, log_path, end_with_parent=end_with_parent)


def start(
    launch: NodeLaunch,
    env: Mapping[str, str],
    log_path: Path,
    *,
    end_with_parent: bool = False,
    command: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start node ``launch.node_rank``'s launcher (or ``command``) in a container of
    ``launch.image``.

    The engine's CLI runs here in ``env`` (it carries the job's markers, so the
    process sweep finds it); what it and the container print goes to ``log_path``.
    """
    ref = launch.image
    assert isinstance(ref, ImageRef)  # the caller starts a container only for an image
    from phalanx.environments.containers.build import mark_used

    engine = ref.engine_cli()
    mark(launch.job_dir, engine)  # before the container exists: a sweep must know to look
    mark_used(launch.job_dir.parent.parent / "containers" / "builds", ref.image)
    argv = run_argv(launch, ref, env, env_file(launch), command)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=engine.env(env),
            cwd=launch.workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=prctl.end_with_parent if end_with_parent else None,
        )
