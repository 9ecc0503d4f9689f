"""Node system metrics sampled while a job runs: CPU, memory and, where present, GPUs.

Where the nodes are this machine's (local compute) the supervisor samples it
into the job's ``system_metrics.jsonl``; on Ray each node's agent samples its
own machine into ``system_metrics_attempt<A>_node<K>.jsonl``
(:func:`~phalanx.workspace.metrics.node_metrics_file`), which travels back with
the node's other files. One line per value, in the same shape as
the script's ``metrics.jsonl`` (``name``, ``value``, ``step`` = sample number,
``time``) plus ``node`` (the host name), so ``phalanx job metrics`` reads both:

- ``system/cpu_percent``, ``system/memory_percent``, ``system/memory_used_gb``: the machine;
- ``system/job_cpu_percent`` (100 = one core busy), ``system/job_rss_gb``: every process
  of the job (its launchers, ranks, loader workers, mounts);
- ``system/gpu<i>/utilization_percent``, ``system/gpu<i>/memory_used_gb``: each GPU
  ``nvidia-smi`` reports, when it is installed.

By default a sample is taken every 2 s during a job's first minute, then every
15 s: a job of 36 s gets 18 points to draw, a day's job ~5,800 (one sample costs
~2 ms of CPU without GPUs; ``nvidia-smi`` adds its own tens of ms).
``PHALANX_SYSTEM_METRICS_INTERVAL`` fixes the seconds between samples instead
(``0`` turns sampling off).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil

from phalanx.workspace.metrics import SYSTEM_METRICS_FILE

log = logging.getLogger(__name__)

INTERVAL_ENV = "PHALANX_SYSTEM_METRICS_INTERVAL"
DEFAULT_INTERVAL_S = 15.0
# The first minute sampled faster, so a short job draws a curve, not two points.
FAST_INTERVAL_S = 2.0
FAST_PERIOD_S = 60.0
_GIB = 1024**3
_NVIDIA_QUERY = [
    "--query-gpu=index,utilization.gpu,memory.used",
    "--format=csv,noheader,nounits",
]


def sample_interval() -> float:
    """Seconds between samples from the environment (``0``: off)."""
    raw = os.environ.get(INTERVAL_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        log.warning("%s=%r is not a number; sampling every %s s", INTERVAL_ENV, raw,
                    DEFAULT_INTERVAL_S)  # fmt: skip
        return DEFAULT_INTERVAL_S


def gpu_sample(timeout: float = 5.0) -> dict[str, float] | None:
    """Utilisation and memory of each GPU ``nvidia-smi`` sees; ``None`` without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, *_NVIDIA_QUERY], capture_output=True, text=True, timeout=timeout, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values: dict[str, float] = {}
    for line in out.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            continue
        try:
            index, util, mem_mib = int(fields[0]), float(fields[1]), float(fields[2])
        except ValueError:  # "[N/A]" on some boards
            continue
        values[f"system/gpu{index}/utilization_percent"] = util
        values[f"system/gpu{index}/memory_used_gb"] = round(mem_mib / 1024, 3)
    return values or None


class SystemSampler:
    """Samples this machine and the calling process's descendants on a thread.

    Args:
        job_dir: The job's folder (on a Ray node: its folder there).
        interval: Seconds between samples; ``0`` does nothing; ``None``: the
            environment's fixed interval if it sets one, else fast then slow (above).
        file: The file of ``job_dir`` the lines are appended to.
    """

    def __init__(
        self, job_dir: Path, interval: float | None = None, file: str = SYSTEM_METRICS_FILE
    ) -> None:
        self._file = job_dir / file
        self._interval = sample_interval() if interval is None else interval
        # Only the default schedule speeds up at the start; a chosen interval is kept.
        self._ramp = interval is None and not os.environ.get(INTERVAL_ENV)
        self._started = time.monotonic()
        self._stopped = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._gpus = shutil.which("nvidia-smi") is not None
        self._node = socket.gethostname()
        self._step = 0
        self._thread: threading.Thread | None = None

    def start(self) -> SystemSampler:
        self._started = time.monotonic()
        if self._interval > 0:
            psutil.cpu_percent(None)  # the first reading primes the counter
            self._thread = threading.Thread(target=self._loop, name="sysmetrics", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def next_wait(self, now: float | None = None) -> float:
        """Seconds until the next sample at ``now`` (``time.monotonic()``'s; by default
        this moment): short during the first minute (the default schedule), the
        interval after."""
        now = time.monotonic() if now is None else now
        if self._ramp and now - self._started < FAST_PERIOD_S:
            return min(FAST_INTERVAL_S, self._interval)
        return self._interval

    def _loop(self) -> None:
        while not self._stopped.wait(self.next_wait()):
            try:
                self._write(self.sample())
            except Exception:
                # Sampling must never end a job; one warning, then keep trying.
                log.warning("sampling system metrics failed", exc_info=True)

    def sample(self) -> dict[str, float]:
        """One reading of every metric."""
        mem = psutil.virtual_memory()
        values = {
            "system/cpu_percent": psutil.cpu_percent(None),
            "system/memory_percent": mem.percent,
            "system/memory_used_gb": round((mem.total - mem.available) / _GIB, 3),
        }
        cpu, rss = self._job_usage()
        values["system/job_cpu_percent"] = round(cpu, 1)
        values["system/job_rss_gb"] = round(rss / _GIB, 3)
        if self._gpus:
            gpus = gpu_sample()
            if gpus is None:
                log.warning("nvidia-smi gave no GPU reading; GPU metrics are off for this job")
                self._gpus = False
            else:
                values.update(gpus)
        return values

    def _job_usage(self) -> tuple[float, int]:
        """CPU percent and resident bytes summed over the descendants of this process."""
        alive: dict[int, psutil.Process] = {}
        cpu = 0.0
        rss = 0
        for child in psutil.Process().children(recursive=True):
            proc = self._procs.get(child.pid, child)
            try:
                # A process's first reading is 0: its counter starts now.
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            alive[child.pid] = proc
        self._procs = alive
        return cpu, rss

    def _write(self, values: dict[str, float]) -> None:
        now = time.time()
        lines = "".join(
            json.dumps({"name": k, "value": v, "step": self._step, "time": now, "node": self._node})
            + "\n"
            for k, v in values.items()
        )
        with open(self._file, "a") as f:
            f.write(lines)
        self._step += 1
