"""What the GPU check finds on its machine: a GPU and torch's CUDA, a container engine
with GPU support; the stand-in ``nvidia-smi`` of its dry run; ending what its
workspace left running."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def has_gpu() -> tuple[bool, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False, "no nvidia-smi"
    try:
        import torch
    except ImportError:
        return False, "torch is not importable"
    if not torch.cuda.is_available():
        return False, f"nvidia-smi is there but torch {torch.__version__} sees no CUDA device"
    return True, torch.cuda.get_device_name(0)


def stand_in_smi(folder: Path) -> None:
    """A ``nvidia-smi`` that lists one GPU, for the dry run's capacity stage (no GPU here)."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *query-gpu=index*) echo 0 ;;\n'
        "*query-gpu=name*) echo 'stand-in (dry run), 0, 0 MiB' ;; *) exit 1 ;; esac\n"
    )
    smi.chmod(0o755)


def stop_workspace(home: str) -> None:
    """End what this check's workspace started and left (its scheduler waits a while
    for more jobs before it ends by itself); only processes of this workspace."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PHALANX_HOME") == home and proc.pid != os.getpid():
                proc.kill()
        except (psutil.Error, OSError):
            continue


def gpu_engine(env: dict[str, str]) -> tuple[str | None, str]:
    """An engine with GPU support, or None and why not."""
    found = [e for e in ("podman", "docker") if shutil.which(e, path=env["PATH"])]
    if not found:
        return None, "no container engine (podman or docker) on this machine"
    cdi = [p for p in ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml") if Path(p).exists()]
    if "podman" in found and cdi:
        return "podman", f"podman with CDI ({cdi[0]})"
    if "docker" in found:
        info = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"],
                              capture_output=True, text=True, timeout=20)  # fmt: skip
        if "nvidia" in info.stdout:
            return "docker", "docker with the nvidia runtime"
    return None, f"{' and '.join(found)} but no GPU support (no CDI spec, no nvidia runtime)"
