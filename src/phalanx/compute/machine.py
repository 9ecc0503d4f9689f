"""What this machine has: its GPUs, cores and memory (local compute's nodes run here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from phalanx.errors import PhalanxError

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
