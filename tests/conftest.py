"""Shared fixtures: a private workspace per test and the CLI run as users run it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

# The suites: tests/unit/<package>/ (no job, no server, no container: `make check`) and
# tests/system/<suite>/. Their modules keep unique names and share scripts and helpers by
# importing one another by name (``from test_distributions import TF_SCRIPT``): every
# suite's folder is on the path, as the folder of a module pytest collects is.
TESTS = Path(__file__).resolve().parent
for _suite in sorted(TESTS.glob("*/*/")):
    if _suite.is_dir() and str(_suite) not in sys.path:
        sys.path.append(str(_suite))

import jobpython  # noqa: E402
import pg  # noqa: E402
import servers  # noqa: E402
from phalanx.bench import raycluster  # noqa: E402

pytest_plugins = ("budgets",)  # time per suite against its budget, after every run

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")
REPO = TESTS.parent


# What a launcher sets; a test's own process must not pass them on by accident.
LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without launcher variables, for CPU gloo runs."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


def torchrun(
    script: Path, *args: str, nproc: int = 2, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` under plain torchrun with ``nproc`` ranks on a free port.

    A hung child fails the test through the timeout rather than hanging pytest.
    """
    from phalanx.launch.ports import free_port

    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", "--max-restarts=0",
        str(script), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=timeout)


