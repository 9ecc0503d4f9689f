"""The CLI's list tables on an 80-column terminal, as a user runs them: no line wider, no
name or path cut or wrapped mid-word, times as a person reads them (no job runs)."""

from __future__ import annotations

import re

from conftest import Cli

MODEL = "resnet50-imagenet-classifier-with-a-long-name"
ASSET = "imagenet-train-shards-2024-full-resolution"
IMAGE = "docker.io/library/python:3.11-slim-bookworm-with-a-long-tag"
TARGET = "gpu-box-partition-for-the-vision-team"
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def test_list_tables_fit_80_columns_and_cut_no_name(cli: Cli) -> None:
    model = cli.workdir / "model"
    (model / "sub").mkdir(parents=True)
    (model / "weights.pt").write_bytes(b"w" * 1_500_000)
    (model / "sub" / "config.json").write_text("{}")
    cli.run("model", "create", "--name", MODEL, "--path", str(model), check=True)
    folder = cli.workdir / "a-folder-with-a-long-name-that-pushes-the-path-wide" / "shards"
    folder.mkdir(parents=True)
    cli.run("data", "create", "--name", ASSET, "--path", str(folder), check=True)
    cli.write("env.yml", f"name: torch-env\nimage: {IMAGE}\n")
    cli.run("environment", "create", "-f", "env.yml", check=True)
    cli.run("compute", "create", "--type", "local", "--name", TARGET, "--cpus", "1",
            "--gpus", "none", check=True)  # fmt: skip
    cli.env["COLUMNS"] = "80"
    whole = {
        ("model", "list"): [MODEL, "1.5 MB"],
        ("data", "list"): [ASSET, str(folder)],
        ("environment", "list"): ["torch-env", IMAGE],
        ("compute", "list"): [TARGET, "local", "this machine:"],
        ("datastore", "list"): ["default"],
    }
    for command, expected in whole.items():
        text = cli.run(*command, check=True).stdout
        lines = text.splitlines()
        # A line is no wider than the terminal, unless it is one word alone that is (this
        # test's folder path): that is left whole, under its row, never cut.
        wide = [ln for ln in lines if len(ln) > 80]
        assert lines and all(ln.startswith("    ") and len(ln.split()) == 1 for ln in wide), (
            command,
            text,
        )
        words = text.split()
        for item in expected:
            if " " in item:
                assert item in text, (command, item, text)
            else:
                assert item in words, (command, item, text)  # whole, on one line
        assert not ISO.search(text), (command, text)  # "Nov 27 02:55", not ISO 8601
        assert "…" not in text and "[" not in text, (command, text)
    created = cli.run("model", "list", check=True).stdout.splitlines()[1]
    assert re.search(r"[A-Z][a-z]{2} \d\d \d\d:\d\d$", created), created
