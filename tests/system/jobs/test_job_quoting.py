"""Paths phalanx substitutes into a command reach it as one argument, whatever they hold
(a space and a non-ASCII letter in PHALANX_HOME, an input folder with a space), bare, in
double quotes or in single quotes; literal input values are pasted as written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from conftest import Cli
from phalanx.archives import pack_folder
from phalanx.compute.nodejob import NODE_HOME_ENV, NodeFolder, NodeJob
from phalanx.compute.plan import JobPlan, OutputPlan
from phalanx.spec import InputSpec, interpolate, render_literal
from phalanx.storage.location import Location

NASTY = '/tmp/ml work ü/it\'s "q" $HOME `x` \\b'
"""A path with every character the shell treats specially inside or outside quotes."""


def _argv(command: str) -> list[str]:
    """The arguments ``show`` gets when ``bash -c`` runs ``command``."""
    script = "import json, sys; print(json.dumps(sys.argv[1:]))"
    done = subprocess.run(
        ["bash", "-c", f"show() {{ {sys.executable} -c '{script}' \"$@\"; }}\n{command}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("show ${{outputs.m}}", [NASTY]),
        ('show "${{outputs.m}}"', [NASTY]),
        ("show '${{outputs.m}}'", [NASTY]),
        ("show --out=${{outputs.m}}/sub", [f"--out={NASTY}/sub"]),
        ('show "pre ${{outputs.m}} post"', [f"pre {NASTY} post"]),
        ("show 'pre ${{outputs.m}} post'", [f"pre {NASTY} post"]),
        ("show $'${{outputs.m}}'", [NASTY]),
        ('show "$(printf %s "${{outputs.m}}")"', [NASTY]),
        ('show "`printf %s ${{outputs.m}}`"', [NASTY]),
        # A quote in a comment opens nothing.
        ("true  # don't\nshow ${{outputs.m}}", [NASTY]),
        # Nor do quotes the user escaped, or quotes of the other kind.
        ("""show "it's" \\' ${{outputs.m}}""", ["it's", "'", NASTY]),
    ],
)
def test_a_path_is_one_argument_bare_or_in_quotes(written: str, expected: list[str]) -> None:
    command = interpolate(written, {}, {"m": NASTY})
    assert _argv(command) == expected


def test_literal_inputs_are_pasted_as_written_and_data_inputs_are_quoted() -> None:
    inputs = {"opts": "--a 1 --b", "n": render_literal(3), "data": "/data/my set"}
    command = interpolate(
        "show ${{inputs.opts}} ${{inputs.n}} ${{inputs.data}} '${{inputs.opts}}'",
        inputs,
        {},
        literals=("opts", "n"),
    )
    assert command == "show --a 1 --b 3 '/data/my set' '--a 1 --b'"
    assert _argv(command) == ["--a", "1", "--b", "3", "/data/my set", "--a 1 --b"]


def test_an_ordinary_path_is_substituted_unchanged() -> None:
    command = interpolate("--out ${{outputs.m}}", {}, {"m": "/runs/j1/outputs/model"})
    assert command == "--out /runs/j1/outputs/model"


SCRIPT = """
import json, os, sys
from pathlib import Path
model, other, checkpoints, data, raw, *words = sys.argv[1:]
Path(model, "weights.txt").write_text("trained")
Path(other, "copy.txt").write_text(Path(data, "in.txt").read_text())
Path(checkpoints, "step_1").mkdir()
env = {k: os.environ[k] for k in ("PHALANX_OUTPUT_MODEL", "PHALANX_INPUT_DATA", "PHALANX_HOME")}
seen = {"argv": sys.argv[1:], "env": env}
Path(model, "seen.json").write_text(json.dumps(seen))
"""

