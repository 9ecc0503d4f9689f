"""``make gpu-check`` on a machine without a GPU: the script checks itself and exits 0.

No GPU is here, so these run the script's dry run (``benchmarks/gpu_check.py``
says what it is): every stage's code path with tiny sizes on the CPU, through
real ``phalanx run`` jobs, ``torchrun``, the shard converter and the
Checkpointer, with a stand-in ``nvidia-smi`` (a script listing one GPU) for the
capacity stage. The figures themselves mean nothing here; what is checked is
that each stage produced its figure, that the results file and table are
written where ``$OUT`` says, and that a stage which fails is recorded while the
next one still runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"
STAGES = (
    "machine", "nccl", "capacity", "batch", "synthetic", "shards", "decode", "checkpoint",
    "container",
)  # fmt: skip


def run_check(tmp_path: Path, *args: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(OUT=str(tmp_path / "out"), TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    # No GPU for torch even on a machine that has one: this is the path without.
    env["CUDA_VISIBLE_DEVICES"] = ""
    for name in ("PHALANX_HOME", "PHALANX_SERVER", "PHALANX_DB", "PHALANX_TOKEN"):
        env.pop(name, None)
    # The interpreter's folder first, as `make gpu-check` has it: phalanx and torchrun.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cache", str(tmp_path / "cache"), *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def processes_of(tmp_path: Path) -> list[psutil.Process]:
    """Live processes of a workspace the check made under ``tmp_path``."""
    found = []
    for proc in psutil.process_iter():
        try:
            home = proc.environ().get("PHALANX_HOME", "")
            if home.startswith(str(tmp_path)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_without_a_gpu_every_stage_runs_tiny_and_it_exits_0(tmp_path: Path) -> None:
    # Shares of 520 s: several times what each stage takes on a 2-core machine that runs
    # the other suites beside it, so only a hang runs out (and the subprocess's 560 s stop
    # it within this test's 600).
    done = run_check(tmp_path, "--budget-s", "520", timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("gpu-check: no GPU here") and "--dry-run" in first
    results = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert list(results) == list(STAGES)
    for stage in STAGES:
        assert "error" not in results[stage], (stage, results[stage])
    # Without NCCL the line still comes, through the same functions, and says so.
    assert results["nccl"]["line"].startswith("phalanx: NCCL (gloo: none) · transport")
    capacity = results["capacity"]
    assert capacity["gpus_in_queue"] == ["0"] and capacity["one_after_the_other"]
    assert capacity["job1"][3] == capacity["job2"][3] == ["0"]  # each was given the GPU
    assert capacity["job1"][2] <= capacity["job2"][1]  # the second started after the first
    for stage, key in (("synthetic", "ratio"), ("shards", "ratio")):
        assert results[stage][key] > 0
    assert results["synthetic"]["img_per_sec_torchrun"] > 0
    assert results["shards"]["img_per_sec_shards"] > 0
    assert results["shards"]["img_per_sec_shards_gpu_decode"] is None  # needs CUDA
    assert results["decode"]["cpu_path_images_per_core_s"] > 0
    assert results["checkpoint"]["sync_stall_s"] > 0 and results["checkpoint"]["state_mb"] > 1
    assert results["container"]["ran"] is False and results["container"]["note"]
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "dry run on CPU" in table
    for stage in STAGES:
        assert f"| {stage} |" in table and f"| {stage} |" in done.stdout
    assert processes_of(tmp_path) == []


def test_a_failing_stage_is_recorded_and_the_next_still_runs(tmp_path: Path) -> None:
    """One second for everything: capacity's jobs cannot finish, machine still reports."""
    done = run_check(tmp_path, "--dry-run", "--budget-s", "1", "--stages", "capacity,machine")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    results = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert "ran past" in results["capacity"]["error"]
    assert "error" not in results["machine"] and results["machine"]["torch"]
    assert "**failed**" in (tmp_path / "out" / "gpu_check.md").read_text()
    assert processes_of(tmp_path) == []  # the job it gave up on was canceled


def test_an_unknown_stage_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_check(tmp_path, "--stages", "machine,warp")
    assert done.returncode == 2
    assert "--stages: unknown warp" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
