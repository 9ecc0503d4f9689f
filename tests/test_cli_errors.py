"""User mistakes at the CLI: one line on stderr, exit 2, no traceback, nothing recorded."""

from __future__ import annotations

import json

import pytest

from conftest import LOCAL_AND_SERVER, Cli

BAD_SPECS = [
    # (spec text, --set items, what the one line must contain)
    (
        "command: echo hi\nresources:\n  instnce_count: 2\n",
        (),
        "job.yml:3: resources.instnce_count",
    ),
    (
        "command: echo hi\nresources:\n  instance_count: 0\n",
        (),
        "job.yml:3: resources.instance_count",
    ),
    ("command: echo hi\ndistribution:\n  type: pytorh\n", (), "did you mean 'pytorch'"),
    (
        "command: echo hi\ndistribution:\n  type: tensorflow\n  worker_count: 3\n"
        "resources:\n  instance_count: 2\n",
        (),
        "job.yml:4: distribution.worker_count",
    ),
    ("description: no command\n", (), "command"),
    ("command: echo ${{inputs.nope}}\n", (), "names no input"),
    ("command: echo hi\n", ("resources.instance_count=zero",), "--set"),
    ("command: echo hi\n", ("novalue",), "--set"),
    ("command: [unclosed\n", (), "job.yml:1"),
    ("command: echo\noutputs:\n  checkpoints: {type: uri_folder}\n", (), "is built in"),
    (
        "command: cat ${{inputs.d}}\ninputs:\n  d: {type: uri_folder, path: ./missing}\n",
        (),
        "missing",
    ),
]


@pytest.mark.parametrize(("text", "sets", "expected"), BAD_SPECS)
def test_bad_spec_gives_one_line_and_exit_2(
    cli: Cli, text: str, sets: tuple[str, ...], expected: str
) -> None:
    spec = cli.write("job.yml", text)
    args: list[str] = []
    for item in sets:
        args += ["--set", item]
    for verb in (["job", "validate", "-f", str(spec)], ["job", "create", "-f", str(spec)]):
        proc = cli.run(*verb, *args)
        assert proc.returncode == 2, (verb, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("error: ")
        assert expected in lines[0]
        assert "Traceback" not in proc.stderr
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []


def test_debug_shows_the_traceback(cli: Cli) -> None:
    spec = cli.write("job.yml", "command: echo hi\nresources: {instance_count: 0}\n")
    cli.env["PHALANX_DEBUG"] = "1"
    proc = cli.run("job", "validate", "-f", str(spec))
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr


@LOCAL_AND_SERVER
def test_missing_spec_file_and_unknown_job(cli: Cli) -> None:
    proc = cli.run("job", "create", "-f", "nope.yml")
    assert proc.returncode == 2
    assert "nope.yml" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli.run("job", "show", "no_such_job")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "error: job 'no_such_job' not found; `phalanx job list` shows the jobs"
    )


@LOCAL_AND_SERVER
def test_duplicate_job_name_is_refused(cli: Cli) -> None:
    spec = cli.write("job.yml", "name: once\ncommand: echo hi\n")
    assert cli.create(spec) == "once"
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2
    assert "already exists" in proc.stderr
    cli.wait("once", ("Completed",))


@LOCAL_AND_SERVER
def test_validate_accepts_a_good_spec(cli: Cli) -> None:
    spec = cli.write(
        "job.yml",
        "command: echo ${{inputs.n}}\ninputs: {n: 3}\nresources: {instance_count: 2}\n",
    )
    proc = cli.run("job", "validate", "-f", str(spec), "--set", "inputs.n=4")
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout and "2 node(s)" in proc.stdout


def test_a_typo_of_a_required_field_is_the_error(cli: Cli) -> None:
    cli.write("bad.yml", 'type: command\ncomand: python -c "print(1)"\n')
    proc = cli.run("job", "validate", "-f", "bad.yml")
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: bad.yml:2: comand: unknown field 'comand'; did you mean 'command'?\n"
    )


MANY_PROBLEMS = """\
comand: python t.py
resources:
  instance_count: 0
distribution:
  tpye: pytorch
inputs:
  d: {mode: rw_mount, pth: x}
"""


@LOCAL_AND_SERVER
def test_validate_lists_every_problem_and_create_one_line(cli: Cli) -> None:
    cli.write("job.yml", MANY_PROBLEMS)
    proc = cli.run("job", "validate", "-f", "job.yml", "--set", "retry.max_attempts=0")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["error", "--set"],
        ["error", "job.yml:1"],
        ["error", "job.yml:3"],
        ["error", "job.yml:5"],
        ["error", "job.yml:7"],
        ["error", "job.yml:7"],
    ]
    assert lines[0].endswith("(from --set retry.max_attempts=0)")
    assert "did you mean 'command'?" in lines[1]
    assert "did you mean 'type'?" in lines[3]
    assert "did you mean 'path'?" in lines[5]
    assert not any("missing" in line for line in lines)

    proc = cli.run("job", "create", "-f", "job.yml", "--set", "retry.max_attempts=0")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {lines[0].removeprefix('error: ')} (and 5 more problems)"
    ]
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []

    cli.env["PHALANX_DEBUG"] = "1"
    proc = cli.run("job", "validate", "-f", "job.yml")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("error: ")]) == 5
