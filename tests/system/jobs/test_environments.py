"""Job environments: a pip or conda file built once per content into a cached
environment layered on phalanx's, reused by the next job; refusals and notes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from conftest import PHALANX, Cli
from silentindex import silent_index

# pyfiglet: small, pure Python, and not among phalanx's own packages.
PACKAGE = "pyfiglet==1.0.4"

SCRIPT = """
import json, os, subprocess, sys
import pyfiglet, torch, phalanx
# The package's console script runs too (its #! line names the environment's python).
cli = subprocess.run(["pyfiglet", "--version"], capture_output=True, text=True)
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "env.json")
open(out, "w").write(json.dumps({"prefix": sys.prefix, "pyfiglet": pyfiglet.__file__,
                                 "torch": torch.__version__, "rank": os.environ["RANK"],
                                 "cli": cli.returncode, "cli_out": cli.stdout + cli.stderr}))
"""


def _job(cli: Cli, environment: str) -> Path:
    return cli.write(
        "job.yml",
        f"""
        command: python env_job.py
        code: src
        environment: {environment}
        limits: {{timeout: 180}}
        """,
    )


def test_pip_file_is_built_once_and_reused(cli: Cli) -> None:
    assert subprocess.run([sys.executable, "-c", "import pyfiglet"]).returncode != 0
    cli.write("src/env_job.py", SCRIPT)
    cli.write("requirements.txt", "# extra packages, from an included file\n-r common.txt\n")
    cli.write("common.txt", f"{PACKAGE}\n")
    spec = _job(cli, "{pip_file: requirements.txt}")
    prefixes = []
    for first in (True, False):
        name = cli.create(spec)
        job = cli.wait(name, ("Completed", "Failed"), timeout=180)
        assert job["status"] == "Completed", job
        seen = json.loads((Path(job["job_dir"]) / "outputs" / "env.json").read_text())
        assert seen["pyfiglet"].startswith(seen["prefix"])  # from the job's environment
        assert seen["torch"]  # phalanx's packages importable through the layer
        assert seen["cli"] == 0 and "1.0.4" in seen["cli_out"], seen
        prefixes.append(seen["prefix"])
        supervisor = (Path(job["job_dir"]) / "system_logs" / "supervisor.txt").read_text()
        assert ("building" in supervisor) is first and ("reused" in supervisor) is not first
    assert prefixes[0] == prefixes[1]
    envs = [p for p in (cli.home / "envs").iterdir() if p.is_dir()]
    assert [str(p) for p in envs] == [prefixes[0]]

    # Another content (of the included file), another environment.
    cli.write("common.txt", f"{PACKAGE}\n# changed\n")
    name = cli.create(spec)
    assert cli.wait(name, ("Completed", "Failed"), timeout=180)["status"] == "Completed"
    assert len([p for p in (cli.home / "envs").iterdir() if p.is_dir()]) == 2


def test_conda_file_pip_section_without_conda(cli: Cli) -> None:
    cli.write("src/env_job.py", SCRIPT)
    cli.write(
        "conda.yml",
        f"""
        name: extra
        channels: [conda-forge]
        dependencies:
          - python={sys.version_info.major}.{sys.version_info.minor}
          - pip
          - pip:
            - {PACKAGE}
        """,
    )
    name = cli.create(_job(cli, "{conda_file: conda.yml}"))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job

    cli.write("conda.yml", "dependencies:\n  - numpy=1.26\n  - pip:\n    - six\n")
    refused = cli.run("job", "create", "-f", str(_job(cli, "{conda_file: conda.yml}")))
    assert refused.returncode == 2
    assert "conda packages (numpy=1.26)" in refused.stderr and "no conda" in refused.stderr
    cli.write("conda.yml", "dependencies:\n  - python=2.7\n")
    refused = cli.run("job", "create", "-f", str(_job(cli, "{conda_file: conda.yml}")))
    assert refused.returncode == 2 and "python=2.7" in refused.stderr


def test_a_failed_build_fails_the_job_and_leaves_nothing(cli: Cli) -> None:
    cli.write("src/env_job.py", SCRIPT)
    cli.write("requirements.txt", "phalanx-no-such-package-anywhere==9.9\n")
    name = cli.create(_job(cli, "{pip_file: requirements.txt}"))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Failed"
    message = job["error"]["message"]
    assert message.startswith("environment: pip install failed") and "environment.txt" in message
    assert "phalanx-no-such-package-anywhere" in message
    assert [p for p in (cli.home / "envs").iterdir() if p.is_dir()] == []

    missing = cli.run("job", "create", "-f", str(_job(cli, "{pip_file: nope.txt}")))
    assert missing.returncode == 2 and "environment.pip_file: file" in missing.stderr


def test_a_build_shows_its_step_a_second_job_waits_for_it_and_cancel_stops_it(
    cli: Cli,
) -> None:
    """pip waits on a package index that accepts connections and never answers. The job
    says what it builds (`job stream`, `job show`, the API's record) with pip's last line
    and its log, a job asking for the same environment says whose build it waits for,
    the index's password shows nowhere, and a cancel ends the job at once, leaving no
    half-built environment or pip process."""
    secret = "t0k3n-" + uuid.uuid4().hex[:12]
    with silent_index() as index:
        cli.write("src/env_job.py", SCRIPT)
        url = index.url.replace("http://", f"http://build:{secret}@")
        # pyyaml is phalanx's own: pip says where it found it before it waits on the index.
        cli.write("requirements.txt", f"--index-url {url}\npyyaml\n{PACKAGE}\n")
        spec = _job(cli, "{pip_file: requirements.txt}")
        name = cli.create(spec)
        stream = subprocess.Popen(
            [PHALANX, "job", "stream", name], env=cli.env, cwd=cli.workdir,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not index.held:  # pip is waiting for the index
                assert time.monotonic() < deadline, "pip never reached the index"
                time.sleep(0.1)
            supervisor = cli.home / "jobs" / name / "system_logs" / "supervisor.txt"
            assert "building" in supervisor.read_text()
            # The build's output is the job's system log; its last line is the progress.
            log_path = cli.home / "jobs" / name / "system_logs" / "environment.txt"
            building = "building environment from requirements.txt (pip, first use)"
            shown = _shown(cli, name, "Requirement already satisfied: pyyaml in")
            assert f"its log {log_path}" in shown, shown
            log = log_path.read_text()
            assert "Looking in indexes" in log
            step = shown[shown.index(building) :].split(" its log ")[0]
            # The record every member and viewer of a server reads names no path of the
            # machine's disk (the log keeps them).
            last = log.strip().splitlines()[-1].strip()
            assert last.startswith("Requirement already satisfied: pyyaml in /"), last
            progress = step.split(" · ")[2]
            assert progress.startswith("Requirement already satisfied: pyyaml in …/site-packages")
            assert "/requirements.txt (line 2)" in last and "…/requirements.txt" in progress
            assert sys.prefix not in progress and str(cli.home) not in progress, progress

            waiting = cli.create(spec)  # the same environment: it waits for the first's build
            whose = f"being built by job {name}"
            words = f"waiting for environment from requirements.txt (pip), {whose}"
            note = _note(cli, waiting, lambda n: n.get("reason") == words)
            assert note["progress"] is None and note["log"] is None  # no output of its own

            cli.run("job", "cancel", waiting, check=True)
            asked = time.monotonic()
            cli.run("job", "cancel", name, check=True)
            job = cli.wait(name, ("Canceled", "Failed", "Completed"), timeout=30)
            assert job["status"] == "Canceled", job
            # Not pip's own timeouts and retries (minutes); a bound against a hang only.
            assert time.monotonic() - asked < 60
            assert job["queue"] is None  # the step went with the Preparing status
            out, _ = stream.communicate(timeout=30)
        finally:
            stream.kill()
    assert building in " ".join(out.split()) and "Canceled" in out, out
    assert secret not in out + shown + json.dumps(note) + log
    assert [p for p in (cli.home / "envs").iterdir() if p.is_dir()] == []
    requirements = str(cli.workdir / "requirements.txt")
    pips = [
        p for p in psutil.process_iter(["cmdline"])
        if requirements in " ".join(p.info["cmdline"] or [])
    ]  # fmt: skip
    assert pips == []


def _shown(cli: Cli, name: str, until: str) -> str:
    """``job show NAME`` (its words, one space between each) once it holds ``until``."""
    deadline = time.monotonic() + 30
    while True:
        shown = " ".join(cli.run("job", "show", name, check=True).stdout.split())
        if until in shown:
            return shown
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)


def _note(cli: Cli, name: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """What the Preparing job ``name`` says it does, once ``ready`` says it is there."""
    deadline = time.monotonic() + 30
    while True:
        job = cli.show(name)
        note = job["queue"] or {}
        if job["status"] == "Preparing" and ready(note):
            return note
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def test_image_that_cannot_be_pulled_is_refused_at_create(cli: Cli) -> None:
    # An image runs the job in a container (tests/system/containers/test_containers.py);
    # one that is not on the machine and cannot be pulled (no registry here) is refused.
    cli.write("src/env_job.py", "print('ran')\n")
    spec = _job(cli, "{image: 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest'}")
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(
        "error: environment.image 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest' "
        "is not on this machine and cannot be pulled ("
    )
    assert len(proc.stderr.splitlines()) == 1
