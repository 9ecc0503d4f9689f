"""Metrics from a real 2-rank job: metrics.jsonl, TensorBoard event files, `job metrics`."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Cli

SCRIPT = """
import os
from phalanx.train import log_metric, log_metrics
for step in range(1, 6):
    log_metrics({"loss": 1.0 / step, "lr": 0.1}, step)
log_metric("rank_id", float(os.environ["RANK"]), 5, all_ranks=True)
log_metric("diverged", float("inf"), 6)
"""

JOB = """
command: python metrics_job.py
code: src
resources: {instance_count: 1}
distribution: {type: pytorch, process_count_per_instance: 2}
limits: {timeout: 120}
"""


def test_metrics_land_once_in_order_and_read_back(cli: Cli) -> None:
    cli.write("src/metrics_job.py", SCRIPT)
    name = cli.create(cli.write("job.yml", JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])

    records = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    loss = [(r["step"], r["value"], r["rank"]) for r in records if r["name"] == "loss"]
    assert loss == [(s, 1.0 / s, 0) for s in range(1, 6)]  # rank 0 only, once, in order
    assert sorted(r["rank"] for r in records if r["name"] == "rank_id") == [0, 1]
    diverged = next(r for r in records if r["name"] == "diverged")
    assert diverged["value"] is None and diverged["text"] == "inf"

    shown = json.loads(cli.run("job", "metrics", name, "--json", check=True).stdout)
    assert shown["loss"] == [{"step": s, "value": 1.0 / s} for s in range(1, 6)]
    table = cli.run("job", "metrics", name, check=True).stdout
    assert "loss" in table and "0.2" in table and "nan/inf" in table

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(job_dir / "outputs" / "tensorboard" / "rank_0"))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("loss")] == [
        (s, round(1.0 / s, 6)) for s in range(1, 6)
    ]


def test_tensorboard_of_a_job_without_event_files_is_a_clear_error(cli: Cli) -> None:
    cli.write("src/metrics_job.py", "print('no metrics')\n")
    name = cli.create(cli.write("job.yml", JOB))
    cli.wait(name, ("Completed", "Failed"))
    proc = cli.run("tensorboard", name)
    assert proc.returncode == 2 and "no TensorBoard files" in proc.stderr
    empty = cli.run("job", "metrics", name, check=True).stdout
    assert "has logged no metrics yet" in empty


BUSY = """
import time
end = time.time() + 2.5
while time.time() < end:
    pass
"""

# No GPU here: a stand-in `nvidia-smi` answers the one query phalanx makes, as the real
# one prints it (index, utilization.gpu %, memory.used MiB), so the parsing is exercised.
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "0, 87, 2048"
echo "1, [N/A], [N/A]"
"""


def test_system_metrics_are_sampled_during_the_job(cli: Cli, tmp_path: Path) -> None:
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (fake_bin / "nvidia-smi").chmod(0o755)
    cli.env["PATH"] = f"{fake_bin}:{cli.env['PATH']}"
    cli.env["PHALANX_SYSTEM_METRICS_INTERVAL"] = "0.4"
    cli.write("src/metrics_job.py", BUSY)
    name = cli.create(cli.write("job.yml", JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job

    lines = Path(job["job_dir"], "system_metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    by_name: dict[str, list[float]] = {}
    for r in records:
        by_name.setdefault(r["name"], []).append(r["value"])
    assert len(by_name["system/cpu_percent"]) >= 4
    # Two ranks spinning on two cores: the job's own processes show up busy.
    assert max(by_name["system/job_cpu_percent"]) > 50
    assert 0 < max(by_name["system/job_rss_gb"]) < 24
    assert 0 < by_name["system/memory_percent"][-1] <= 100
    assert set(by_name["system/gpu0/utilization_percent"]) == {87.0}
    assert set(by_name["system/gpu0/memory_used_gb"]) == {2.0}
    assert not any(n.startswith("system/gpu1") for n in by_name)  # [N/A] skipped
    steps = [r["step"] for r in records if r["name"] == "system/cpu_percent"]
    assert steps == list(range(len(steps)))

    table = cli.run("job", "metrics", name, check=True).stdout
    assert "system/job_cpu_percent" in table and "SAMPLE" in table
    shown = json.loads(cli.run("job", "metrics", name, "--json", check=True).stdout)
    assert shown["system/gpu0/utilization_percent"][-1]["value"] == 87.0


def test_latest_is_the_last_logged_and_odd_steps_are_skipped(tmp_path: Path) -> None:
    from phalanx.workspace.metrics import latest_metrics, read_metrics

    lines = [
        {"name": "loss", "value": 9.0, "step": None},
        {"name": "loss", "value": 1.0, "step": 100},
        {"name": "loss", "value": 5.0, "step": "x"},
        {"name": "loss", "value": 6.0, "step": [1]},
        {"name": "acc", "value": 0.5, "step": 2},
    ]
    text = "".join(json.dumps(r) + "\n" for r in lines) + '{"name": "torn'
    (tmp_path / "metrics.jsonl").write_text(text)
    history = read_metrics(tmp_path)
    assert history["loss"] == [(100, 1.0), (None, 9.0)]  # stepped in step order, then the rest
    assert latest_metrics(tmp_path)["acc"] == 0.5
    assert latest_metrics(tmp_path)["loss"] == 1.0  # the last valid line written wins
