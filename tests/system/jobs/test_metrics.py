"""Metrics from a real 2-rank job: metrics.jsonl, TensorBoard event files, `job metrics`."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from pathlib import Path

import pytest

from conftest import LOCAL_AND_SERVER, Cli

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


@LOCAL_AND_SERVER
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


NO_TF_SCRIPT = """
import sys
from phalanx.train import flush_metrics, log_metric
log_metric("loss", 0.5, 1, all_ranks=True)
flush_metrics()
print("IMPORTED", "tensorflow" in sys.modules, "tensorboard" in sys.modules, flush=True)
"""

# What TensorFlow prints as it loads (oneDNN notice, CPU feature guard, absl).
TF_BANNERS = ("oneDNN custom operations", "cpu_feature_guard", "absl::InitializeLog", "TF_ENABLE")


def test_a_rank_that_logs_metrics_never_imports_tensorflow(cli: Cli) -> None:
    cli.write("src/metrics_job.py", NO_TF_SCRIPT)
    name = cli.create(cli.write("job.yml", JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])
    for rank in (0, 1):
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert "IMPORTED False False" in log, log
        assert not [b for b in TF_BANNERS if b in log], log
        # flush_metrics() wrote the event at once, into the rank's own folder.
        files = list((job_dir / "outputs" / "tensorboard" / f"rank_{rank}").iterdir())
        assert len(files) == 1 and files[0].stat().st_size > 60


def test_crc32c_of_the_standard_check_vector() -> None:
    from phalanx.tbevents import crc32c

    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720, B.4: 32 bytes of zeros


def test_records_match_tensorboards_own_framing() -> None:
    import io

    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    from phalanx.tbevents import encode_event, tfrecord

    data = encode_event(1234.5, step=-3, scalars={"a": 1.5, "ü": -2.0})
    theirs = io.BytesIO()
    RecordWriter(theirs).write(data)
    assert tfrecord(data) == theirs.getvalue()
    event = Event.FromString(data)
    assert (event.wall_time, event.step) == (1234.5, -3)
    assert [(v.tag, v.simple_value) for v in event.summary.value] == [("a", 1.5), ("ü", -2.0)]
    assert Event.FromString(encode_event(1.0, file_version="brain.Event:2")).file_version == (
        "brain.Event:2"
    )


def test_nan_inf_negative_steps_and_unicode_tags_read_back(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from phalanx.tbevents import EventFileWriter

    writer = EventFileWriter(tmp_path)
    writer.add_scalars({"loss": float("nan"), "val/点数 ✓": 0.25}, step=-5, wall_time=100.0)
    writer.add_scalar("loss", float("inf"), 2**40, wall_time=101.0)
    writer.add_scalar("loss", float("-inf"), 0, wall_time=102.0)
    writer.add_scalar("huge", 1e300)  # beyond float32: infinity, as a C cast makes it
    writer.close()
    assert re.fullmatch(
        rf"events\.out\.tfevents\.\d{{10}}\.{re.escape(socket.gethostname())}\.{os.getpid()}\.\d+",
        writer.path.name,
    )

    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["huge", "loss", "val/点数 ✓"]
    loss = [(e.step, e.value, e.wall_time) for e in events.Scalars("loss")]
    assert math.isnan(loss[0][1]) and loss[0][0] == -5 and loss[0][2] == 100.0
    assert loss[1:] == [(2**40, math.inf, 101.0), (0, -math.inf, 102.0)]
    assert [(e.step, e.value) for e in events.Scalars("val/点数 ✓")] == [(-5, 0.25)]
    assert [e.value for e in events.Scalars("huge")] == [math.inf]


def test_buffered_events_are_written_after_flush_secs(tmp_path: Path) -> None:
    from phalanx.tbevents import EventFileWriter

    writer = EventFileWriter(tmp_path, flush_secs=0.2)
    header = writer.path.stat().st_size  # the file-version record, written at once
    writer.add_scalar("loss", 1.0, 1)
    assert writer.path.stat().st_size == header
    deadline = time.monotonic() + 10
    while writer.path.stat().st_size == header and time.monotonic() < deadline:
        time.sleep(0.05)
    flushed = writer.path.stat().st_size
    assert flushed > header
    writer.close()
    writer.add_scalar("loss", 2.0, 2)  # after close (a late exit handler): written at once
    assert writer.path.stat().st_size > flushed


@LOCAL_AND_SERVER
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


def test_each_ray_nodes_samples_read_back_named_by_node_across_attempts(tmp_path: Path) -> None:
    """A Ray node samples its machine into a file per attempt and node; read together,
    node K's values are ``system/node<K>/…`` and its samples number on from attempt to
    attempt (each attempt's agent counts from 0). Other files of the folder are not read."""
    from phalanx.workspace.metrics import node_metrics_file, read_system_metrics

    def sampled(file: str, values: list[float], node: str) -> None:
        lines = [{"name": "system/cpu_percent", "value": v, "step": i, "node": node}
                 for i, v in enumerate(values)]  # fmt: skip
        (tmp_path / file).write_text("".join(json.dumps(r) + "\n" for r in lines))

    sampled(node_metrics_file(2, 0), [30.0], "w2")  # the attempt that resumed, on w2
    sampled(node_metrics_file(1, 0), [10.0, 11.0], "w1")
    sampled(node_metrics_file(1, 1), [20.0], "w2")
    sampled("system_metrics_attemptX_node0.jsonl", [99.0], "w9")
    history = read_system_metrics(tmp_path)
    assert history == {
        "system/node0/cpu_percent": [(0, 10.0), (1, 11.0), (2, 30.0)],
        "system/node1/cpu_percent": [(0, 20.0)],
    }
    # The supervisor's own samples (nodes on its machine) keep their names.
    sampled("system_metrics.jsonl", [5.0], "server")
    assert read_system_metrics(tmp_path)["system/cpu_percent"] == [(0, 5.0)]
    assert read_system_metrics(tmp_path / "missing") == {}


def test_system_samples_read_against_the_seconds_since_the_job_started(tmp_path: Path) -> None:
    """What the studio's system charts draw: each sample at its time since the job's start
    (the supervisor's and each Ray node's, named as read_system_metrics names them), in
    time order; a line without a time is left out."""
    from phalanx.workspace.metrics import node_metrics_file, read_system_timeline

    def sampled(file: str, samples: list[tuple[float | None, float]]) -> None:
        lines = [{"name": "system/cpu_percent", "value": v, "step": i, "time": t}
                 for i, (t, v) in enumerate(samples)]  # fmt: skip
        (tmp_path / file).write_text("".join(json.dumps(r) + "\n" for r in lines))

    sampled("system_metrics.jsonl", [(1000.0, 5.0), (1002.5, 6.0), (None, 7.0), (1001.0, 4.0)])
    sampled(node_metrics_file(1, 0), [(1003.0, 30.0)])
    timeline = read_system_timeline(tmp_path, since=999.0)
    assert timeline == {
        "system/cpu_percent": [(1.0, 5.0), (2.0, 4.0), (3.5, 6.0)],
        "system/node0/cpu_percent": [(4.0, 30.0)],
    }
    # Without the job's start: from its first sample.
    assert read_system_timeline(tmp_path)["system/cpu_percent"][0] == (0.0, 5.0)
    assert read_system_timeline(tmp_path / "missing") == {}


def test_the_sampler_takes_the_first_minute_fast_unless_an_interval_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.launch import sysmetrics

    monkeypatch.delenv(sysmetrics.INTERVAL_ENV, raising=False)
    start = time.monotonic()
    sampler = sysmetrics.SystemSampler(tmp_path)  # its first minute counts from here
    assert sampler.next_wait(start) == sysmetrics.FAST_INTERVAL_S == 2.0
    assert sampler.next_wait(start + 59) == 2.0
    # Past the first minute: the bound a long job's samples keep.
    assert sampler.next_wait(start + 61) == sysmetrics.DEFAULT_INTERVAL_S == 15.0
    monkeypatch.setenv(sysmetrics.INTERVAL_ENV, "0.5")
    assert sysmetrics.SystemSampler(tmp_path).next_wait(start) == 0.5
    monkeypatch.setenv(sysmetrics.INTERVAL_ENV, "30")
    assert sysmetrics.SystemSampler(tmp_path).next_wait(start) == 30.0
    assert sysmetrics.SystemSampler(tmp_path, interval=7).next_wait(start) == 7
