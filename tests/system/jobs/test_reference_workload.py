"""examples/imagenet/train.py runs end to end, learns, and reports its throughput."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO, Cli, clean_env
from phalanx.launch.ports import free_port

TRAIN = REPO / "examples" / "imagenet" / "train.py"
TINY = [
    "--arch", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "8",
    "--epochs", "2", "--steps-per-epoch", "8", "--log-interval", "4",
]  # fmt: skip


def child_env() -> dict[str, str]:
    env = clean_env(PYTHONUNBUFFERED="1")
    env.pop("PHALANX_OUTPUTS_DIR", None)
    return env


def check_outputs(out: Path, stdout: str, world_size: int) -> None:
    report = json.loads((out / "throughput.json").read_text())
    assert report["arch"] == "resnet18"
    assert report["world_size"] == world_size
    assert report["batch_size_per_rank"] == 8
    assert report["image_size"] == 32
    assert report["precision"] == "fp32"
    assert report["img_per_sec_per_rank"] > 0
    assert report["img_per_sec_total"] == pytest.approx(report["img_per_sec_per_rank"] * world_size)
    assert [e["epoch"] for e in report["per_epoch"]] == [1, 2]
    for epoch in report["per_epoch"]:
        assert epoch["img_per_sec_per_rank"] > 0 and epoch["img_per_sec_total"] > 0
        assert epoch["timed_steps"] > 0 and epoch["seconds"] > 0
    # One fixed synthetic batch: a working training loop memorises it.
    assert report["final_loss"] < report["first_loss"]

    state = torch.load(out / "model.pt", weights_only=True)
    assert "fc.weight" in state and not any(k.startswith("module.") for k in state)
    assert state["fc.weight"].shape == (10, 512)

    lines = stdout.strip().splitlines()
    assert lines[-1].startswith("THROUGHPUT ")
    overall = json.loads(lines[-1].removeprefix("THROUGHPUT "))
    assert overall["img_per_sec_total"] == pytest.approx(report["img_per_sec_total"])
    assert any(ln.startswith("outputs: ") for ln in lines)


@pytest.mark.slow
def test_one_process_trains_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    cmd = [sys.executable, str(TRAIN), *TINY, "--output-dir", str(out)]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_outputs(out, proc.stdout, world_size=1)


@pytest.mark.slow
def test_two_processes_under_plain_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--max-restarts", "0",
        str(TRAIN), *TINY, "--output-dir", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_outputs(out, proc.stdout, world_size=2)
    # Progress lines come from rank 0 only.
    assert "[rank 0/2]" in proc.stdout and "[rank 1/2]" not in proc.stdout


def test_output_dir_defaults_to_phalanx_outputs_dir(tmp_path: Path) -> None:
    env = child_env()
    env["PHALANX_OUTPUTS_DIR"] = str(tmp_path / "job-outputs")
    cmd = [sys.executable, str(TRAIN), *TINY, "--epochs", "1", "--steps-per-epoch", "2"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "job-outputs" / "throughput.json").is_file()
    assert not (tmp_path / "outputs").exists()


def test_a_data_root_without_train_is_a_one_line_user_error(tmp_path: Path) -> None:
    cmd = [sys.executable, str(TRAIN), "--data", "x", "--output-dir", str(tmp_path / "o")]
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "--data x" in proc.stderr and "no folder x/train" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_gpu_decode_without_a_gpu_is_a_one_line_user_error(tmp_path: Path) -> None:
    """``--decode gpu`` on a machine without CUDA (as this one): refused before any work."""
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "index.json").write_text("{}")
    for root, why in ((tmp_path / "data", "needs CUDA"), (tmp_path, "needs --data with phalanx")):
        cmd = [sys.executable, str(TRAIN), "--data", str(root), "--decode", "gpu",
               "--output-dir", str(tmp_path / "o")]  # fmt: skip
        proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("train.py: --decode gpu: ") and why in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_demo_job_runs_through_phalanx(cli: Cli) -> None:
    """The README's demo: its dataset made as shards in the default datastore, then the
    spec, shrunk by --set, runs as 2 nodes x 1 process, learns and reports accuracy."""
    prepare = REPO / "examples" / "imagenet" / "prepare_demo_data.py"
    made = subprocess.run(
        [sys.executable, str(prepare), "--classes", "4", "--train", "24", "--val", "8"],
        env=cli.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "data asset azureml:imagenet-demo:1 created" in made.stdout
    assert (cli.home / "datastore" / "imagenet-demo" / "train" / "index.json").is_file()
    demo = REPO / "examples" / "imagenet" / "job-demo.yml"
    sets = {
        "name": "demo",
        "inputs.arch": "resnet18",
        "inputs.image_size": "32",
        "inputs.batch_size": "8",
        "inputs.epochs": "2",
    }
    args = ["run", str(demo)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    proc = cli.run(*args, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "THROUGHPUT" in proc.stdout
    job = cli.show("demo")
    assert job["status"] == "Completed"
    assert job["instance_count"] == 2
    result = json.loads((Path(job["outputs_dir"]) / "model" / "throughput.json").read_text())
    assert result["world_size"] == 2
    assert result["steps_per_epoch"] == 6  # 96 images / (2 ranks x 8)
    assert result["data"] == str(cli.home / "datastore" / "imagenet-demo")
    assert [v["epoch"] for v in result["validation"]] == [1, 2]
    assert all(v["images"] == 32 and 0 <= v["top1"] <= v["top5"] <= 1 for v in result["validation"])
    # The demo's model output is registered when the job completes.
    model = json.loads(cli.run("model", "show", "resnet50-demo", "--json", check=True).stdout)
    assert model["job"] == "demo" and model["version"] == "1"
    assert {f["path"] for f in model["files"]} == {"model.pt", "throughput.json"}
    assert "val/top1" in model["metrics"]
