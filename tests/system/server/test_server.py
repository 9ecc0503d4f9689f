"""The phalanx server: real server processes, real HTTP, the CLI as a remote client."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

import servers
from conftest import PHALANX, Cli
from phalanx.workspace import Workspace

pytestmark = pytest.mark.slow

COUNT = """
import os, sys, time
n = int(sys.argv[1])
for i in range(n):
    print(f"line {i}", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture
def token(cli: Cli) -> str:
    """A token for alice, made on the server's machine as an admin would."""
    proc = cli.run("server", "token", "create", "--user", "alice", "--name", "alice-laptop")
    assert proc.returncode == 0, proc.stderr
    assert "not shown again" in proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def authed(cli: Cli, token: str) -> Iterator[servers.PhalanxServer]:
    """A server on the test's workspace that asks for tokens; the CLI uses alice's."""
    server = servers.start_phalanx_server(cli.home, cli.env, "--auth", "--workers", "2")
    cli.env.update(
        PHALANX_SERVER=server.url, PHALANX_TOKEN=token, PHALANX_HOME=str(cli.home.parent / "lap")
    )
    yield server
    servers.kill_phalanx_server(server)


def _api(server: servers.PhalanxServer, token: str | None = None) -> httpx.Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url + "/api/v1", headers=headers, timeout=60)


