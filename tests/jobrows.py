"""Jobs written straight through the workspace's API, for tests that only need rows
to list (thousands of them: none runs, each ends at once in a terminal state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phalanx.workspace import AttemptStatus, JobStatus, Workspace

USERS = ("ann", "bob", "cyd")
ENDS = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED)


def write_jobs(home: Path, count: int, first: int = 0) -> list[str]:
    """``count`` ended jobs ``job-00000``…, oldest first (each Queued, then ended at once:
    nothing runs them); each with a display name, one of five experiments, one of three
    users and tags ``team`` and ``seed``; every hundredth (``job-00099``…) ran twice,
    on 1 GPU, then on 3 (two nodes)."""
    ws = Workspace(home)
    names = []
    try:
        for i in range(first, first + count):
            spec = {
                "command": "python train.py",
                "experiment_name": f"exp-{i % 5}",
                "display_name": f"Trial {i} of lr sweep",
                "tags": {"team": ("vision", "speech")[i % 2], "seed": i % 4},
            }
            name = f"job-{i:05d}"
            ws.create_job(spec, spec_text="", name=name, created_by=USERS[i % 3])
            if i % 100 == 99:  # two attempts: the list shows the latest's 3 GPUs, not 1
                first = ws.start_attempt(name, master_port=None, nodes=[_node("0")])
                ws.end_attempt(name, first.number, AttemptStatus.FAILED)
                ws.start_attempt(name, master_port=None, nodes=[_node("0", "1"), _node("2")])
            ws.set_status(name, ENDS[i % 3])
            names.append(name)
    finally:
        ws.close()
    return names


def _node(*gpus: str) -> dict[str, Any]:
    return {"host": "gpu-box", "gpus": list(gpus), "cpus": 4}
