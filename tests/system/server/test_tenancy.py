"""Who may do what on a team's server, tried as attackers would: through the real
server (SQLite and PostgreSQL), with the tokens of an admin, two members and a viewer.

Each refusal is checked for its one line and its status, and for what did not
happen: the job still runs, the datastore is still there, ``@latest`` still
serves the owner's files, no request reached the attacker's endpoint, no byte
of the server's files came back.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import jobpython
import servers
from conftest import BIN, PHALANX, job_processes_under, workspace_processes

pytestmark = pytest.mark.slow

USERS = {"root": "admin", "alice": "member", "bob": "member", "vic": "viewer", "dora": "member"}
# A credential only the server's environment holds (what `--key-env` would name).
SERVER_KEY, SERVER_SECRET = "AKIASERVERONLY0000001", "server-only-secret-do-not-send"


@dataclass
class Team:
    """A server that asks for tokens, and a token for each of :data:`USERS`."""

    server: servers.PhalanxServer
    home: Path
    data_root: Path
    env: dict[str, str]
    tokens: dict[str, str]
    workdir: Path
    made: list[str] = field(default_factory=list)

    def api(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url + "/api/v1",
            headers={"authorization": f"Bearer {self.tokens[user]}"},
            timeout=60,
        )

    def cli(
        self, user: str, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``phalanx ARGS`` from a laptop with ``user``'s token."""
        env = {
            **self.env,
            "PHALANX_SERVER": self.server.url,
            "PHALANX_TOKEN": self.tokens[user],
            "PHALANX_HOME": str(self.workdir / f"laptop-{user}"),
        }
        return subprocess.run(
            [PHALANX, *args], env=env, cwd=self.workdir, input=stdin,
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def write(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def unique(self, stem: str) -> str:
        """A name no other test of the module uses (they share one server)."""
        name = f"{stem}-{len(self.made)}"
        self.made.append(name)
        return name


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def team(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("team")
    home = jobpython.workspace_home(root)  # walled-off jobs' accounts reach it
    workdir, data_root = root / "work", root / "data"
    for folder in (workdir, data_root):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(
        PHALANX_HOME=str(home),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        OMP_NUM_THREADS="1",
        COLUMNS="200",
        XDG_CONFIG_HOME=str(root / "config"),
        PHALANX_CACHE_DIR=str(root / "cache"),
    )
    database = None
    if request.param == "postgresql":
        postgres = request.getfixturevalue("postgres")
        database = postgres.create_database()
        env["PHALANX_DB"] = database
    tokens = {}
    for user, role in USERS.items():
        made = subprocess.run(
            [PHALANX, "server", "token", "create", "--user", user, "--role", role],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert f"({role})" in made.stderr
        tokens[user] = made.stdout.strip()
    server_env = {**env, "SERVER_AWS_KEY": SERVER_KEY, "SERVER_AWS_SECRET": SERVER_SECRET}
    server = servers.start_phalanx_server(
        home, server_env, "--auth", "--workers", "2", "--datastore-root", str(data_root)
    )
    made_team = Team(server, home, data_root, env, tokens, workdir)
    yield made_team
    servers.kill_phalanx_server(server)
    for proc in [*job_processes_under(home), *workspace_processes(home)]:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if database is not None:
        request.getfixturevalue("postgres").drop_database(database)


def _refused(answer: httpx.Response, status: int, *phrases: str) -> str:
    """The answer's one line, after checking its status and that it names ``phrases``."""
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert "\n" not in message
    for phrase in phrases:
        assert phrase in message, message
    return str(message)


def _cli_refused(proc: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def _status(team: Team, name: str) -> str:
    with team.api("root") as api:
        return str(api.get(f"/jobs/{name}").json()["status"])


def _wait_status(team: Team, name: str, wanted: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (status := _status(team, name)) != wanted:
        assert time.monotonic() < deadline, f"{name} still {status}, not {wanted}"
        time.sleep(0.2)


def test_a_member_acts_on_its_own_jobs_and_reads_the_teams(team: Team) -> None:
    name = team.unique("alices")
    spec = team.write(f"{name}.yml", f"name: {name}\ncommand: sleep 120\n")
    created = team.cli("alice", "job", "create", "-f", str(spec))
    assert created.returncode == 0, created.stderr
    _wait_status(team, name, "Running")
    # Bob and the viewer read it (the team's work is visible to the team)...
    for user in ("bob", "vic"):
        shown = team.cli(user, "job", "show", name, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["created_by"] == "alice"
    # ...but neither cancels nor preempts it, through the CLI or the API.
    _cli_refused(team.cli("bob", "job", "cancel", name), f"job '{name}' belongs to alice")
    with team.api("bob") as bob:
        _refused(bob.post(f"/jobs/{name}/cancel"), 403, "belongs to alice")
        _refused(bob.post(f"/jobs/{name}/preempt", json={"nodes": None}), 403, "owner or an admin")
    with team.api("vic") as vic:
        _refused(vic.post(f"/jobs/{name}/cancel"), 403, "may only read")
    # A cancel let through is recorded before anything is stopped: none was.
    with team.api("root") as root:
        job = root.get(f"/jobs/{name}").json()
    assert job["status"] == "Running" and not job["cancel_requested"]
    # Its owner cancels it; an admin may cancel anyone's.
    assert team.cli("alice", "job", "cancel", name).returncode == 0
    assert _status(team, name) == "Canceled"
    other = team.unique("alices")
    team.cli("alice", "job", "create", "-f", str(spec), "--set", f"name={other}")
    assert team.cli("root", "job", "cancel", other).returncode == 0
    assert _status(team, other) == "Canceled"


def test_a_viewer_only_reads(team: Team) -> None:
    spec = team.write("viewer.yml", "command: echo hi\n")
    _cli_refused(team.cli("vic", "job", "create", "-f", str(spec)), "vic (viewer) may only read")
    with team.api("vic") as vic:
        _refused(vic.put("/uploads", content=b"x" * 100), 403, "may only read")
        assert not [p for p in (team.home / "server" / "uploads").rglob("*") if p.is_file()]
        body = {"name": "v", "type": "s3", "bucket": "b", "auth": "anonymous", "no_check": True}
        _refused(vic.post("/datastores", json=body), 403, "may only read")
        _refused(vic.post("/models", json={"name": "m", "path": "azureml:x:1"}), 403)
        _refused(vic.post("/data", json={"name": "d", "path": "azureml:x:1"}), 403)
        assert vic.get("/jobs").status_code == 200 and vic.get("/models").status_code == 200
    with team.api("root") as root:
        assert root.get("/datastores/v").status_code == 400  # never made


def test_datastores_of_others_cannot_be_deleted(team: Team) -> None:
    name = team.unique("alices-bucket")
    made = team.cli(
        "alice", "datastore", "create", "--name", name, "--type", "s3", "--bucket", "b",
        "--endpoint-url", "http://127.0.0.1:9", "--auth", "anonymous", "--no-check",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    _cli_refused(team.cli("bob", "datastore", "delete", name), f"'{name}' belongs to alice")
    with team.api("bob") as bob:
        _refused(bob.delete(f"/datastores/{name}"), 403, "owner or an admin")
        assert bob.get(f"/datastores/{name}").status_code == 200  # still there, readable
    assert team.cli("alice", "datastore", "delete", name).returncode == 0


class _Listener(http.server.ThreadingHTTPServer):
    """An endpoint of the attacker's: records every request it gets."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                listener.seen.append(f"{self.command} {self.path} {dict(self.headers)}")
                self.send_response(500)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_HEAD = do_PUT = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def listener() -> Iterator[_Listener]:
    made = _Listener()
    yield made
    made.shutdown()
    made.server_close()


def test_the_servers_environment_is_never_sent_to_a_members_endpoint(
    team: Team, listener: _Listener
) -> None:
    bucket = ["--type", "s3", "--bucket", "loot", "--endpoint-url", listener.url]
    attacks = [
        [*bucket, "--key-env", "SERVER_AWS_KEY", "--secret-env", "SERVER_AWS_SECRET"],
        [*bucket, "--auth", "default"],  # the server's own AWS credential chain
        ["--type", "azure_blob", "--account-name", "a", "--container-name", "c",
         "--endpoint", listener.url, "--credential-env", "SERVER_AWS_SECRET"],
    ]  # fmt: skip
    for attack in attacks:
        name = team.unique("exfil")
        proc = team.cli("bob", "datastore", "create", "--name", name, *attack)
        _cli_refused(proc, "only an admin may do this")
    assert listener.seen == []
    # The same request with an admin's token does reach the endpoint: the refusal above
    # is what kept the credential home (the listener answers 500, so nothing is kept).
    name = team.unique("admins")
    team.cli("root", "datastore", "create", "--name", name, *attacks[0])
    assert listener.seen and SERVER_KEY in " ".join(listener.seen)
    assert all(SERVER_SECRET not in request for request in listener.seen)


def test_no_file_of_the_server_is_read_through_a_datastore_or_a_registration(
    team: Team,
) -> None:
    secrets = (
        (team.home / "secrets.json").read_bytes() if (team.home / "secrets.json").exists() else b""
    )
    with team.api("bob") as bob:
        root_store = {"name": team.unique("rootfs"), "type": "local", "path": "/"}
        _refused(bob.post("/datastores", json=root_store), 403, "only an admin")
        for path in ("file:///etc/passwd", f"file://{team.home}/secrets.json", "s3://loot/x",
                     "az://loot@acct/x", "/etc/passwd"):  # fmt: skip
            answer = bob.post("/models", json={"name": team.unique("m"), "path": path})
            assert answer.status_code in (400, 403), answer.text
            assert "root:" not in answer.text
            answer = bob.post("/data", json={"name": team.unique("d"), "path": path})
            assert answer.status_code in (400, 403), answer.text
        climb = "azureml://datastores/default/paths/../secrets.json"
        _refused(bob.post("/models", json={"name": team.unique("m"), "path": climb}), 400, "'..'")
    with team.api("root") as root:
        # Even an admin's local datastore stays inside the server's --datastore-root.
        _refused(
            root.post("/datastores", json={**root_store, "name": "r"}), 400, "--datastore-root"
        )
        shared = team.data_root / team.unique("shared")
        shared.mkdir()
        (shared / "ok.txt").write_text("shared data")
        # A link inside it (as a job writing there could make) leads nowhere outside.
        (shared / "escape").symlink_to(team.home)
        store = team.unique("shared")
        made = root.post("/datastores", json={"name": store, "type": "local", "path": str(shared)})
        assert made.status_code == 201, made.text
    with team.api("bob") as bob:
        through_link = f"azureml://datastores/{store}/paths/escape/secrets.json"
        answer = bob.post("/models", json={"name": team.unique("m"), "path": through_link})
        _refused(answer, 400, "leads outside its folder")
        listing = bob.get(f"/datastores/{store}/ls", params={"path": "escape"})
        _refused(listing, 400, "leads outside its folder")
        ok = bob.post(
            "/models",
            json={"name": team.unique("m"), "path": f"azureml://datastores/{store}/paths/ok.txt"},
        )
        assert ok.status_code == 201, ok.text
    every_answer_so_far = json.dumps(ok.json())
    assert secrets == b"" or secrets.decode() not in every_answer_so_far


def _upload_model(
    team: Team, user: str, name: str, content: str
) -> subprocess.CompletedProcess[str]:
    path = team.write(f"{user}-{name}.bin", content)
    return team.cli(user, "model", "create", "--name", name, "--path", str(path))


def test_registered_names_are_owned(team: Team) -> None:
    model = team.unique("resnet")
    assert _upload_model(team, "alice", model, "alice's weights").returncode == 0
    _cli_refused(_upload_model(team, "bob", model, "bob's weights"), f"'{model}' belongs to alice")
    with team.api("bob") as bob:
        latest = bob.get(f"/models/{model}").json()
        assert latest["version"] == "1" and "alice-" in latest["source"]
    # The owner and an admin publish new versions.
    assert _upload_model(team, "alice", model, "alice v2").returncode == 0
    assert _upload_model(team, "root", model, "admin v3").returncode == 0
    # A job may not register its output under another's name either.
    spec = team.write(
        "steal.yml",
        f"command: echo x\noutputs:\n  m: {{type: custom_model, name: {model}}}\n",
    )
    _cli_refused(
        team.cli("bob", "job", "create", "-f", str(spec)), f"outputs.m.name: model '{model}'"
    )
    # Data assets and environments the same way.
    data = team.unique("images")
    folder = team.workdir / data
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    assert (
        team.cli("alice", "data", "create", "--name", data, "--path", str(folder)).returncode == 0
    )
    _cli_refused(
        team.cli("bob", "data", "create", "--name", data, "--path", str(folder)), "belongs to alice"
    )
    env_name = team.unique("env")
    env_file = team.write(
        f"{env_name}.yml", f"name: {env_name}\nimage: docker.io/library/python:3.11\n"
    )
    assert team.cli("alice", "environment", "create", "-f", str(env_file)).returncode == 0
    _cli_refused(team.cli("bob", "environment", "create", "-f", str(env_file)), "belongs to alice")


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_job_spec_names_no_path_or_credential_of_the_server(team: Team) -> None:
    store = team.unique("inputs")
    (team.data_root / store).mkdir()
    with team.api("root") as root:
        body = {"name": store, "type": "local", "path": str(team.data_root / store)}
        assert root.post("/datastores", json=body).status_code == 201
    attacks = {
        "inputs.d.path": "inputs:\n  d: {type: uri_folder, path: /etc}",
        "code": "code: /",
        "outputs.o.path": "outputs:\n  o: {type: uri_folder, path: /tmp/planted, mode: upload}",
        "inputs.s.path": "inputs:\n  s: {type: uri_folder, path: 's3://loot/x', mode: direct}",
        "environment.pip_file": "environment: {pip_file: /etc/passwd}",
        "compute: ray://": "compute: ray://127.0.0.1:9",
    }
    with team.api("bob") as bob:
        for field_name, text in attacks.items():
            spec = f"command: ls\n{text}\n"
            answer = bob.post("/jobs", json={"spec": spec, "validate_only": False})
            _refused(answer, 403, field_name, "only an admin")
        # A datastore URI is what a member names instead; an uploaded code folder is placed.
        upload = bob.put("/uploads", content=_tar({"src/train.py": b"print('ok')\n"}))
        assert upload.status_code == 201
        fine = {
            "spec": "command: python train.py\ncode: src\ninputs:\n  d: {type: uri_folder, "
            f"path: 'azureml://datastores/{store}/paths/', mode: direct}}\n",
            "upload": upload.json()["upload"],
            "places": {"code": "src"},
            "validate_only": True,
        }
        answer = bob.post("/jobs", json=fine)
        assert answer.status_code == 201 and answer.json()["valid"], answer.text
    with team.api("root") as root:
        jobs = root.get("/jobs", params={"limit": 1000}).json()["jobs"]
    assert not [j for j in jobs if j["created_by"] == "bob" and "/etc" in json.dumps(j["spec"])]


def test_targets_tokens_and_prune_are_an_admins(team: Team) -> None:
    _cli_refused(
        team.cli(
            "alice", "compute", "create", "--name", "mine", "--type", "local", "--gpus", "none"
        ),
        "compute create: only an admin",
    )
    with team.api("alice") as alice:
        _refused(alice.post("/environments/prune", json={"dry_run": True}), 403, "only an admin")
        assert alice.get("/whoami").json() == {"user": "alice", "role": "member", "auth": True}
    with team.api("root") as root:
        assert root.post("/environments/prune", json={"dry_run": True}).status_code == 200


def test_no_member_makes_lists_or_revokes_tokens(team: Team) -> None:
    # Privilege escalation: a member minting an admin token for itself.
    escalate = team.cli("bob", "server", "token", "create", "--user", "bob", "--role", "admin")
    _cli_refused(escalate, "token create: only an admin may do this")
    with team.api("bob") as bob:
        _refused(bob.post("/tokens", json={"user": "bob", "role": "admin"}), 403, "only an admin")
        _refused(bob.get("/tokens"), 403, "only an admin")
        listed = bob.get("/tokens").text
        _refused(bob.delete("/tokens/whatever"), 403, "only an admin")
    assert "alice" not in listed  # nothing about the other tokens came back
    # An admin does it through the server; the new token works, with its role, at once.
    name = team.unique("carol")
    made = team.cli("root", "server", "token", "create", "--user", "carol", "--name", name,
                    "--role", "viewer")  # fmt: skip
    assert made.returncode == 0 and "(viewer)" in made.stderr, made.stderr
    carol = made.stdout.strip()
    with httpx.Client(base_url=team.server.url + "/api/v1", timeout=60) as client:
        who = client.get("/whoami", headers={"authorization": f"Bearer {carol}"})
        assert who.json() == {"user": "carol", "role": "viewer", "auth": True}
        listing = team.cli("root", "server", "token", "list")
        assert name in listing.stdout and "viewer" in listing.stdout
        assert carol not in listing.stdout
        assert team.cli("root", "server", "token", "revoke", name).returncode == 0
        gone = client.get("/whoami", headers={"authorization": f"Bearer {carol}"})
        assert gone.status_code == 401


def test_an_upload_is_its_uploaders_and_each_has_a_quota(team: Team) -> None:
    code = _tar({"src/x.py": b"print('mine')\n"})
    with team.api("alice") as alice:
        mine = alice.put("/uploads", content=code).json()["upload"]
    spec = {"spec": "command: python x.py\ncode: src\n", "places": {"code": "src"},
            "validate_only": True}  # fmt: skip
    with team.api("bob") as bob:  # another's upload id is no use to bob
        _refused(bob.post("/jobs", json={**spec, "upload": mine}), 400, "not found")
    with team.api("alice") as alice:  # still there for its owner
        answer = alice.post("/jobs", json={**spec, "upload": mine})
        assert answer.status_code == 201 and answer.json()["valid"], answer.text
    # Uploads left unused are bounded per user: the next one is refused in one line.
    from phalanx.server.app import MAX_PENDING_UPLOADS

    with team.api("dora") as dora:
        for _ in range(MAX_PENDING_UPLOADS):
            assert dora.put("/uploads", content=code).status_code == 201
        _refused(dora.put("/uploads", content=code), 429, "uploads of yours wait to be used")
    with team.api("bob") as bob:  # nobody else is held back by dora's
        assert bob.put("/uploads", content=code).status_code == 201


SWEEP = """type: sweep
name: {name}
trial:
  command: sleep ${{{{search_space.s}}}}
search_space:
  s: {{type: choice, values: [120]}}
objective: {{primary_metric: loss, goal: minimize}}
limits: {{max_total_trials: 2, max_concurrent_trials: 1}}
"""


def test_a_sweep_and_its_trials_are_their_owners(team: Team) -> None:
    name = team.unique("alices-sweep")
    key = f"sweep-key-{uuid.uuid4().hex}"  # each trial's variable: alice's, as a job's is
    text = SWEEP.format(name=name)
    spec = team.write(
        f"{name}.yml", text.replace("trial:\n", f"trial:\n  environment_variables: {{K: {key}}}\n")
    )
    created = team.cli("alice", "job", "create", "-f", str(spec))
    assert created.returncode == 0, created.stderr
    trial = f"{name}_0"
    deadline = time.monotonic() + 90
    with team.api("root") as root:
        while root.get(f"/jobs/{trial}").status_code != 200:
            assert time.monotonic() < deadline, "the sweep made no trial"
            time.sleep(0.2)
        assert root.get(f"/jobs/{trial}").json()["created_by"] == "alice"
    _wait_status(team, trial, "Running")
    # Bob reads both (not alice's variable), and stops neither: not the sweep, not its trial.
    with team.api("bob") as bob:
        assert bob.get(f"/jobs/{name}/sweep").json()["trials"][0]["job_name"] == trial
        sweep_job, trial_job = bob.get(f"/jobs/{name}").json(), bob.get(f"/jobs/{trial}").json()
        assert sweep_job["spec"]["trial"]["environment_variables"] == {"K": "***"}
        assert trial_job["spec"]["environment_variables"] == {"K": "***"}
        listed = bob.get("/jobs", params={"parent": name}).text + bob.get(f"/jobs/{name}").text
        assert key not in listed
        _refused(bob.post(f"/jobs/{name}/cancel"), 403, "belongs to alice")
        _refused(bob.post(f"/jobs/{trial}/cancel"), 403, "belongs to alice")
    _cli_refused(team.cli("vic", "job", "create", "-f", str(spec)), "may only read")
    assert _status(team, name) == "Running" and _status(team, trial) == "Running"
    # A sweep's trial is checked as a job is: no path of the server in it.
    attacks = {
        "inputs.d.path": "inputs:\n  d: {type: uri_folder, path: /etc}\n",
        "trial.code": "",
        "trial.environment.pip_file": "",
    }
    with team.api("bob") as bob:
        for field_name, extra in attacks.items():
            text = SWEEP.format(name=team.unique("bobs-sweep")) + extra
            if field_name == "trial.code":
                text = text.replace("trial:\n", "trial:\n  code: /\n")
            if field_name == "trial.environment.pip_file":
                text = text.replace("trial:\n", "trial:\n  environment: {pip_file: /etc/passwd}\n")
            answer = bob.post("/jobs", json={"spec": text, "validate_only": False})
            _refused(answer, 403, field_name, "only an admin")
    # Alice stops her sweep, and with it her trial.
    assert team.cli("alice", "job", "cancel", name).returncode == 0
    assert _status(team, name) == "Canceled"
    _wait_status(team, trial, "Canceled")
    with team.api("root") as root:
        jobs = root.get("/jobs", params={"limit": 1000}).json()["jobs"]
    assert not [j for j in jobs if j["name"].startswith("bobs-sweep")]


SHOW_TOP = """import os
print("top:", sorted(os.listdir(os.environ["PHALANX_INPUT_TOP"])), flush=True)
raise RuntimeError("failed on purpose")  # a root cause naming its log and its code
"""
SHOW_SECRET = """import hashlib, os
print("sha:", hashlib.sha256(os.environ["SECRET"].encode()).hexdigest(), flush=True)
"""


def _wait_ended(team: Team, name: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with team.api("root") as root:
        while (job := root.get(f"/jobs/{name}").json())["status"] not in ENDED:
            assert time.monotonic() < deadline, f"{name} still {job['status']}"
            time.sleep(0.3)
    return dict(job)


ENDED = ("Completed", "Failed", "Canceled")


def test_variables_are_their_owners_and_the_servers_paths_an_admins(team: Team) -> None:
    token = f"hf_{uuid.uuid4().hex}"
    name = team.unique("alices-token")
    team.write(f"{name}/main.py", SHOW_TOP)
    (team.home / "datastore").mkdir(exist_ok=True)
    (team.home / "datastore" / f"{name}.marker").write_text("on the default datastore")
    spec = team.write(
        f"{name}.yml",
        f"name: {name}\ncode: {name}\ncommand: python main.py\n"
        f"environment_variables: {{HF_TOKEN: {token}}}\n"
        # The default datastore's top folder, which a walled-off job could not list.
        "inputs:\n  top: {type: uri_folder, path: 'azureml://datastores/default/paths/', "
        "mode: download}\n",
    )
    made = team.cli("alice", "job", "create", "-f", str(spec), "--set",
                    f"environment_variables.SET_TOKEN={token}")  # fmt: skip
    assert made.returncode == 0, made.stderr
    store, env_name = team.unique("shared-folder"), team.unique("alices-env")
    (team.data_root / store).mkdir()
    with team.api("root") as root:
        body = {"name": store, "type": "local", "path": str(team.data_root / store)}
        assert root.post("/datastores", json=body).status_code == 201
    team.write(f"{env_name}/conda.yml", "dependencies: [python]\n")
    env_file = team.write(f"{env_name}/env.yml", f"name: {env_name}\nconda_file: conda.yml\n")
    assert team.cli("alice", "environment", "create", "-f", str(env_file)).returncode == 0
    assert _wait_ended(team, name)["status"] == "Failed"
    log = (team.home / "jobs" / name / "user_logs" / "std_log_process_0.txt").read_text()
    assert f"{name}.marker" in log and "failed on purpose" in log, log

    server_paths = (str(team.home), str(team.data_root))
    asked = [
        "/jobs?limit=1000", "/jobs?trials=true", f"/jobs/{name}", f"/jobs/{name}/spec",
        "/datastores", "/datastores/default", f"/datastores/{store}", "/environments",
        f"/environments/{env_name}", f"/jobs/{name}/files/spec.yaml",
        f"/jobs/{name}/files/spec.json", f"/jobs/{name}/tree?path=.",
        "/datastores/default/ls?path=nope", f"/datastores/{store}/ls?path=nope",
    ]  # fmt: skip
    # What the job's folder holds is read as it is (its logs name its folder): searched
    # for the values only.
    contents = [f"/jobs/{name}/files/system_logs", f"/jobs/{name}/files/user_logs"]
    commands = [
        ["job", "show", name, "--json"], ["job", "list", "--json"], ["datastore", "list"],
        ["datastore", "show", "default"], ["environment", "show", env_name],
    ]  # fmt: skip
    for user in ("bob", "vic", "alice"):
        answers = []
        with team.api(user) as api:
            for url in asked:
                answer = api.get(url)
                assert answer.status_code in (200, 400, 403, 404), (url, answer.text)
                answers.append(answer.content.decode(errors="replace"))
            wrong = {"name": team.unique("m"), "path": "azureml://datastores/default/paths/nope"}
            answers.append(api.post("/models", json=wrong).text)
            shown = api.get(f"/jobs/{name}").json()
            spec_answer = api.get(f"/jobs/{name}/spec").json()
            files = api.get(f"/jobs/{name}/files/spec.yaml")
        for command in commands:
            proc = team.cli(user, *command)
            assert proc.returncode == 0, proc.stderr
            answers.append(proc.stdout + proc.stderr)
        everything = "\n".join(answers)
        for path in server_paths:  # no path of the server's disk, to any but an admin
            at = everything.find(path)
            assert at < 0, (user, everything[max(0, at - 300) : at + 100])
        with team.api(user) as api:
            everything += "".join(api.get(url).content.decode(errors="replace") for url in contents)
        assert shown["job_dir"] is None and shown["spec"]["code"] == "(a path on the server)"
        assert shown["logs"]["user_logs"] == ["user_logs/std_log_process_0.txt"]
        assert shown["error"]["log_file"] == "user_logs/std_log_process_0.txt", shown["error"]
        assert 'File "code/main.py"' in shown["error"]["traceback"], shown["error"]
        if user == "alice":  # the owner reads her values
            assert shown["spec"]["environment_variables"] == {"HF_TOKEN": token, "SET_TOKEN": token}
            assert token in spec_answer["submitted"] and files.status_code == 200
        else:  # nobody else does, anywhere
            assert token not in everything, user
            assert shown["spec"]["environment_variables"] == {"HF_TOKEN": "***", "SET_TOKEN": "***"}
            assert spec_answer["submitted"] is None
            _refused(files, 403, "only its owner (its spec.yaml) or an admin")
    with team.api("root") as root:  # an admin reads it all
        shown = root.get(f"/jobs/{name}").json()
    assert shown["job_dir"] == str(team.home / "jobs" / name)
    assert shown["spec"]["environment_variables"]["HF_TOKEN"] == token


SECRET_JOB = """name: {name}
code: {code}
command: python main.py
environment_variables: {{SECRET: '${{{{secrets.hf_token}}}}'}}
"""


def test_a_secret_reference_reaches_the_ranks_and_nothing_else(team: Team) -> None:
    value = f"secret-{uuid.uuid4().hex}"
    _cli_refused(team.cli("vic", "secret", "set", "hf_token", stdin=value), "may only read")
    made = team.cli("alice", "secret", "set", "hf_token", stdin=value)
    assert made.returncode == 0, made.stderr
    assert team.cli("alice", "secret", "list").stdout.split() == ["hf_token"]
    assert team.cli("bob", "secret", "list").stdout.split() == []
    name = team.unique("alices-secret")
    team.write(f"{name}/main.py", SHOW_SECRET)
    spec = team.write(f"{name}.yml", SECRET_JOB.format(name=name, code=name))
    # Bob names a secret he has not stored (alice's is hers): refused at create.
    _cli_refused(
        team.cli("bob", "job", "create", "-f", str(spec)),
        "environment_variables.SECRET: ${{secrets.hf_token}}: no secret 'hf_token' of bob",
    )
    assert team.cli("alice", "job", "create", "-f", str(spec)).returncode == 0
    job = _wait_ended(team, name)
    assert job["status"] == "Completed", job
    folder = team.home / "jobs" / name
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert f"sha: {digest}" in (folder / "user_logs" / "std_log_process_0.txt").read_text()
    # The value is in no record, file or answer: the spec keeps the reference.
    kept = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    assert value.encode() not in kept
    if (team.home / "phalanx.db").exists():
        assert value.encode() not in (team.home / "phalanx.db").read_bytes()
    for user in ("root", "alice", "bob"):
        with team.api(user) as api:
            shown = api.get(f"/jobs/{name}").text + api.get(f"/jobs/{name}/spec").text
        assert value not in shown and "${{secrets.hf_token}}" in shown, user
    # Deleted, it is named by no new job.
    assert team.cli("alice", "secret", "delete", "hf_token").returncode == 0
    again = team.cli("alice", "job", "create", "-f", str(spec), "--set", f"name={name}-again")
    _cli_refused(again, "no secret 'hf_token' of alice; set it with `phalanx secret set hf_token`")