def test_tokens_wrong_or_missing_get_the_same_401_and_are_kept_hashed(
    cli: Cli, token: str, authed: servers.PhalanxServer
) -> None:
    with _api(authed) as anon:
        assert anon.get("/health").status_code == 200  # health needs no token
        missing = anon.get("/jobs")
    with _api(authed, token + "x") as wrong:
        bad = wrong.get("/jobs")
    with _api(authed, "Basic abc") as other:
        scheme = other.get("/jobs")
    assert missing.status_code == bad.status_code == scheme.status_code == 401
    assert missing.json() == bad.json() == scheme.json()
    with _api(authed, token) as ok:
        assert ok.get("/whoami").json() == {"user": "alice", "role": "admin", "auth": True}
    # The token opens the server, so no file of the workspace holds it.
    for path in cli.home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    # The CLI through the server; the job records who created it.
    cli.write("src/count.py", COUNT)
    spec = cli.write("job.yml", "command: python count.py 2 0\ncode: src\n")
    name = cli.create(spec)
    job = cli.wait(name, ("Completed",))
    assert job["created_by"] == "alice"
    # On the server's machine: names and users, never a token.
    env = {**cli.env, "PHALANX_HOME": str(cli.home)}
    env.pop("PHALANX_SERVER")
    listed = subprocess.run(
        [PHALANX, "server", "token", "list"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "alice-laptop" in listed and "alice" in listed and token not in listed
    # Revoked: refused from the next request on, with the fix in the CLI's one line.
    subprocess.run([PHALANX, "server", "token", "revoke", "alice-laptop"], env=env, check=True)
    proc = cli.run("job", "list")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: the server at") and "PHALANX_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_non_loopback_server_refuses_to_start_without_auth(cli: Cli) -> None:
    proc = cli.run("server", "start", "--host", "0.0.0.0", "--no-auth", timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "without auth" in proc.stderr
    proc = cli.run("server", "start", "--host", "0.0.0.0", timeout=30)
    assert proc.returncode == 2
    assert "phalanx server token create" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli.run("server", "start", "--workers", "0", timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--workers must be between 1 and 64" in proc.stderr


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _entry(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 2
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = size if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "says"),
    [
        ((_entry("0/../../evil.py"), b"x\n"), "escapes its folder"),
        ((_entry("/tmp/evil.py"), b"x\n"), "escapes its folder"),
        ((_entry("0/link", tarfile.SYMTYPE, "/etc/passwd"), None), "points outside"),
        ((_entry("0/up", tarfile.SYMTYPE, "../../x"), None), "points outside"),
        ((_entry("0/hard", tarfile.LNKTYPE, "0/a"), None), "hard link"),
        ((_entry("0/fifo", tarfile.FIFOTYPE), None), "not a file or folder"),
    ],
)
def test_an_upload_that_escapes_its_folder_is_refused(
    cli: Cli, token: str, authed: servers.PhalanxServer, member: tuple, says: str
) -> None:
    archive = _tar((_entry("0/a"), b"a\n"), member)
    with _api(authed, token) as api:
        upload = api.put("/uploads", content=archive).json()["upload"]
        answer = api.post(
            "/jobs",
            json={"spec": "command: python a\ncode: src\n", "upload": upload,
                  "places": {"code": "0"}},
        )  # fmt: skip
    assert answer.status_code == 400
    assert says in answer.json()["error"] and member[0].name in answer.json()["error"]
    assert not (cli.home.parent / "evil.py").exists() and not Path("/tmp/evil.py").exists()
    assert not list((cli.home / "server" / "bundles").iterdir())  # nothing kept
    uploads = cli.home / "server" / "uploads"
    assert not [p for p in uploads.rglob("*") if p.is_file()]  # the upload is used up


def test_uploads_over_the_limit_are_refused_packed_or_unpacked(cli: Cli, token: str) -> None:
    server = servers.start_phalanx_server(cli.home, cli.env, "--auth", "--max-upload", "1Mi")
    try:
        with _api(server, token) as api:
            big = api.put("/uploads", content=os.urandom(2 << 20))
            assert big.status_code == 413 and "--max-upload" in big.json()["error"]
            # 8 MiB of zeros pack into a few KiB: the unpacked size counts too.
            bomb = _tar((_entry("0/zeros", size=8 << 20), bytes(8 << 20)))
            assert len(bomb) < 100_000
            upload = api.put("/uploads", content=bomb).json()["upload"]
            answer = api.post(
                "/jobs",
                json={"spec": "command: x\ncode: src\n", "upload": upload,
                      "places": {"code": "0"}},
            )  # fmt: skip
            assert answer.status_code == 413 and "unpack to more than 1 MiB" in answer.text
            # A place outside the spec's file fields is refused too.
            upload = api.put("/uploads", content=_tar((_entry("0/a"), b"a\n"))).json()["upload"]
            answer = api.post(
                "/jobs",
                json={"spec": "command: x\n", "upload": upload, "places": {"command": "0/a"}},
            )
            assert answer.status_code == 400 and "'command' is not a spec field" in answer.text
    finally:
        servers.kill_phalanx_server(server)


def test_malformed_requests_get_4xx_with_the_clis_one_line(
    cli: Cli, token: str, authed: servers.PhalanxServer
) -> None:
    with _api(authed, token) as api:
        missing = api.post("/jobs", json={"source": "job.yml"})
        assert missing.status_code == 422
        assert missing.json()["error"] == "bad request: spec: Field required"
        bad = api.post(
            "/jobs",
            json={"spec": "command: x\nresources: {instance_count: 0}\n", "source": "j.yml"},
        )
        assert bad.status_code == 422
        assert bad.json()["error"].startswith("j.yml:2: resources.instance_count:")
        unknown = api.get("/jobs/no_such_job")
        assert unknown.status_code == 404
        assert (
            unknown.json()["error"]
            == "job 'no_such_job' not found; `phalanx job list` shows the jobs"
        )
        offsets = api.get("/jobs/no_such_job/logs", params={"at": "x"})
        assert offsets.status_code == 422
        not_json = api.post("/jobs", content=b"{", headers={"content-type": "application/json"})
        assert not_json.status_code == 422 and not_json.json()["error"].startswith("bad request")
        doc = api.get("/openapi.json").json()
    assert "/api/v1/jobs" in doc["paths"] and "/api/v1/jobs/{name}/logs" in doc["paths"]
    # The CLI prints the server's line for a spec problem, every one with validate.
    spec = cli.write("job.yml", "command: x\nresources: {instance_count: 0}\n")
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2 and "resources.instance_count" in proc.stderr


def test_a_job_from_a_laptop_outlives_the_laptop_and_reads_its_files(
    cli: Cli, authed: servers.PhalanxServer, tmp_path: Path
) -> None:
    laptop = tmp_path / "laptop-home"
    project = laptop / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text(
        "import pathlib, sys, time\n"
        "text = (pathlib.Path(sys.argv[1]) / 'labels.txt').read_text()\n"
        "print('input says', text.strip(), flush=True)\n"
        "time.sleep(4)\n"
        "print('done', flush=True)\n"
    )
    (project / "src" / ".amlignore").write_text("junk/\n")
    (project / "src" / "junk").mkdir()
    (project / "src" / "junk" / "big.bin").write_bytes(b"0" * 1000)
    (project / "data").mkdir()
    (project / "data" / "labels.txt").write_text("cat dog\n")
    (project / "job.yml").write_text(
        "command: python train.py ${{inputs.data}}\ncode: src\n"
        "inputs:\n  data: {type: uri_folder, path: data, mode: download}\n"
    )
    env = {**cli.env, "HOME": str(laptop), "XDG_CONFIG_HOME": str(laptop / ".config")}
    proc = subprocess.run(
        [PHALANX, "job", "create", "-f", "job.yml"], cwd=project, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    name = proc.stdout.strip()
    shutil.rmtree(laptop)  # the laptop, its home and its project are gone
    job = cli.wait(name, ("Completed", "Failed"), timeout=120)
    assert job["status"] == "Completed", job
    log = (cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt").read_text()
    assert "input says cat dog" in log and "done" in log
    code = cli.home / "jobs" / name / "code"
    assert (code / "train.py").is_file() and not (code / "junk").exists()


def test_a_server_killed_mid_stream_loses_no_job_and_no_line(
    cli: Cli, token: str, authed: servers.PhalanxServer
) -> None:
    cli.write("src/count.py", COUNT)
    spec = cli.write("job.yml", "command: python count.py 40 0.2\ncode: src\n")
    name = cli.create(spec)
    stream = cli.popen("job", "stream", name)
    cli.wait(name, ("Running",))
    time.sleep(2)
    workers = servers.serving_processes(authed)
    assert len(workers) == 2
    os.kill(authed.proc.pid, signal.SIGKILL)  # the server dies; the job's processes do not
    authed.proc.wait()
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive  # its serving processes end with it: nothing holds the port
    time.sleep(2)
    restarted = servers.start_phalanx_server(cli.home, cli.env, "--auth", port=authed.port)
    try:
        out, err = stream.communicate(timeout=120)
        assert stream.returncode == 0, err
        lines = [ln for ln in out.splitlines() if ln.startswith("line ")]
        assert lines == [f"line {i}" for i in range(40)]  # none lost, none twice
        assert "unreachable; retrying" in err and "connected again" in err
        job = cli.show(name)
        assert job["status"] == "Completed" and len(job["attempts"]) == 1
    finally:
        servers.kill_phalanx_server(restarted)


def test_login_saves_the_server_and_token_for_the_user_only(
    cli: Cli, token: str, authed: servers.PhalanxServer
) -> None:
    env = {k: v for k, v in cli.env.items() if k not in ("PHALANX_SERVER", "PHALANX_TOKEN")}
    bad = subprocess.run(
        [PHALANX, "login", authed.url, "--token", "phx_wrong"], env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "wants a valid API token" in bad.stderr
    proc = subprocess.run(
        [PHALANX, "login", authed.url, "--token", token], env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "as alice" in proc.stdout
    saved = Path(env["XDG_CONFIG_HOME"]) / "phalanx" / "server.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    assert json.loads(saved.read_text())["server"] == authed.url
    listed = subprocess.run(
        [PHALANX, "job", "list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    assert not Path(env["PHALANX_HOME"]).exists()  # the laptop's own workspace is never made
    out = subprocess.run(
        [PHALANX, "logout"], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert not saved.exists() and str(saved) in out.stdout + out.stderr
    local = subprocess.run(
        [PHALANX, "job", "list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert local.returncode == 0 and json.loads(local.stdout) == []
    assert Path(env["PHALANX_HOME"]).exists()  # back on the laptop's own workspace


def test_tls_with_the_servers_own_certificate(cli: Cli, token: str, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    half = cli.run("server", "start", "--tls-cert", str(cert), timeout=30)
    assert half.returncode == 2 and "--tls-key" in half.stderr
    server = servers.start_phalanx_server(
        cli.home, cli.env, "--auth", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    try:
        env = {
            **cli.env,
            "PHALANX_SERVER": f"https://127.0.0.1:{server.port}",
            "PHALANX_TOKEN": token,
            "PHALANX_HOME": str(tmp_path / "lap"),
            "PHALANX_SERVER_RETRY_S": "0",
        }
        untrusted = subprocess.run(
            [PHALANX, "job", "list"], env=env, capture_output=True, text=True, timeout=60
        )
        assert untrusted.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        assert "Traceback" not in untrusted.stderr
        trusted = subprocess.run(
            [PHALANX, "job", "list", "--json"], env={**env, "SSL_CERT_FILE": str(cert)},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert trusted.returncode == 0, trusted.stderr
        assert json.loads(trusted.stdout) == []
    finally:
        servers.kill_phalanx_server(server)


def test_server_start_db_keeps_every_record_in_postgresql(cli: Cli, pg_url: str) -> None:
    server = servers.start_phalanx_server(cli.home, cli.env, "--db", pg_url, "--workers", "2")
    cli.env.update(PHALANX_SERVER=server.url, PHALANX_HOME=str(cli.home.parent / "lap"))
    try:
        spec = cli.write("job.yml", "command: echo from-postgres\n")
        name = cli.create(spec)
        job = cli.wait(name, ("Completed", "Failed", "Canceled"))
        assert job["status"] == "Completed", job
    finally:
        servers.kill_phalanx_server(server)
    assert not (cli.home / "phalanx.db").exists()  # nothing went to SQLite
    records = Workspace(cli.home, db=pg_url)
    assert [j.name for j in records.list_jobs()] == [name]
    log = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    assert "from-postgres" in log.read_text()
    password = urlsplit(pg_url).password
    assert password and password not in server.log.read_text()
