"""What a compute target has: this machine's GPUs and cores, or a Ray cluster's nodes.

A local target is one host, this machine. Every node of a job on it is a launcher
process here, so the host also counts launchers: one per CPU slot the target
declares (``--cpus``, else this machine's cores), at least one, every job's nodes
together (:func:`phalanx.scheduler.model.launchers_for`). The default target on a
2-core machine thus runs 2 nodes at once (the demo's 2 nodes x 1 process), and a
job of more nodes than that is refused when it is created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from phalanx.compute.targets import LocalTarget, list_targets
from phalanx.errors import PhalanxError
from phalanx.scheduler import ledger
from phalanx.scheduler.model import Capacity, Host, launchers_for
from phalanx.workspace import Workspace

# nvidia-smi takes a moment and GPUs do not come and go: ask again after this long.
_GPU_CACHE_S = 60.0
_gpu_cache: tuple[float, tuple[str, ...]] | None = None


def detect_gpus() -> tuple[str, ...]:
    """This machine's GPU indices as ``nvidia-smi`` lists them; none without it.

    Raises:
        PhalanxError: ``nvidia-smi`` is there but fails (a driver problem): guessing
            "no GPUs" would run GPU jobs on the CPU without a word.
    """
    global _gpu_cache
    now = time.monotonic()
    if _gpu_cache is not None and now - _gpu_cache[0] < _GPU_CACHE_S:
        return _gpu_cache[1]
    found: tuple[str, ...] = ()
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run(
                [exe, "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", None) or str(exc)
            raise PhalanxError(
                f"nvidia-smi failed ({str(detail).strip().splitlines()[-1] if detail else exc}); "
                "fix the GPU driver, or tell phalanx the GPUs: phalanx compute create --type "
                "local --name local --gpus 0-7 (or --gpus none)"
            ) from None
        found = tuple(line.strip() for line in out.splitlines() if line.strip().isdigit())
    _gpu_cache = (now, found)
    return found


def detect_cpus() -> float:
    """The cores this process may run on."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return float(os.cpu_count() or 1)


def detect_memory() -> int:
    """This machine's memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total)


LOCAL_HOST = "localhost"
"""The host of every local target's allocations: one machine, whatever its name."""


def local_capacity(target: LocalTarget, ws: Workspace | None = None) -> Capacity:
    """One host, this machine: the target's GPUs, CPU slots and memory, or what it has.

    The built-in ``local`` without ``--gpus`` has every GPU found except those other
    local targets were given. With ``ws``, GPUs still held by jobs of other targets
    (one deleted or changed while they ran) are left out too, so no device is ever
    handed out twice.
    """
    if target.gpus is not None:
        gpus = tuple(target.gpus)
    else:
        gpus = detect_gpus()
        if ws is not None:
            taken = {
                gpu
                for other in list_targets(ws)
                if isinstance(other, LocalTarget) and other.name != target.name and other.gpus
                for gpu in other.gpus
            }
            gpus = tuple(g for g in gpus if g not in taken)
    if ws is not None:
        held = ledger.held_elsewhere(ws, LOCAL_HOST, target.name)
        gpus = tuple(g for g in gpus if g not in held)
    cpus = target.cpus if target.cpus is not None else detect_cpus()
    memory = target.memory if target.memory is not None else detect_memory()
    host = Host(LOCAL_HOST, gpus, cpus, memory, launchers=launchers_for(cpus))
    return Capacity(target.name, (host,), spread=False)
