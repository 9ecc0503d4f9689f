"""What a compute target has: this machine's GPUs and cores, or a Ray cluster's nodes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

from phalanx.compute.targets import LocalTarget
from phalanx.scheduler.model import Capacity, Host

# nvidia-smi takes a moment and GPUs do not come and go: ask again after this long.
_GPU_CACHE_S = 60.0
_gpu_cache: tuple[float, tuple[str, ...]] | None = None


def detect_gpus() -> tuple[str, ...]:
    """This machine's GPU indices as ``nvidia-smi`` lists them; none without it."""
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
            found = tuple(line.strip() for line in out.splitlines() if line.strip().isdigit())
        except (OSError, subprocess.SubprocessError):
            found = ()  # a driver that does not answer: no GPUs to schedule
    _gpu_cache = (now, found)
    return found


def detect_cpus() -> float:
    """The cores this process may run on."""
    try:
        return float(len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return float(os.cpu_count() or 1)


def host_name() -> str:
    return socket.gethostname() or "localhost"


def detect_memory() -> int:
    """This machine's memory, in bytes."""
    import psutil

    return int(psutil.virtual_memory().total)


def local_capacity(target: LocalTarget) -> Capacity:
    """One host, this machine: the target's GPUs, CPU slots and memory, or what it has."""
    gpus = target.gpus if target.gpus is not None else detect_gpus()
    cpus = target.cpus if target.cpus is not None else detect_cpus()
    memory = target.memory if target.memory is not None else detect_memory()
    return Capacity(target.name, (Host(host_name(), tuple(gpus), cpus, memory),), spread=False)
