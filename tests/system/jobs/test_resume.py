"""The reference workload survives a killed rank and a preemption, and ends where it would have.

Runs examples/imagenet/train.py through phalanx three times with the same seed,
reading a small sharded dataset with a DataLoader worker per rank:
uninterrupted; with rank 1 SIGKILLed mid-run (attempt 2 resumes from the last
checkpoint); and preempted (every rank saves at the same step, attempt 2 loses
none). The final weights of all three are identical, bit for bit (CPU, gloo):
the resumed runs saw every batch of the uninterrupted one, in the same order,
none repeated or skipped (the loader's position is in the checkpoint).
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import torch

from conftest import REPO, Cli, job_processes_under

JOB = """
command: >-
  python train.py --arch resnet18 --image-size 32 --batch-size 4 --data {data}
  --workers 1 --epochs 2 --log-interval 1 --checkpoint-every 4
  --output-dir ${{{{outputs.model}}}}
code: {code}
outputs: {{model: {{type: uri_folder}}}}
environment_variables: {{OMP_NUM_THREADS: "1"}}
resources: {{instance_count: 2}}
distribution: {{type: pytorch, process_count_per_instance: 1}}
retry: {{max_attempts: 2, max_preemptions: 1, preemption_grace: 30}}
"""
STEP_LINE = re.compile(r"epoch (\d+) step (\d+)/10 ")


def _last_step(log: Path) -> int:
    steps = [
        (int(m.group(1)) - 1) * 10 + int(m.group(2))
        for m in STEP_LINE.finditer(log.read_text() if log.exists() else "")
    ]
    return max(steps, default=0)


def _weights(job: dict[str, object]) -> dict[str, torch.Tensor]:
    path = Path(str(job["outputs_dir"])) / "model" / "model.pt"
    return torch.load(path, weights_only=True)


def _wait_until(cli: Cli, name: str, condition: object, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{name}: {what} never happened"
        assert cli.show(name)["status"] in ("Queued", "Preparing", "Running")
        time.sleep(0.1)


def _shards(root: Path) -> Path:
    """80 training images in shards: 10 steps per epoch at 2 ranks x 4 images."""
    from phalanx.data.convert import convert_imagefolder
    from phalanx.data.synthetic import make_imagefolder
    from phalanx.storage.location import local

    raw = make_imagefolder(root / "raw", classes=4, per_class=20, size_range=(36, 60))
    convert_imagefolder(raw, local(str(root / "data" / "train")), shard_bytes=20_000, workers=1)
    return root / "data"


def test_killed_rank_and_preemption_resume_to_the_same_weights(cli: Cli, tmp_path: Path) -> None:
    data = _shards(tmp_path)
    spec = cli.write("job.yml", JOB.format(code=REPO / "examples" / "imagenet", data=data))

    baseline = cli.wait(cli.create(spec), ("Completed", "Failed"), timeout=180)
    assert baseline["status"] == "Completed", baseline
    expected = _weights(baseline)

    # 1. SIGKILL rank 1 after the step-4 checkpoint is committed.
    name = cli.create(spec)
    job_dir = cli.home / "jobs" / name
    committed = job_dir / "checkpoints" / "step_000000000004" / "COMMITTED"
    _wait_until(
        cli,
        name,
        lambda: (
            committed.exists() and _last_step(job_dir / "user_logs" / "std_log_process_0.txt") >= 6
        ),
        "step 6",
    )
    victim = next(
        p
        for p in job_processes_under(cli.home)
        if p.environ().get("RANK") == "1"
        and "train.py" in " ".join(p.cmdline())
        and "phalanx.launch.worker" not in p.cmdline()
    )
    killed_at = _last_step(job_dir / "user_logs" / "std_log_process_0.txt")
    victim.send_signal(signal.SIGKILL)
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "infrastructure"),
        ("Succeeded", None),
    ]
    assert job["attempts"][0]["error"]["rank"] == 1
    log = (job_dir / "user_logs" / "std_log_process_0.txt").read_text()
    resumed = int(re.search(r"resumed from checkpoint at step (\d+)", log).group(1))  # type: ignore[union-attr]
    assert killed_at - 4 <= resumed <= killed_at + 1  # at most one checkpoint interval lost
    for key, tensor in _weights(job).items():
        assert torch.equal(tensor, expected[key]), key

    # 2. Preempt every node mid-run: the save happens at the step reached, none lost.
    name = cli.create(spec)
    job_dir = cli.home / "jobs" / name
    _wait_until(
        cli,
        name,
        lambda: _last_step(job_dir / "user_logs" / "std_log_process_0.txt") >= 6,
        "step 6",
    )
    cli.run("job", "preempt", name, check=True)
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "preemption"),
        ("Succeeded", None),
    ]
    log = (job_dir / "user_logs" / "std_log_process_0.txt").read_text()
    saved = int(re.search(r"preempted at step (\d+); checkpoint saved", log).group(1))  # type: ignore[union-attr]
    resumed = int(re.search(r"resumed from checkpoint at step (\d+)", log).group(1))  # type: ignore[union-attr]
    assert resumed == saved  # 0 steps lost
    for key, tensor in _weights(job).items():
        assert torch.equal(tensor, expected[key]), key
