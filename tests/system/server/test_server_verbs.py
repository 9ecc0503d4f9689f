"""The verbs other than `job` through a real phalanx server: no credential in any answer
or in the server's log, downloads checked file by file, a local data path uploaded and
read by a job after the laptop's copy is gone, the job files route kept inside the job's
folder, every route behind a token, and TensorBoard on a downloaded copy."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import sqlite3
import stat
import tarfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

import servers
from conftest import LOCAL_AND_SERVER, Cli
from phalanx.launch.ports import free_port
from servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite

pytestmark = pytest.mark.slow

# The CLI of these tests talks to a server on the test's workspace (see the `cli` fixture).
SERVER = pytest.mark.parametrize("cli", ["server"], indirect=True)


def _api(cli: Cli, token: str | None = None) -> httpx.Client:
    assert cli.server is not None
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=cli.server.url + "/api/v1", headers=headers, timeout=60)


def _azure(azurite: Azurite, name: str, container: str, *auth: str) -> list[str]:
    return [
        "datastore", "create", "--name", name, "--type", "azure_blob",
        "--account-name", AZURITE_ACCOUNT, "--container-name", container,
        "--endpoint", azurite.endpoint, *auth,
    ]  # fmt: skip


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@SERVER
def test_no_credential_in_any_answer_or_the_servers_log(cli: Cli, azurite: Azurite) -> None:
    container = f"c{uuid.uuid4().hex[:12]}"
    azurite.container(container)
    azurite.upload(container, {"data/a.txt": b"alpha"})
    sas = azurite.sas(container, "rl")
    token = "tok-" + uuid.uuid4().hex * 2
    wrong = azurite.connection_string.replace(AZURITE_KEY[:12], "B" * 12)

    # Piped in: sent once, kept in the server's secrets file.
    args = _azure(azurite, "stored", container, "--auth", "account_key", "--store")
    stored = cli.run_input(AZURITE_KEY + "\n", *args)
    assert stored.returncode == 0, stored.stderr
    # Named: a variable of the server's environment.
    cli.export(MY_SAS=sas)
    cli.run(*_azure(azurite, "sas", container, "--auth", "sas_token", "--credential-env",
                    "MY_SAS"), check=True)  # fmt: skip
    # Refused by the store: the value is not echoed back.
    denied = cli.run_input(wrong + "\n", *_azure(azurite, "bad", container, "--auth",
                                                 "connection_string", "--store"))  # fmt: skip
    assert denied.returncode == 2 and "access denied" in denied.stderr
    assert denied.stderr.count("\n") == 1
    made = cli.run_input(token + "\n", "compute", "create", "--name", "later", "--address",
                         "ray://head.example:10001", "--store-token", "--no-check")  # fmt: skip
    assert made.returncode == 0, made.stderr
    # Used through the server.
    listing = cli.run("datastore", "ls", "stored", "data", "--json", check=True).stdout
    assert json.loads(listing) == [{"name": "a.txt", "type": "file", "size": 5}]
    cli.run("data", "create", "--name", "d", "--path", "azureml://datastores/sas/paths/data",
            check=True)  # fmt: skip
    outputs = [stored.stdout, stored.stderr, denied.stdout, made.stdout, listing]
    for args in (["datastore", "list"], ["datastore", "show", "stored"],
                 ["datastore", "show", "sas", "--json"], ["compute", "show", "later"],
                 ["compute", "list", "--json"], ["data", "show", "d"]):  # fmt: skip
        outputs.append(cli.run(*args, check=True).stdout)
    assert "stored in the secrets file" in outputs[6]
    assert "environment variable MY_SAS" in outputs[7]

    answers = []
    with _api(cli) as api:
        for path in ("/datastores", "/datastores/stored", "/datastores/sas", "/datastores/bad",
                     "/datastores/stored/ls", "/data", "/data/d", "/compute", "/compute/later",
                     "/queue", "/openapi.json"):  # fmt: skip
            answer = api.get(path)
            assert answer.status_code in (200, 400), (path, answer.text)
            answers.append(answer.text)
    assert cli.server is not None
    log = cli.server.log.read_text()
    for secret in (AZURITE_KEY, sas, token, wrong):
        for text in [*outputs, *answers, log]:
            assert secret not in text
    # Stored values are in the server's 0600 secrets file and in no other file of it.
    secrets = cli.home / "secrets.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    kept = secrets.read_text()
    assert AZURITE_KEY in kept and token in kept and sas not in kept and wrong not in kept
    for path in cli.home.rglob("*"):
        if path.is_file() and path != secrets:
            for secret in (AZURITE_KEY, sas, token, wrong):
                assert secret.encode() not in path.read_bytes(), path


def _model_dir(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "weights.pt").write_bytes(os.urandom(200_000))
    (root / "sub" / "config.json").write_text('{"depth": 50}')
    return root


@SERVER
def test_a_download_is_checked_file_by_file_and_only_recorded_files_are_served(
    cli: Cli, tmp_path: Path
) -> None:
    src = _model_dir(tmp_path / "model")
    made = cli.run("model", "create", "--name", "m", "--path", str(src), check=True).stdout
    assert "m:1 registered: 2 file(s)" in made
    shown = json.loads(cli.run("model", "show", "m", "--json", check=True).stdout)
    assert shown["source"] == str(src)  # the client's path, not the server's staging copy
    folder = Path(shown["folder"])
    assert not (cli.home / "server" / "staging").exists() or not any(
        (cli.home / "server" / "staging").iterdir()
    )

    dest = tmp_path / "dl"
    cli.run("model", "download", "m", "--dest", str(dest), check=True)
    for f in shown["files"]:
        assert _sha((dest / f["path"]).read_bytes()) == f["sha256"]

    # The server's copy altered (same size, other bytes): nothing is written here.
    kept = folder / "sub" / "config.json"
    kept.chmod(0o644)
    kept.write_text('{"depth": 18}')
    dest2 = tmp_path / "dl2"
    proc = cli.run("model", "download", "m", "--dest", str(dest2))
    assert proc.returncode == 2 and "no longer matches its sha256" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert [p for p in dest2.rglob("*")] == []

    with _api(cli) as api:
        good = api.get("/models/m/file", params={"path": "weights.pt", "version": "1"})
        assert good.status_code == 200 and good.content == (src / "weights.pt").read_bytes()
        for path in ("../../phalanx.db", "secrets.json", "sub", "/etc/passwd", ""):
            refused = api.get("/models/m/file", params={"path": path})
            assert refused.status_code == 400, (path, refused.text)
            assert "has no file" in refused.json()["error"]
        # A record altered to name a file outside the version's folder is not served.
        with sqlite3.connect(cli.home / "phalanx.db") as db:
            db.execute(
                "UPDATE models SET files_json = ? WHERE name = 'm'",
                (json.dumps([{"path": "../../../phalanx.db", "size": 1, "sha256": "0" * 64}]),),
            )
        outside = api.get("/models/m/file", params={"path": "../../../phalanx.db"})
        assert outside.status_code == 400 and "inside its folder" in outside.json()["error"]
        assert b"SQLite" not in outside.content


READ = """
import os
print(open(os.environ["PHALANX_INPUT_D"] + "/sub/b.txt").read())
"""


@SERVER
def test_a_local_data_path_is_uploaded_and_read_by_a_job_once_the_laptop_copy_is_gone(
    cli: Cli, tmp_path: Path
) -> None:
    folder = tmp_path / "mydata"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("alpha")
    (folder / "sub" / "b.txt").write_text("beta")
    made = cli.run("data", "create", "--name", "mine", "--path", str(folder), check=True)
    assert "azureml:mine:1 created" in made.stdout
    shown = json.loads(cli.run("data", "show", "mine", "--json", check=True).stdout)
    prefix = "azureml://datastores/default/paths/uploads/"
    assert shown["path"].startswith(prefix) and shown["type"] == "uri_folder"
    kept = cli.home / "datastore" / "uploads" / shown["path"].removeprefix(prefix)
    assert (kept / "sub" / "b.txt").read_text() == "beta"
    shutil.rmtree(folder)

    odd = tmp_path / "my table?.csv"
    odd.write_text("x,y\n")
    cli.run("data", "create", "--name", "one", "--type", "uri_file", "--path", str(odd),
            check=True)  # fmt: skip
    one = json.loads(cli.run("data", "show", "one:1", "--json", check=True).stdout)
    assert one["path"].endswith("/my_table_.csv") and one["type"] == "uri_file"
    wrong = cli.run("data", "create", "--name", "w", "--type", "uri_file", "--path", str(kept))
    assert wrong.returncode == 2 and "wants a file" in wrong.stderr
    gone = cli.run("data", "create", "--name", "g", "--path", str(tmp_path / "nothing"))
    assert gone.returncode == 2 and "not found on this machine" in gone.stderr
    relative = cli.run("datastore", "create", "--name", "r", "--type", "local", "--path", "x/y")
    assert relative.returncode == 2 and "absolute path on the server" in relative.stderr
    uploads = cli.home / "server" / "uploads"
    assert not [p for p in uploads.rglob("*") if p.is_file()]  # every upload used up

    cli.write("src/read.py", READ)
    spec = cli.write(
        "job.yml",
        """
        command: python read.py
        code: src
        inputs:
          d: {type: uri_folder, path: "azureml:mine:1", mode: download}
        """,
    )
    job = cli.wait(cli.create(spec), ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    log = Path(job["job_dir"], "user_logs", "std_log_process_0.txt").read_text()
    assert "beta" in log

    # Over the API, a path on the server's own disk is refused: the CLI uploads local paths.
    with _api(cli) as api:
        for route, body in (("/data", {"name": "x", "path": "/etc"}),
                            ("/models", {"name": "x", "path": str(cli.home)})):  # fmt: skip
            refused = api.post(route, json=body)
            assert refused.status_code == 400 and "the CLI uploads it" in refused.json()["error"]


@SERVER
def test_the_job_files_route_serves_only_what_lies_inside_the_job_folder(
    cli: Cli, tmp_path: Path
) -> None:
    spec = cli.write("job.yml", "command: python -c pass\n")
    job = cli.wait(cli.create(spec), ("Completed", "Failed"))
    name, job_dir = job["name"], Path(job["job_dir"])
    served = job_dir / "outputs" / "x"
    (served / "sub").mkdir(parents=True)
    (served / "a.txt").write_text("a")
    (served / "sub" / "b.txt").write_text("b")
    (served / "leak").symlink_to("/etc/passwd")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("never-served-bytes")
    (served / "outdir").symlink_to(elsewhere, target_is_directory=True)
    (job_dir / "outputs" / "linked").symlink_to(elsewhere, target_is_directory=True)

    with _api(cli) as api:
        answer = api.get(f"/jobs/{name}/files/outputs/x")
        assert answer.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"x", "x/a.txt", "x/sub", "x/sub/b.txt"}  # links left out
        assert all(m.isfile() or m.isdir() for m in members.values())
        one = api.get(f"/jobs/{name}/files/outputs/x/a.txt")
        with tarfile.open(fileobj=io.BytesIO(one.content)) as tar:
            assert tar.getnames() == ["a.txt"]
        for bad in ("%2E%2E", "%2E%2E/%2E%2E/phalanx.db", "outputs/%2E%2E/%2E%2E/secrets.json",
                    "%252e%252e/phalanx.db", "/etc/passwd", "outputs/x/leak",
                    "outputs/x/outdir/secret.txt", "outputs/linked", "outputs%5Cx"):  # fmt: skip
            refused = api.get(f"/jobs/{name}/files/{bad}")
            assert refused.status_code in (400, 404), (bad, refused.status_code)
            assert b"root:" not in refused.content, bad
            assert b"never-served-bytes" not in refused.content, bad
        link = api.get(f"/jobs/{name}/files/outputs/linked")
        assert link.status_code == 400 and "symbolic link" in link.json()["error"]
        missing = api.get(f"/jobs/{name}/files/outputs/nothing")
        assert missing.status_code == 404 and "has no outputs/nothing" in missing.json()["error"]
        unknown = api.get("/jobs/no_such_job/files/outputs")
        assert unknown.status_code == 404 and "not found" in unknown.json()["error"]
    assert not list((cli.home / "server" / "tmp").iterdir())  # every tar removed once sent


def test_every_route_but_health_needs_a_token(cli: Cli) -> None:
    token = cli.run("server", "token", "create", "--user", "bob", "--name", "b", check=True)
    server = servers.start_phalanx_server(cli.home, cli.env, "--auth")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            paths = api.get("/api/v1/openapi.json").json()["paths"]
            checked = 0
            for path, methods in paths.items():
                concrete = path.replace("{name}", "x").replace("{path}", "y")
                for method in methods:
                    answer = api.request(method.upper(), concrete)
                    if path == "/api/v1/health":
                        assert answer.status_code == 200
                        continue
                    if path == "/api/v1/session":  # signing in is how a browser gets in
                        assert answer.status_code in (200, 422), (method, answer.text)
                        continue
                    assert answer.status_code == 401, (method, path, answer.text)
                    checked += 1
            assert checked >= 20
            assert {"/api/v1/datastores", "/api/v1/models/{name}/file", "/api/v1/queue",
                    "/api/v1/jobs/{name}/files/{path}"} <= set(paths)  # fmt: skip
            authed = {"authorization": f"Bearer {token.stdout.strip()}"}
            assert api.get("/api/v1/datastores", headers=authed).status_code == 200
    finally:
        servers.kill_phalanx_server(server)


METRICS = """
from phalanx.train import log_metric
for step in range(1, 4):
    log_metric("loss", 1.0 / step, step)