def job_processes_under(home: Path) -> list[psutil.Process]:
    """Live processes whose environment says they belong to a job of ``home``."""
    found = []
    for proc in psutil.process_iter():
        try:
            job_dir = proc.environ().get("PHALANX_JOB_DIR", "")
            if job_dir.startswith(str(home)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def workspace_processes(home: Path) -> list[psutil.Process]:
    """phalanx's own processes of the workspace ``home`` (scheduler, supervisors, probes)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PHALANX_HOME") == str(home) and "phalanx." in " ".join(
                proc.cmdline()
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@dataclass
class Cli:
    """Runs ``phalanx`` in a subprocess against a private ``PHALANX_HOME``."""

    home: Path
    env: dict[str, str]
    workdir: Path
    server: servers.PhalanxServer | None = None
    """The server every command goes through, when the test runs through one."""
    server_args: tuple[str, ...] = ()
    """What the server was started with (again on a restart)."""

    def export(self, **variables: str) -> None:
        """Set variables where the workspace is: this CLI's environment and, through a
        server, the server's (restarted with them, on the same port)."""
        self.env.update(variables)
        self._restart_server()

    def unexport(self, *names: str) -> None:
        """Unset variables where the workspace is (see :meth:`export`)."""
        for name in names:
            self.env.pop(name, None)
        self._restart_server()

    def _restart_server(self) -> None:
        if self.server is not None:
            servers.kill_phalanx_server(self.server)
            self.server = servers.start_phalanx_server(
                self.home, self.env, *self.server_args, port=self.server.port
            )

    def run(
        self, *args: str, timeout: float = 120, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [PHALANX, *args],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"phalanx {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def run_input(
        self, stdin: str, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run with ``stdin`` as standard input (how secrets are piped in)."""
        return subprocess.run(
            [PHALANX, *args],
            env=self.env,
            cwd=self.workdir,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [PHALANX, *args],
            env=self.env,
            cwd=self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def show(self, name: str) -> dict[str, Any]:
        """``job show --json``; through a server, with the job's paths on the server.

        Through a server ``job show`` names no path of the server's disk
        (tests/system/jobs/test_job_download.py checks that); a test that looks into the job's
        folder finds it where this test's server keeps it."""
        shown: dict[str, Any] = json.loads(
            self.run("job", "show", name, "--json", check=True).stdout
        )
        if self.server is not None and shown.get("job_dir") is None:
            root = self.home / "jobs" / name
            shown.update(job_dir=str(root), outputs_dir=str(root / "outputs"),
                         checkpoint_dir=str(root / "checkpoints"))  # fmt: skip
            for kind in ("user_logs", "system_logs"):
                shown[kind] = [str(root / rel) for rel in shown.get(kind) or []]
        return shown

    def create(self, spec: Path, *sets: str) -> str:
        args = ["job", "create", "-f", str(spec)]
        for item in sets:
            args += ["--set", item]
        return self.run(*args, check=True).stdout.strip()

    def wait(self, name: str, statuses: tuple[str, ...], timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.show(name)
            if job["status"] in statuses:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {name} still {job['status']} after {timeout} s: {job}")
            time.sleep(0.2)

    def write(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
        return path


def blob_datastore(
    cli: Cli, azurite: servers.Azurite, files: dict[str, bytes] | None = None, name: str = "blobs"
) -> str:
    """A fresh Azurite container (holding ``files``) and the datastore ``name`` on it, its
    key read from a variable as a user would give it; returns the container's name."""
    container = f"c{uuid.uuid4().hex[:12]}"
    azurite.container(container)
    if files:
        azurite.upload(container, files)
    cli.export(AZ_KEY=servers.AZURITE_KEY)
    cli.run(
        "datastore", "create", "--name", name, "--type", "azure_blob",
        "--account-name", servers.AZURITE_ACCOUNT, "--container-name", container,
        "--endpoint", azurite.endpoint, "--credential-env", "AZ_KEY", check=True,
    )  # fmt: skip
    return container


@pytest.fixture(scope="session", autouse=True)
def _built_images_removed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The images the session's jobs build (``phalanx-env:<key>``) are removed at its end:
    those a workspace or Ray node of its tests recorded a use of, and that were not on the
    machine when it began (a session running beside this one keeps its own)."""
    from phalanx.environments.containers.build import LABEL, TAG, USED
    from phalanx.environments.containers.engine import find_engine
    from phalanx.errors import PhalanxError

    try:
        engine = find_engine()
        listed = engine.run(["images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=60)
    except PhalanxError:
        listed = None  # no engine (or none answering): nothing is built
    if listed is None or listed.returncode != 0:
        yield
        return
    before = {line.strip().removeprefix("localhost/") for line in listed.stdout.splitlines()}
    yield
    base = tmp_path_factory.getbasetemp()
    records = [
        record
        for folder in ("*/*", "*/*/*")  # a test's workspace; a Ray node's folder
        for record in base.glob(f"{folder}/containers/builds/{TAG}-*{USED}")
    ]
    used = {f"{TAG}:{r.name[len(TAG) + 1 : -len(USED)]}" for r in records}
    made = sorted(used - before)
    if not made:
        return
    with contextlib.suppress(PhalanxError):  # an engine that stopped answering: left as is
        # A build that lost its tag to another of the same content (two Ray "nodes" of
        # one machine build side by side): untagged, found by its label.
        untagged = engine.run(
            ["images", "--filter", "dangling=true", "--filter", f"label={LABEL}",
             "--format", f'{{{{.ID}}}} {{{{index .Labels "{LABEL}"}}}}'],
            timeout=60,
        ).stdout.split("\n")  # fmt: skip
        keys = {tag.partition(":")[2] for tag in made}
        made += [ident for ident, _, key in (ln.partition(" ") for ln in untagged) if key in keys]
        for image in made:
            engine.run(["rmi", image])  # one gone already, or still in use, stays as it is


@pytest.fixture(scope="session", autouse=True)
def _old_workspaces_removed() -> None:
    """Test workspaces outside pytest's folders go when pytest removed their tests' folders."""
    jobpython.remove_orphans()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Azurite]:
    """One Azurite for the session; tests use containers of their own."""
    server = servers.start_azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    servers.stop(server)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[servers.S3Server]:
    """One moto S3 server for the session; tests use buckets of their own."""
    server = servers.start_s3()
    yield server
    servers.stop(server)


@pytest.fixture(scope="session")
def postgres() -> Iterator[pg.Postgres]:
    """One real PostgreSQL for the session; tests use databases of their own."""
    server = pg.start()
    yield server
    pg.stop(server)


@pytest.fixture
def pg_url(postgres: pg.Postgres) -> Iterator[str]:
    """A new, empty PostgreSQL database for this test; its URL (with the password)."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url)


@pytest.fixture(autouse=True)
def _no_outside_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PHALANX_DB of whoever runs the tests never reaches them."""
    monkeypatch.delenv("PHALANX_DB", raising=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The backend a store test runs on: SQLite in the workspace folder, or a fresh
    PostgreSQL database named by PHALANX_DB (as every process of a workspace finds it)."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("pg_url")
    monkeypatch.setenv("PHALANX_DB", url)
    return url


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[raycluster.RayCluster]:
    """A Ray cluster of two nodes (head + worker) on this machine, for the session."""
    cluster = raycluster.start_cluster(tmp_path_factory.mktemp("ray"))
    yield cluster
    raycluster.stop_cluster(cluster)


RAY_TEST_TOKEN = "phalanx-test-" + "0123456789abcdef" * 2  # made up for the test cluster


@pytest.fixture(scope="session")
def ray_token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[raycluster.RayCluster]:
    """A one-node Ray cluster with token authentication (RAY_AUTH_MODE=token)."""
    cluster = raycluster.start_cluster(
        tmp_path_factory.mktemp("ray-auth"), workers=0, token=RAY_TEST_TOKEN
    )
    yield cluster
    raycluster.stop_cluster(cluster)


# Run a CLI test twice: on this machine's workspace, and through a phalanx server.
LOCAL_AND_SERVER = pytest.mark.parametrize("cli", ["local", "server"], indirect=True)


@pytest.fixture
def cli(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cli]:
    """The CLI on a private workspace; on each database backend when the test takes ``db``.

    ``"server"`` as the fixture's parameter
    (``@pytest.mark.parametrize("cli", ["local", "server"], indirect=True)``) puts a
    ``phalanx server`` on that workspace and runs every command through it, from a
    "laptop" whose own ``PHALANX_HOME`` is another, empty folder."""
    home = jobpython.workspace_home(tmp_path)  # reachable by a walled-off job's account
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = dict(os.environ)
    env.update(
        {
            "PHALANX_HOME": str(home),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1",
            "COLUMNS": "200",
            "PHALANX_CACHE_DIR": str(tmp_path / "cache"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
        }
    )
    for name in ("PHALANX_DEBUG", "PHALANX_SERVER", "PHALANX_TOKEN"):
        env.pop(name, None)
    env.pop("PHALANX_DB", None)  # the SQLite file in PHALANX_HOME unless a test says otherwise
    if "db" in request.fixturenames and (url := request.getfixturevalue("db")):
        env["PHALANX_DB"] = url
    server = None
    # Local datastores through the server: in the test's own folder (never the workspace).
    server_args = ("--datastore-root", str(tmp_path))
    if getattr(request, "param", "local") == "server":
        server = servers.start_phalanx_server(home, env, *server_args)
        env.update(PHALANX_SERVER=server.url, PHALANX_HOME=str(tmp_path / "laptop"))
    made = Cli(home, env, workdir, server, server_args)
    yield made
    if made.server is not None:
        servers.kill_phalanx_server(made.server)
        assert not (tmp_path / "laptop").exists(), "a server client wrote a workspace of its own"
    # Whatever a test did, it leaves no process of its jobs behind.
    leftovers = job_processes_under(home)
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    # The workspace's own processes (its scheduler, supervisors still waiting in a queue
    # a failed test left, a Ray target's probe) would outlive the test: they end here.
    for proc in workspace_processes(home):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not leftovers, f"processes left behind: {[p.pid for p in leftovers]}"


@pytest.fixture
def warned() -> Iterator[list[str]]:
    """The warnings phalanx.checkpoint logs during the test."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                lines.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger("phalanx.checkpoint")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)
