"""`phalanx bench train` over real jobs (CSV, Markdown, PNG) and `phalanx bench data`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from PIL import Image

from conftest import Cli

TINY = (
    "--model", "resnet18", "--image-size", "32", "--batch-size", "4", "--steps", "3",
    "--warmup", "1",
)  # fmt: skip


@pytest.mark.slow
def test_bench_train_tiny_grid_writes_csv_markdown_and_chart(cli: Cli) -> None:
    out = cli.workdir / "results"
    proc = cli.run(
        "bench", "train", *TINY, "--nodes", "1", "--procs-per-node", "1,2", "--out", str(out),
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr

    with open(out / "train.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["nodes"], r["procs_per_node"]) for r in rows] == [("1", "1"), ("1", "2")]
    assert set(rows[0]) >= {
        "processes", "img_per_sec_total", "img_per_sec_per_process", "efficiency", "job",
    }  # fmt: skip
    single = float(rows[0]["img_per_sec_total"])
    for row in rows:
        n = int(row["processes"])
        total = float(row["img_per_sec_total"])
        assert n == int(row["nodes"]) * int(row["procs_per_node"])
        assert total > 0
        assert float(row["efficiency"]) == pytest.approx(total / (n * single), rel=1e-3)
        assert float(row["img_per_sec_per_process"]) == pytest.approx(total / n, rel=1e-3)
        assert row["model"] == "resnet18" and row["device"] == "cpu"

    with Image.open(out / "train.png") as png:
        png.load()
        assert png.format == "PNG" and png.size == (1000, 500)

    md = (out / "train.md").read_text()
    assert "| 1 × 2 | 2 |" in md and "scaling efficiency" in md
    assert "H100" in md and "lambdalabs.com" in md and "DeepLearningExamples" in md
    assert "1 × 2" in proc.stdout  # the table, printed

    # Each point was a real job of the workspace, and left its spec and result beside the table.
    jobs = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    assert sorted(j["name"] for j in jobs) == sorted(r["job"] for r in rows)
    assert all(j["status"] == "Completed" for j in jobs)
    assert json.loads((out / "jobs" / "1x2.json").read_text())["world_size"] == 2

    # The run is also kept in the workspace (the studio's /bench page), the same figures.
    (kept,) = (cli.home / "bench").glob("*-train-*/results.json")
    run = json.loads(kept.read_text())
    assert [(p["label"], p["job"]) for p in run["points"]] == [
        ("1×1", rows[0]["job"]),
        ("1×2", rows[1]["job"]),
    ]
    assert run["points"][1]["efficiency"] == pytest.approx(float(rows[1]["efficiency"]), abs=1e-4)
    assert run["points"][1]["ideal_img_per_sec"] == pytest.approx(2 * single, rel=1e-3)
    assert run["machine"]["cores"] >= 1 and run["command"].startswith("phalanx bench train")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--nodes", "0"), "--nodes '0'"),
        (("--procs-per-node", "x"), "--procs-per-node 'x'"),
        (("--batch-size", "0"), "--batch-size 0"),
        (("--compute", "nowhere"), "compute target 'nowhere' not found"),
    ],
)
def test_bench_train_bad_input_is_one_line_and_runs_nothing(
    cli: Cli, args: tuple[str, ...], expected: str
) -> None:
    proc = cli.run("bench", "train", *TINY, *args, "--out", str(cli.workdir / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []


def test_bench_data_quick_local_modes(cli: Cli) -> None:
    report = cli.workdir / "data.json"
    proc = cli.run(
        "bench", "data", "--quick", "--modes", "a,b,local", "--workers", "0",
        "--json", str(report),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| (a) memory (decode + augment ceiling) |" in proc.stdout
    result = json.loads(report.read_text())
    assert list(result["median"]) == ["a", "b", "local"]
    assert result["dataset"]["images"] == 80 and result["ratios"] == {}
    (kept,) = (cli.home / "bench").glob("*-data-*/results.json")
    assert json.loads(kept.read_text())["median"] == result["median"]


def test_bench_data_without_azurite_is_one_line(cli: Cli) -> None:
    cli.env["PHALANX_AZURITE"] = str(cli.workdir / "no-azurite")
    proc = cli.run("bench", "data", "--quick")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "PHALANX_AZURITE" in lines[0], lines


def test_kept_runs_are_listed_and_read_whole_by_the_service(tmp_path: Path) -> None:
    from phalanx.bench.grid import GridPoint, TrainBenchConfig, with_efficiency
    from phalanx.bench.record import record_data, record_train
    from phalanx.errors import PhalanxError
    from phalanx.service.bench import NoSuchRun, list_runs, show_run
    from phalanx.workspace import Workspace

    config = TrainBenchConfig(model="resnet18", nodes=(1,), procs_per_node=(1, 2), out=tmp_path)
    raw = {"model": "resnet18", "image_size": 224, "batch_size": 64, "precision": "fp32"}
    runs = [
        (GridPoint(1, 1), "job_a", {**raw, "img_per_sec_total": 10.0, "device_name": "cpu"}),
        (GridPoint(1, 2), "job_b", {**raw, "img_per_sec_total": 16.0, "device_name": "cpu"}),
    ]
    home = tmp_path / "home"
    train = record_train(with_efficiency(runs, config), config, "phalanx bench train", home)
    data = record_data({"command": "phalanx bench data", "median": {"a": 5.0}}, home)
    (home / "bench" / "not-a-run").mkdir()  # left out of the list
    ws = Workspace(home)
    try:
        listed = list_runs(ws)
        assert {r["run"] for r in listed} == {train.parent.name, data.parent.name}
        (kept,) = [r for r in listed if r["kind"] == "train"]
        assert kept["points"] == [
            {"label": "1×1", "img_per_sec_total": 10.0, "efficiency": 1.0},
            {"label": "1×2", "img_per_sec_total": 16.0, "efficiency": 0.8},
        ]
        whole = show_run(ws, train.parent.name)
        assert [p["ideal_img_per_sec"] for p in whole["points"]] == [10.0, 20.0]
        assert whole["points"][1]["img_per_sec_per_process"] == 8.0
        assert whole["config"]["procs_per_node"] == [1, 2] and whole["anchors"]
        assert show_run(ws, data.parent.name)["median"] == {"a": 5.0}
        with pytest.raises(NoSuchRun):
            show_run(ws, "20000101-000000-train-abcdef")
        with pytest.raises(PhalanxError, match="not a benchmark run's name"):
            show_run(ws, "../jobs")
    finally:
        ws.close()