"""


@SERVER
def test_tensorboard_runs_here_on_a_copy_of_the_servers_event_files(
    cli: Cli, tmp_path: Path
) -> None:
    cli.write("src/m.py", METRICS)
    spec = cli.write("job.yml", "command: python m.py\ncode: src\n")
    job = cli.wait(cli.create(spec), ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    name = job["name"]
    temp = tmp_path / "laptop-tmp"
    temp.mkdir()
    cli.env["TMPDIR"] = str(temp)
    port = free_port()
    proc = cli.popen("tensorboard", name, "--port", str(port))
    try:
        deadline = time.monotonic() + 120
        tags: dict = {}
        while not any(name in run and "loss" in t for run, t in tags.items()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"TensorBoard never showed the run: {tags}"
            time.sleep(0.5)
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=5)
                tags = answer.json() if answer.status_code == 200 else {}
            except httpx.HTTPError:
                continue
        copies = list(temp.glob(f"phalanx-tensorboard-*/{name}/tensorboard"))
        assert len(copies) == 1 and any(copies[0].iterdir())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert not list(temp.glob("phalanx-tensorboard-*"))  # the copy is removed afterwards
    with pytest.raises(httpx.HTTPError):  # and TensorBoard stopped with it
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


@LOCAL_AND_SERVER
def test_job_create_and_validate_print_the_same_notes_here_and_through_a_server(
    cli: Cli,
) -> None:
    from phalanx.environments.pythonenv import environment_notes

    spec = cli.write("job.yml", "command: echo hi\nenvironment: azureml:AzureML-pytorch:3\n")
    expected = [f"note: {n}" for n in environment_notes("azureml:AzureML-pytorch:3")]
    assert expected  # an unregistered environment is noted
    for verb in ("validate", "create"):
        proc = cli.run("job", verb, "-f", str(spec), check=True)
        # A note may wrap at the terminal's width: rejoin the lines after each "note:".
        notes = " ".join(proc.stderr.split()).replace(" note: ", "\nnote: ").splitlines()
        assert [n for n in notes if n.startswith("note:")] == expected, proc.stderr
    cli.wait(proc.stdout.strip(), ("Completed",))
