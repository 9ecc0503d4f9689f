"""Jobs written straight through the workspace's API, for tests that only need rows
to list (thousands of them: none runs, each ends at once in a terminal state)."""

from __future__ import annotations

from pathlib import Path

from phalanx.workspace import JobStatus, Workspace

USERS = ("ann", "bob", "cyd")
ENDS = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELED)


def write_jobs(home: Path, count: int, first: int = 0) -> list[str]:
    """``count`` ended jobs ``job-00000``…, oldest first (each Queued, then ended at once:
    nothing runs them); each with a display name, one of five experiments, one of three
    users and tags ``team`` and ``seed``."""
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
            ws.set_status(name, ENDS[i % 3])
            names.append(name)
    finally:
        ws.close()
    return names
