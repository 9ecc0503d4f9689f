"""What machine a figure was measured on: CPU model, cores, versions."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, or the platform's guess elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """Architecture, CPU, cores and the versions that move the figures."""
    import PIL
    import torch

    return {
        "arch": platform.machine(),
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pillow": PIL.__version__,
    }