JOB = """
type: command
code: src
command: >-
  python spaced.py ${{{{outputs.model}}}} "${{{{outputs.other}}}}" '${{{{outputs.checkpoints}}}}'
  ${{{{inputs.data}}}} ${{{{inputs.raw}}}} ${{{{inputs.words}}}}
inputs:
  data: {{type: uri_folder, path: "{data}"}}
  raw: {{type: uri_folder, path: "azureml://datastores/default/paths/raw set", mode: direct}}
  words: two words
outputs:
  model: {{type: uri_folder}}
  other: {{type: uri_folder}}
limits: {{timeout: 120}}
"""


def test_a_job_under_a_home_with_a_space_and_an_umlaut(cli: Cli, tmp_path: Path) -> None:
    # PHALANX_HOME="~/ml work ü", as a user would write it (under the fixture's home so
    # its check for processes left behind still covers the job).
    cli.env["HOME"] = str(cli.home)
    cli.env["PHALANX_HOME"] = "~/ml work ü"
    cli.home = cli.home / "ml work ü"
    (cli.home / "datastore" / "raw set").mkdir(parents=True)
    data = tmp_path / "my data ü"
    data.mkdir()
    (data / "in.txt").write_text("input read")
    cli.write("src/spaced.py", SCRIPT)
    spec = cli.write("job.yml", JOB.format(data=data))

    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"))
    assert job["status"] == "Completed", job
    outputs = Path(job["outputs_dir"])
    assert outputs.is_relative_to(cli.home)
    assert (outputs / "model" / "weights.txt").read_text() == "trained"
    assert (outputs / "other" / "copy.txt").read_text() == "input read"
    assert (Path(job["checkpoint_dir"]) / "step_1").is_dir()
    seen = json.loads((outputs / "model" / "seen.json").read_text())
    assert seen["argv"] == [
        str(outputs / "model"),
        str(outputs / "other"),
        job["checkpoint_dir"],
        str(data),
        str(cli.home / "datastore" / "raw set"),  # `direct` on a local datastore: its path
        "two",  # a literal is pasted as written: two words, two arguments
        "words",
    ]
    # The environment variables hold the same paths, unquoted.
    assert seen["env"] == {
        "PHALANX_OUTPUT_MODEL": str(outputs / "model"),
        "PHALANX_INPUT_DATA": str(data),
        "PHALANX_HOME": str(cli.home),
    }


RAW = "azureml://datastores/blobs/paths/raw set"


def test_a_ray_node_quotes_its_own_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray node substitutes the paths of its own folder (``files: local``): quoted too."""
    monkeypatch.setenv(NODE_HOME_ENV, str(tmp_path / "node home ü"))
    monkeypatch.setenv("PHALANX_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "my data"
    data.mkdir()
    job_dir = tmp_path / "ws" / "jobs" / "j1"
    model_dir = job_dir / "outputs" / "model"
    plan = JobPlan(
        job_dir=job_dir,
        command=(
            "show ${{outputs.model}} \"${{outputs.model}}\" '${{outputs.checkpoints}}' "
            "${{inputs.data}} ${{inputs.raw}} ${{inputs.words}}"
        ),
        literals={"words": "two words"},
        data_inputs={
            "data": InputSpec(type="uri_folder", path=str(data)),
            "raw": InputSpec(type="uri_folder", path=RAW, mode="direct"),
        },
        locations={
            "data": Location(fsspec.filesystem("file"), str(data), str(data)),
            "raw": Location(fsspec.filesystem("memory"), "/raw set", RAW),
        },
        outputs={"model": OutputPlan(value=model_dir, folder=model_dir)},
        env={},
    )
    job = NodeJob(job_name="j1", plan=plan, files="local")
    folder = NodeFolder(job, 0, code=pack_folder(tmp_path / "no code"))
    try:
        model = folder.root / "named_outputs" / "model"
        assert " " in str(model)
        assert _argv(folder.command) == [
            str(model), str(model), str(folder.root / "checkpoints"), str(data), RAW,
            "two", "words",
        ]  # fmt: skip
    finally:
        folder.close()
