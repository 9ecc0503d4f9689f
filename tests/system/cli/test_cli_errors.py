"""User mistakes at the CLI: one line on stderr, exit 2, no traceback, nothing recorded."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.launch.ports import free_port

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
    assert proc.stderr.strip() == (
        "error: job 'no_such_job' not found; `phalanx job list` shows the jobs" + _where(cli)
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


def _where(cli: Cli) -> str:
    """What the CLI adds to a name not found: this machine's workspace, or (through a
    server) nothing, for a server never names its folders."""
    if cli.server is not None:
        return ""
    return f" (in this machine's workspace {cli.home.resolve()}: PHALANX_SERVER is not set)"


def _one_error(cli: Cli, *args: str) -> str:
    proc = cli.run(*args)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ")
    return proc.stderr.strip()


@LOCAL_AND_SERVER
def test_a_wrong_name_says_did_you_mean_and_a_fix_any_member_can_run(cli: Cli) -> None:
    """A near miss of a compute target, datastore, environment, model or data asset, in a
    spec or a verb: the name meant, the list command (no admin's `compute create`, no
    Ray), and on this machine which workspace answered; through a server, no path."""
    cli.write("d/a.txt", "x\n")
    cli.run("data", "create", "--name", "images", "--path", "d", check=True)
    cli.run("model", "create", "--name", "resnet50", "--path", "d", check=True)
    cli.write("env.yml", "name: torch-cpu\nimage: python:3.11-slim\n")
    cli.run("environment", "create", "-f", "env.yml", check=True)
    spec = "command: echo hi\n"
    uses = "inputs:\n  d: {type: uri_folder, path: '%s'}\n"
    wrong = [
        (("compute", "show", "locla"), "compute target 'locla'", "local", "compute"),
        (("compute", "delete", "locla"), "compute target 'locla'", "local", "compute"),
        (("datastore", "show", "defualt"), "datastore 'defualt'", "default", "datastore"),
        (("environment", "show", "torch_cpu"), "environment 'torch_cpu'", "torch-cpu",
         "environment"),
        (("model", "show", "resnet-50"), "model 'resnet-50'", "resnet50", "model"),
        (("data", "show", "imagse"), "data asset 'imagse'", "images", "data"),
        (spec + "compute: locla\n", "compute target 'locla'", "local", "compute"),
        (spec + uses % "azureml://datastores/defualt/paths/x", "datastore 'defualt'",
         "default", "datastore"),
        (spec + uses % "azureml:imagse:1", "data asset 'imagse'", "images", "data"),
        (spec + uses % "azureml:imagse@latest", "data asset 'imagse'", "images", "data"),
        (spec + "environment: azureml:torch-cpux:1\n", "environment 'torch-cpux'",
         "torch-cpu", "environment"),
    ]  # fmt: skip
    for given, what, meant, group in wrong:
        if isinstance(given, str):
            cli.write("job.yml", given)
            given = ("job", "validate", "-f", "job.yml")
        line = _one_error(cli, *given)
        assert f"{what} not found; did you mean '{meant}'?" in line, line
        assert line.endswith(f"`phalanx {group} list` shows them{_where(cli)}"), line
        assert "create" not in line and "ray" not in line.lower(), line
        assert str(cli.home) not in line or cli.server is None, line
    # A right name is never "not found; did you mean" itself: the built-in local, never
    # registered, is what deleting it leaves (before: "'local' not found; did you mean
    # 'local'?").
    deleted = cli.run("compute", "delete", "local")
    assert deleted.returncode == 0 and deleted.stderr == "", deleted.stderr
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []


@LOCAL_AND_SERVER
def test_a_100_kb_name_is_never_echoed_back_whole(cli: Cli) -> None:
    """A name or path of 100 KB in a verb or a spec: one short line, no traceback; the
    server's 4xx body quotes it short too."""
    huge = "a" * 100_000
    verbs = [
        ("compute", "show", huge),
        ("datastore", "show", huge),
        ("model", "show", huge),
        ("data", "show", huge),
        ("environment", "show", huge),
        ("job", "show", huge),
    ]
    for args in verbs:
        assert len(_one_error(cli, *args)) < 1000, args[:2]
    for spec in (f"command: echo\ncompute: {huge}\n",
                 f"command: echo\ninputs:\n  d: {{type: uri_folder, path: {huge}}}\n",
                 f"command: echo\ninputs:\n  d: {{type: uri_file, path: 'azureml:{huge}:1'}}\n",
                 f"command: echo\nenvironment: azureml:{huge}:1\n"):  # fmt: skip
        cli.write("job.yml", spec)
        proc = cli.run("job", "validate", "-f", "job.yml")
        assert "Traceback" not in proc.stderr and len(proc.stderr) < 2000, proc.stderr[:300]
    # A value with spaces is no long word: quoted short all the same, in a spec and a --set.
    spaced = "ab " * 40_000
    cli.write("job.yml", f"command: echo\ncompute: '{spaced}'\n")
    for args, says in (
        (("job", "validate", "-f", "job.yml"), "compute target 'ab ab"),
        (("job", "create", "-f", "job.yml", "--set", f"compute={spaced}"), "or a target name"),
        (("job", "create", "-f", "job.yml", "--set", f"experiment_name={spaced}"), "at most 256"),
    ):
        line = _one_error(cli, *args)
        assert len(line) < 1000 and says in line, line[:300]
    if cli.server is not None:
        body = {"spec": f"command: echo\ncompute: {huge}\n", "validate_only": True}
        answer = httpx.post(f"{cli.server.url}/api/v1/jobs", json=body, timeout=60)
        assert answer.status_code == 400 and len(answer.text) < 1000, answer.text[:300]
        assert "compute target 'aaaa" in answer.json()["error"]


def test_a_server_that_never_answered_is_not_waited_for(cli: Cli) -> None:
    """Nothing listens at PHALANX_SERVER: the first connection is refused, so the CLI
    says so at once with the fix, rather than retrying for two minutes. (A server that
    answered once is waited for while it restarts: test_server's killed-mid-stream.)"""
    url = f"http://127.0.0.1:{free_port()}"
    cli.env.update(PHALANX_SERVER=url, PHALANX_HOME=str(cli.home.parent / "laptop"))
    for args in (("job", "list"), ("job", "stream", "some_job")):
        started = time.monotonic()
        line = _one_error(cli, *args)  # before: "retrying…" for 120 s
        assert time.monotonic() - started < 60, args
        assert f"cannot reach the phalanx server at {url} (PHALANX_SERVER)" in line, line
        assert "phalanx server start" in line and "retrying" not in line, line
