"""Job environments: a pip or conda file built once per content into a cached
environment layered on phalanx's, reused by the next job; refusals and notes."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from conftest import Cli

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


def test_cancel_stops_a_build_in_progress(cli: Cli) -> None:
    """pip waits on a package index that accepts connections and never answers; a cancel
    ends the job at once, and no half-built environment or pip process is left."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hang() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])  # read nothing, answer nothing

    threading.Thread(target=hang, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.getsockname()[1]}/simple"
        cli.write("src/env_job.py", SCRIPT)
        cli.write("requirements.txt", f"--index-url {index}\n{PACKAGE}\n")
        name = cli.create(_job(cli, "{pip_file: requirements.txt}"))
        supervisor = cli.home / "jobs" / name / "system_logs" / "supervisor.txt"
        deadline = time.monotonic() + 60
        while not held:  # pip is waiting for the index
            assert time.monotonic() < deadline, "pip never reached the index"
            time.sleep(0.1)
        assert "building" in supervisor.read_text()
        asked = time.monotonic()
        cli.run("job", "cancel", name, check=True)
        job = cli.wait(name, ("Canceled", "Failed", "Completed"), timeout=30)
        assert job["status"] == "Canceled", job
        assert time.monotonic() - asked < 20  # not pip's own timeouts and retries
        assert [p for p in (cli.home / "envs").iterdir() if p.is_dir()] == []
        requirements = str(cli.workdir / "requirements.txt")
        pips = [
            p for p in psutil.process_iter(["cmdline"])
            if requirements in " ".join(p.info["cmdline"] or [])
        ]  # fmt: skip
        assert pips == []
    finally:
        stop.set()
        for conn in held:
            conn.close()
        server.close()


def test_image_that_cannot_be_pulled_is_refused_at_create(cli: Cli) -> None:
    # An image runs the job in a container (tests/test_containers.py); one that is not
    # on the machine and cannot be pulled (no registry is reachable here) is refused.
    cli.write("src/env_job.py", "print('ran')\n")
    spec = _job(cli, "{image: 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest'}")
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(
        "error: environment.image 'mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest' "
        "is not on this machine and cannot be pulled ("
    )
    assert len(proc.stderr.splitlines()) == 1
