"""Jobs walled off from the server that runs them (issue 21, "jobs cannot touch the server").

Every test goes through a real ``phalanx server start`` started as root, as the tests
start it, so every job runs as an account of its own. A job that tries each attack
(the server's secrets file, database and its WAL, the tokens table, the session key,
another job's folder, credentials file, cache entries and processes, the server's
environment) fails at each and leaks nothing; a job doing its own work (inputs in
every mode, outputs, checkpoints, a resume after preemption, MPI, a container) still
succeeds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from fsspec.implementations.local import LocalFileSystem

import jobpython
import servers
from conftest import PHALANX, REPO, Cli, blob_datastore, job_processes_under
from phalanx.compute.inputs import download_dir
from phalanx.environments.containers.engine import Engine
from phalanx.jobs import pythonview
from phalanx.jobs.pythonview import blocking_folder
from phalanx.jobs.walls import DEFAULT_COUNT, DEFAULT_FIRST_UID
from phalanx.launch.ports import free_port
from phalanx.storage.cache import NodeCache
from phalanx.storage.location import Location
from servers import AZURITE_KEY, Azurite
from test_containers import IMAGE, make_test_image

pytestmark = pytest.mark.slow
SERVER = pytest.mark.parametrize("cli", ["server"], indirect=True)

FILES = {"train/a.bin": b"alpha" * 100, "train/sub/b.bin": b"beta" * 1000}

VICTIM = """
import os, sys, time
from pathlib import Path
out = Path(os.environ["PHALANX_OUTPUT_RESULT"])
(out / "secret.txt").write_text(os.environ["PRIVATE"])
print("the victim's own line", os.environ["PRIVATE"], flush=True)
print("victim ready", flush=True)
time.sleep(600)
"""

# Every attack a job's code can make on the server from inside, each recorded with what
# came of it. Nothing is allowed to succeed; the test also looks for every secret in all
# the job left behind.
ATTACK = r"""
import json, os, signal, sqlite3, sys, time
from pathlib import Path
ws, victim, entry = Path(os.environ["WS"]), Path(os.environ["VICTIM"]), Path(os.environ["ENTRY"])
tried = {}

def attempt(name, fn):
    try:
        tried[name] = {"ok": True, "got": repr(fn())[:4000]}
    except Exception as exc:
        tried[name] = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:300],
                       "code": getattr(exc, "code", None)}

def api(headers):
    import urllib.request
    asked = urllib.request.Request(os.environ["SERVER_URL"] + "/api/v1/jobs", headers=headers)
    return urllib.request.urlopen(asked, timeout=30).read()

def plant_token():
    db = sqlite3.connect(f"file:{ws / 'phalanx.db'}?mode=rw", uri=True)
    db.execute("INSERT INTO tokens (name, user_name, hash, created_at) VALUES (?, ?, ?, ?)",
               ("planted", "mallory", os.environ["PLANTED_HASH"], time.time()))
    db.commit()

def plant_token_pg():
    import psycopg  # the database named by PHALANX_DB, were it there
    with psycopg.connect(os.environ["PHALANX_DB"]) as db:
        db.execute("INSERT INTO tokens (name, user_name, hash, created_at) "
                   "VALUES ('planted', 'mallory', %s, 0)", (os.environ["PLANTED_HASH"],))

def environ_of(pid):
    return Path(f"/proc/{pid}/environ").read_bytes()

def supervisor():
    # The first of this process's ancestors that runs as root: the job's supervisor.
    pid = os.getppid()
    while "\tUid:\t0\t" not in "\t" + Path(f"/proc/{pid}/status").read_text().replace("\n", "\t"):
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return pid

attempt("read secrets.json", lambda: (ws / "secrets.json").read_text())
attempt("read phalanx.db", lambda: (ws / "phalanx.db").read_bytes()[:4096])
attempt("read phalanx.db-wal", lambda: (ws / "phalanx.db-wal").read_bytes()[:4096])
attempt("write the tokens table", plant_token)
attempt("write the tokens table (PostgreSQL)", plant_token_pg)
attempt("read session.key", lambda: (ws / "server" / "session.key").read_bytes())
attempt("list the workspace", lambda: os.listdir(ws))
attempt("list the jobs", lambda: os.listdir(ws / "jobs"))
attempt("list server/", lambda: os.listdir(ws / "server"))
attempt("read another job's log", lambda: (victim / "user_logs/std_log_process_0.txt").read_text())
attempt("read another job's output", lambda: (victim / "outputs/result/secret.txt").read_text())
attempt("read another job's spec", lambda: (victim / "spec.yaml").read_text())
attempt("list another job's folder", lambda: os.listdir(victim))
attempt("read another job's credentials",
        lambda: (ws / "job-credentials" / f"{victim.name}.json").read_text())
attempt("list the node cache", lambda: os.listdir(os.environ["CACHE"]))
attempt("list another job's cache entry", lambda: os.listdir(entry))
attempt("read another job's cache entry", lambda: (entry / "a.bin").read_bytes())
attempt("read another job's input", lambda: (victim / "inputs" / "data" / "a.bin").read_bytes())
attempt("read the server's environment", lambda: environ_of(int(os.environ["SERVER_PID"])))
attempt("read the supervisor's environment", lambda: environ_of(supervisor()))
attempt("read another job's environment", lambda: environ_of(int(os.environ["VICTIM_PID"])))
attempt("signal another job", lambda: os.kill(int(os.environ["VICTIM_PID"]), signal.SIGTERM))
attempt("read the server's datastore folder", lambda: os.listdir(ws / "datastore"))
attempt("use the server's API", lambda: api({}))
attempt("use the server's API, said to be forwarded", lambda: api({"X-Forwarded-For": "8.8.8.8"}))
command_lines = {}  # everything any process was started with, as any account sees it
for proc in Path("/proc").iterdir():
    try:
        command_lines[proc.name] = (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        pass
# A job's own files, replaced by links to the server's: phalanx, reading them as root,
# must not follow them (the log is served, the output uploaded to a datastore).
logs = Path(os.environ["PHALANX_JOB_DIR"]) / "user_logs"
loot = Path(os.environ["PHALANX_OUTPUT_LOOT"])
os.symlink(ws / "secrets.json", logs / "std_log_process_7.txt")
os.symlink(ws / "secrets.json", loot / "secrets.json")
os.symlink(ws / "server", loot / "server")
own = os.environ.get("PHALANX_DATASTORES_FILE")
report = {
    "tried": tried,
    "env": dict(os.environ),
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "own datastores": Path(own).read_text() if own else None,
    "command lines": command_lines,
}
(Path(os.environ["PHALANX_OUTPUT_RESULT"]) / "report.json").write_text(json.dumps(report))
print(json.dumps(report))
"""

MUST_FAIL = (
    "read secrets.json", "read phalanx.db", "read phalanx.db-wal", "write the tokens table",
    "write the tokens table (PostgreSQL)", "read session.key", "list the workspace",
    "list the jobs", "list server/", "read another job's log", "read another job's output",
    "read another job's spec", "list another job's folder", "read another job's credentials",
    "list the node cache", "list another job's cache entry", "read another job's cache entry",
    "read another job's input", "read the server's environment",
    "read the supervisor's environment", "read another job's environment",
    "signal another job", "read the server's datastore folder", "use the server's API",
    "use the server's API, said to be forwarded",
)  # fmt: skip


def _job(cli: Cli, name: str, script: str, body: str, command: str) -> str:
    cli.write(f"{name}/main.py", script)
    spec = cli.write(
        f"{name}.yml",
        f"type: command\nname: {name}\ncode: {name}\ncommand: {command}\n{body}"
        "limits: {timeout: 600}\n",
    )
    return cli.create(spec)


def _wait_for(what: str, check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.2)
    return found


def _running_as(uid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.uids().real == uid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _everything_under(folder: Path) -> bytes:
    """Every byte of every plain file under ``folder`` (links not followed)."""
    data = []
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                data.append(path.read_bytes())
    return b"\n".join(data)


@SERVER
def test_a_job_cannot_touch_the_server_and_leaks_nothing(
    cli: Cli, azurite: Azurite, db: str | None
) -> None:
    stored, in_env = f"stored-{uuid.uuid4().hex}", f"server-env-{uuid.uuid4().hex}"
    private = f"victim-private-{uuid.uuid4().hex}"
    # The server's own secrets: a variable it was started with, named by a datastore's
    # --credential-env; a stored credential; the blob key of a datastore the victim uses.
    cli.export(SERVER_CANARY=in_env)
    cli.run(
        "datastore", "create", "--name", "envstore", "--type", "s3", "--bucket", "b",
        "--endpoint-url", "http://127.0.0.1:9", "--key-env", "SERVER_CANARY",
        "--secret-env", "SERVER_CANARY", "--no-check", check=True,
    )  # fmt: skip
    made = cli.run_input(
        f"{stored}\n{stored}\n", "datastore", "create", "--name", "vault", "--type", "s3",
        "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--store", "--no-check",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    container = blob_datastore(cli, azurite, FILES)
    from phalanx.server.sessions import session_key

    key = session_key(cli.home)  # as the server makes it for its first studio session
    (cli.home / "datastore" / "someones").mkdir(parents=True)  # the default datastore
    assert stored in (cli.home / "secrets.json").read_text()

    victim = _job(
        cli, "victim", VICTIM,
        "inputs:\n  data: {type: uri_folder, path: azureml://datastores/blobs/paths/train, "
        "mode: download}\noutputs:\n  result: {type: uri_folder}\n"
        # Not on its command line, which every account on a machine can read (unless /proc
        # is mounted with hidepid): its environment is its own.
        f"environment_variables: {{PRIVATE: {private}}}\n",
        "python main.py",
    )  # fmt: skip
    victim_dir = Path(cli.show(victim)["job_dir"])
    log = victim_dir / "user_logs" / "std_log_process_0.txt"
    _wait_for("victim", lambda: log.is_file() and "victim ready" in log.read_text())
    victim_pid = next(p.pid for p in job_processes_under(victim_dir) if "main.py" in p.cmdline())
    url = f"{azurite.endpoint}/{container}/train"
    cache = NodeCache(Path(cli.env["PHALANX_CACHE_DIR"]))
    entry = download_dir(cache, Location(LocalFileSystem(), "", url))
    assert (entry / "a.bin").read_bytes() == FILES["train/a.bin"]  # root reads it; the job?

    planted = f"phalanx-planted-{uuid.uuid4().hex}"
    assert cli.server is not None
    env = {
        "WS": str(cli.home), "VICTIM": str(victim_dir), "ENTRY": str(entry),
        "CACHE": cli.env["PHALANX_CACHE_DIR"], "SERVER_PID": str(cli.server.proc.pid),
        "VICTIM_PID": str(victim_pid), "SERVER_URL": cli.server.url,
        "PLANTED_HASH": hashlib.sha256(planted.encode()).hexdigest(),
    }  # fmt: skip
    variables = "".join(f"  {k}: '{v}'\n" for k, v in env.items())
    attacker = _job(
        cli, "attacker", ATTACK,
        f"environment_variables:\n{variables}outputs:\n  result: {{type: uri_folder}}\n"
        "  loot: {type: uri_folder, path: azureml://datastores/default/paths/loot, "
        "mode: upload}\n",
        "python main.py",
    )  # fmt: skip
    job = cli.wait(attacker, ("Completed", "Failed", "Canceled"), timeout=180)
    attacker_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (attacker_dir / "system_logs/supervisor.txt").read_text()
    report = json.loads((attacker_dir / "outputs" / "result" / "report.json").read_text())

    # Every attack failed, as the kernel refused it (not because a path was wrong).
    tried = report["tried"]
    assert sorted(tried) == sorted(MUST_FAIL)
    succeeded = {k: v for k, v in tried.items() if v["ok"]}
    assert succeeded == {}
    for name, what in tried.items():
        expected = {"PermissionError"}
        if name == "write the tokens table":
            expected = {"OperationalError"}  # sqlite3: unable to open database file
        elif name == "write the tokens table (PostgreSQL)":
            expected = {"KeyError"}  # PHALANX_DB is not there to connect with
        elif db is not None and name in ("read phalanx.db", "read phalanx.db-wal"):
            expected = {"PermissionError", "FileNotFoundError"}  # no SQLite file: PostgreSQL
        elif name.startswith("use the server's API"):
            expected = {"HTTPError"}  # a server without tokens answers no job
            assert what["code"] == 403, what
        assert what["error"] in expected, (name, what)
    # The job ran as an account of its own, from a base environment.
    uid = report["uid"]
    assert DEFAULT_FIRST_UID <= uid < DEFAULT_FIRST_UID + DEFAULT_COUNT
    assert report["gid"] == uid and report["groups"] in ([], [uid])
    seen = report["env"]
    for absent in ("PHALANX_DB", "PHALANX_HOME", "SERVER_CANARY", "AZ_KEY", "PHALANX_SERVER"):
        assert absent not in seen, absent
    assert seen["HOME"] == seen["TMPDIR"] == str(attacker_dir / "tmp")
    assert seen["USER"] == f"phalanx-{uid}"
    assert json.loads(report["own datastores"])["datastores"].keys() == {"default"}

    # Nothing of the server's (or the victim's) reached anything the job left or phalanx
    # shows of it: its folder, its logs as served, its uploaded output, `job show`.
    secrets = [stored, in_env, AZURITE_KEY, private, key.hex()]
    if db is not None:
        secrets.append(urlsplit(db).password or "no password?")
    streamed = cli.run("job", "stream", attacker, "--all-ranks", timeout=60).stdout
    shown = json.dumps(cli.show(attacker))
    left = _everything_under(attacker_dir) + _everything_under(cli.home / "datastore" / "loot")
    for secret in secrets:
        for where, text in (("streamed", streamed), ("job show", shown)):
            assert secret not in text, where
        assert secret.encode() not in left and key not in left
    assert not (cli.home / "datastore" / "loot" / "server").exists()
    assert not (cli.home / "job-credentials" / f"{attacker}.json").exists()

    # The victim ran on untouched, under an account of its own; cancelled, it ends well.
    assert cli.show(victim)["status"] == "Running"
    victim_uid = psutil.Process(victim_pid).uids().real
    assert victim_uid != uid and victim_uid >= DEFAULT_FIRST_UID
    assert cli.run("job", "cancel", victim, check=True).returncode == 0
    assert cli.wait(victim, ("Canceled",))["status"] == "Canceled"
    assert _running_as(uid) == _running_as(victim_uid) == []
    assert oct(victim_dir.stat().st_mode & 0o777) == oct(0o700)  # the server's alone again

    # The token the job tried to plant opens nothing; a real one does.
    local = {k: v for k, v in cli.env.items() if k != "PHALANX_SERVER"}
    local["PHALANX_HOME"] = str(cli.home)
    made = subprocess.run(
        [PHALANX, "server", "token", "create", "--user", "admin"], env=local,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    authed = servers.start_phalanx_server(cli.home, cli.env, "--auth")
    try:
        for token, status in ((planted, 401), (made.stdout.strip(), 200)):
            answer = httpx.get(
                f"{authed.url}/api/v1/jobs", headers={"authorization": f"Bearer {token}"},
                timeout=60,
            )  # fmt: skip
            assert answer.status_code == status
    finally:
        servers.kill_phalanx_server(authed)


# A job doing its own work, walled off: it reads its inputs in every mode (a download
# and a file from the cache, a FUSE mount, the URI itself through the node cache, a
# folder uploaded with it), writes outputs (its own, one uploaded to a datastore, one
# through a read-write FUSE mount), saves checkpoints (its own, and on a datastore),
# logs a metric and asks for an upload.
WORK = """
import hashlib, json, os, sys
from pathlib import Path
from phalanx.data.sources import open_source
from phalanx.train import Checkpointer, log_metric, request_upload
import torch

def digest(root):
    root = Path(root)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}

seen = {"uid": os.getuid(), "home": os.environ["HOME"], "inputs": {}}
for name in ("down", "mounted", "local"):
    seen["inputs"][name] = digest(os.environ["PHALANX_INPUT_" + name.upper()])
seen["one"] = Path(os.environ["PHALANX_INPUT_ONE"]).read_bytes().decode()
source = open_source(os.environ["PHALANX_INPUT_SHARDS"])
index = source.index()
with source.open_shard("a.bin", index["sha256"], index["size"]) as path:
    seen["shard"] = path.read_bytes().decode()
with Checkpointer(sys.argv[1]) as ckpt:
    ckpt.save({"w": torch.tensor([3.0])}, 7)
seen["checkpoint"] = [Checkpointer(sys.argv[1]).load_latest().step]
with Checkpointer() as local:
    local.save({"w": torch.tensor([1.0])}, 1)
Path(os.environ["PHALANX_OUTPUT_UP"], "sent.txt").write_text("sent by the job")
Path(os.environ["PHALANX_OUTPUT_RW"], "mounted.txt").write_text("written through FUSE")
seen["asked"] = request_upload()
log_metric("loss", 0.5, step=1)
Path(os.environ["PHALANX_OUTPUT_RESULT"], "seen.json").write_text(json.dumps(seen))
print("work done", flush=True)
"""


@SERVER
def test_a_walled_off_job_still_does_its_own_work(cli: Cli, azurite: Azurite) -> None:
    shard = b"a shard's bytes"
    index = {"sha256": hashlib.sha256(shard).hexdigest(), "size": len(shard)}
    files = {**FILES, "shards/a.bin": shard, "shards/index.json": json.dumps(index).encode()}
    container = blob_datastore(cli, azurite, files)
    cli.write("data/x.txt", "local data")
    blobs = "azureml://datastores/blobs/paths"
    name = _job(
        cli, "work", WORK,
        "inputs:\n"
        f"  down: {{type: uri_folder, path: {blobs}/train, mode: download}}\n"
        f"  mounted: {{type: uri_folder, path: {blobs}/train, mode: ro_mount}}\n"
        f"  shards: {{type: uri_folder, path: {blobs}/shards, mode: direct}}\n"
        f"  one: {{type: uri_file, path: {blobs}/shards/a.bin, mode: download}}\n"
        "  local: {type: uri_folder, path: ./data}\n"
        "outputs:\n  result: {type: uri_folder}\n"
        f"  up: {{type: uri_folder, path: {blobs}/up, mode: upload}}\n"
        f"  rw: {{type: uri_folder, path: {blobs}/rw, mode: rw_mount}}\n",
        f"python main.py {blobs}/ckpt",
    )  # fmt: skip
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    job_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (job_dir / "system_logs/supervisor.txt").read_text()
    seen = json.loads((job_dir / "outputs" / "result" / "seen.json").read_text())
    assert DEFAULT_FIRST_UID <= seen["uid"] < DEFAULT_FIRST_UID + DEFAULT_COUNT
    train = {k[len("train/") :]: hashlib.sha256(v).hexdigest() for k, v in FILES.items()}
    assert seen["inputs"]["down"] == seen["inputs"]["mounted"] == train
    assert seen["inputs"]["local"] == {"x.txt": hashlib.sha256(b"local data").hexdigest()}
    assert seen["one"] == seen["shard"] == shard.decode()
    assert seen["checkpoint"] == [7] and seen["asked"] is True
    assert "work done" in (job_dir / "user_logs" / "std_log_process_0.txt").read_text()
    # What it wrote is its own (and the server reads it); what it sent is on the store.
    assert (job_dir / "checkpoints").stat().st_uid == seen["uid"]
    assert any((job_dir / "checkpoints").glob("step_*1/COMMITTED"))
    assert json.loads((job_dir / "metrics.jsonl").read_text())["name"] == "loss"
    from azure.storage.blob import BlobServiceClient

    store = BlobServiceClient.from_connection_string(azurite.connection_string)
    sent = store.get_blob_client(container, "up/sent.txt").download_blob().readall()
    assert sent == b"sent by the job"
    mounted = store.get_blob_client(container, "rw/mounted.txt").download_blob().readall()
    assert mounted == b"written through FUSE"
    names = {b.name for b in store.get_container_client(container).list_blobs("ckpt/")}
    assert any(n.endswith("/COMMITTED") for n in names)
    # Its end: nothing mounted in its folder, its credentials and account gone.
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(job_dir) not in mounts
    assert not (cli.home / "job-credentials" / f"{name}.json").exists()
    assert _running_as(seen["uid"]) == []


RESUME = """
import os, signal, sys, time
from phalanx.train import Checkpointer
import torch
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
ckpt = Checkpointer()
loaded = ckpt.load_latest()
start = 0 if loaded is None else loaded.step + 1
print(f"attempt {os.environ['PHALANX_ATTEMPT']} starts at step {start}", flush=True)
for step in range(start, 10_000):
    ckpt.save({"step": torch.tensor(step)}, step)
    print(f"saved step {step}", flush=True)
    if stop:
        sys.exit(143)
    if os.environ["PHALANX_ATTEMPT"] == "2" and step >= start + 2:
        break
    time.sleep(0.2)
"""


@SERVER
def test_a_walled_off_job_resumes_after_preemption(cli: Cli) -> None:
    name = _job(
        cli, "resume", RESUME,
        "retry: {max_attempts: 1, max_preemptions: 1, preemption_grace: 30}\n",
        "python main.py",
    )  # fmt: skip
    log = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    _wait_for("step 3", lambda: log.is_file() and "saved step 3" in log.read_text())
    cli.run("job", "preempt", name, check=True)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Completed", job
    text = log.read_text()
    last = max(int(line.split()[-1]) for line in text.splitlines() if "saved step" in line
               and text.index(line) < text.index("attempt 2"))  # fmt: skip
    assert f"attempt 2 starts at step {last + 1}" in text
    assert [a["status"] for a in job["attempts"]] == ["Failed", "Succeeded"]
    assert job["attempts"][0]["cause"] == "preemption"


MPI = """
import json, os
from pathlib import Path
rank = os.environ["OMPI_COMM_WORLD_RANK"]
seen = {"uid": os.getuid(), "rank": os.environ["RANK"], "ompi": rank,
        "size": os.environ["OMPI_COMM_WORLD_SIZE"]}
Path(os.environ["PHALANX_OUTPUTS_DIR"], f"mpi_{rank}.json").write_text(json.dumps(seen))
"""


@SERVER
def test_a_walled_off_mpi_job_runs_its_ranks_as_its_account(cli: Cli) -> None:
    name = _job(
        cli, "mpi", MPI,
        "resources: {instance_count: 2}\n"
        "distribution: {type: mpi, process_count_per_instance: 1}\n",
        "python main.py",
    )  # fmt: skip
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    job_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (job_dir / "system_logs" / "node_0.txt").read_text()
    seen = [json.loads((job_dir / "outputs" / f"mpi_{r}.json").read_text()) for r in (0, 1)]
    assert [(s["rank"], s["ompi"], s["size"]) for s in seen] == [("0", "0", "2"), ("1", "1", "2")]
    assert seen[0]["uid"] == seen[1]["uid"] >= DEFAULT_FIRST_UID


CONTAINED = """
import json, os, sys
from pathlib import Path
ws = Path(sys.argv[1])
seen = {"uid": os.getuid(), "container": os.path.exists("/run/.containerenv"),
        "workspace": ws.exists(), "secrets": (ws / "secrets.json").exists(),
        "own": sorted(p.name for p in Path(os.environ["PHALANX_JOB_DIR"]).iterdir())}
try:
    os.setuid(0)
    seen["root"] = True
except PermissionError:
    seen["root"] = False
Path(os.environ["PHALANX_OUTPUTS_DIR"], "seen.json").write_text(json.dumps(seen))
"""


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The engine, with the test image on it."""
    from phalanx.environments.containers.engine import find_engine

    found = find_engine()
    make_test_image()
    return found


@SERVER
def test_a_walled_off_job_in_an_image_runs_as_its_account(cli: Cli, engine: Engine) -> None:
    name = _job(
        cli, "contained", CONTAINED, f"environment: {{image: {IMAGE}}}\n",
        f"python main.py {cli.home}",
    )  # fmt: skip
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    job_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (job_dir / "system_logs" / "node_0.txt").read_text()
    seen = json.loads((job_dir / "outputs" / "seen.json").read_text())
    # Its own account inside too, no way back to root, and only its folder to see.
    assert seen["container"] is True and seen["root"] is False
    assert DEFAULT_FIRST_UID <= seen["uid"] < DEFAULT_FIRST_UID + DEFAULT_COUNT
    assert seen["workspace"] is True and seen["secrets"] is False  # the path, not its files
    assert {"code", "outputs", "user_logs", "tmp"} <= set(seen["own"])
    assert _running_as(seen["uid"]) == []


def _start(
    home: Path, *args: str, user: int | None = None, python: str | Path = sys.executable,
    inside: tuple[str, ...] = (), needs: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``phalanx server start`` that is expected to refuse at once (``inside``: a command
    that runs it; ``needs``: what ``python`` needs in the environment)."""
    env = {**os.environ, **(needs or {}), "PHALANX_HOME": str(home)}
    env.pop("PHALANX_DB", None)
    return subprocess.run(
        [*inside, str(python), "-m", "phalanx.cli.main", "server", "start",
         "--port", str(free_port()), *args],
        env=env, capture_output=True, text=True, timeout=60, user=user, cwd="/",
    )  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_server_that_cannot_wall_jobs_off_refuses_to_start(tmp_path: Path) -> None:
    # Root, but its workspace where no other account can go.
    private = Path(tempfile.mkdtemp())  # 0700
    try:
        line = _one_line(_start(private / "ws"))
        assert f"inside {private}, which other accounts cannot enter; chmod o+x {private}" in line
        assert "--trust-jobs" in line
    finally:
        shutil.rmtree(private)
    # Not root, with tokens: jobs cannot get accounts of their own.
    home = jobpython.workspace_home(tmp_path)
    local = {**os.environ, "PHALANX_HOME": str(home)}
    made = subprocess.run([PHALANX, "server", "token", "create", "--user", "a"], env=local,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    uid = DEFAULT_FIRST_UID - 1  # an account of no one
    for path in [home, *home.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)
    view = pythonview.ensure()  # a Python that account runs, wherever this one lies
    line = _one_line(
        _start(home, "--auth", "--host", "127.0.0.1", user=uid, python=view.python,
               needs=view.env())
    )  # fmt: skip
    assert line.startswith("error: a server with tokens runs each job as an account of its own")
    assert "pass --trust-jobs" in line
    # A uid range that is someone's, or not a range.
    for uids, said in (("65534-65540", "uid 65534 (nobody in /etc/passwd)"),
                       ("0-10", "give START-END")):  # fmt: skip
        assert said in _one_line(_start(home, "--job-uids", uids))


WHO = """
import os, sys
from pathlib import Path
import phalanx
print("uid", os.getuid(), "python", sys.executable, "phalanx", phalanx.__file__, flush=True)
for name in sys.argv[1:]:
    try:
        Path(name).read_bytes()
        print("read", name, flush=True)
    except OSError as exc:
        print("refused", name, type(exc).__name__, flush=True)
try:
    (Path(phalanx.__file__).parent / "planted.py").write_text("")
    print("wrote into phalanx", flush=True)
except OSError:
    print("refused to write into phalanx", flush=True)
"""


def _installed_out_of_reach(folder: Path) -> Path:
    """phalanx installed as the README's install does it (a virtual environment, phalanx
    editable), in ``folder``, which no other account enters (pytest's folders are 0700):
    the interpreter is this one's base, and the ``site-packages`` entries link to this
    environment's (nothing is installed); its ``python``."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    shutil.copytree(REPO / "src", folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
    here = Path(sysconfig.get_paths()["purelib"])
    site = venv / "lib" / here.parent.name / "site-packages"
    for entry in here.iterdir():
        if not entry.name.startswith("__editable__.phalanx"):
            (site / entry.name).symlink_to(entry)
    (site / "__editable__.phalanx-0.1.0.pth").write_text(f"{folder / 'src'}\n")
    return venv / "bin" / "python"


@pytest.mark.parametrize("cli", ["local"], indirect=True)
def test_a_root_server_walls_jobs_off_wherever_its_python_lies(cli: Cli, tmp_path: Path) -> None:
    """The README's install as root (issue 36): interpreter, packages and source where no
    other account goes, and no --trust-jobs; jobs run on a read-only view of it."""
    python = _installed_out_of_reach(tmp_path / "install")
    assert blocking_folder(python) is not None
    beside = tmp_path / "install" / "beside.txt"  # readable, were its folder not closed
    beside.write_text("the admin's")
    private = cli.home.parent / "server-only.txt"
    private.write_text("the server's")
    private.chmod(0o600)
    # Where no view can be made (here /run/phalanx is read-only), it refuses in one line.
    read_only = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                 'mkdir -p /run/phalanx && mount --bind -o ro /run/phalanx /run/phalanx && '
                 'exec "$@"', "sh")  # fmt: skip
    line = _one_line(_start(cli.home, python=python, inside=read_only))
    assert line.startswith("error: jobs cannot be walled off: phalanx's Python"), line
    assert "and no view of it can be made at /run/phalanx/python/" in line
    server = None
    try:
        server = servers.start_phalanx_server(cli.home, cli.env, python=python)
        assert "jobs walled off" in server.log.read_text()
        cli.env.update(PHALANX_SERVER=server.url)
        cli.write("who/main.py", WHO)
        argv = f"{cli.home / 'phalanx.db'} {private} {beside}"
        spec = cli.write("who.yml", f"command: python main.py {argv}\ncode: who\n")
        job = cli.wait(cli.create(spec), ("Completed", "Failed"))
        log = cli.home / "jobs" / job["name"] / "user_logs" / "std_log_process_0.txt"
        said = log.read_text().split()
        assert job["status"] == "Completed", said
    finally:
        if server is not None:
            servers.kill_phalanx_server(server)
        # This test's install goes with the test: so does its view.
        site = next((python.parents[1] / "lib").glob("*/site-packages"))
        for shown in pythonview.VIEWS.glob("*/packages/0"):
            if os.path.samefile(shown, site):
                view = shown.parents[1]
                subprocess.run(["umount", "--recursive", "--lazy", view], check=True)
                view.rmdir()
                (view.parent / f".{view.name}.lock").unlink()
    # Its own account, on the view's Python and phalanx's source shown there, read-only.
    assert DEFAULT_FIRST_UID <= int(said[said.index("uid") + 1]) < DEFAULT_FIRST_UID + DEFAULT_COUNT
    assert Path(said[said.index("python") + 1]).is_relative_to(view)
    assert Path(said[said.index("phalanx") + 1]).is_relative_to(view / "source")
    assert "refused to write into phalanx" in " ".join(said)
    # Neither the token database, nor a 0600 file of the server, nor what lies beside
    # the install.
    for path in (cli.home / "phalanx.db", private, beside):
        assert f"refused {path} PermissionError" in " ".join(said), said


@pytest.mark.parametrize("cli", ["local"], indirect=True)
def test_trusted_jobs_run_as_the_server(cli: Cli) -> None:
    server = servers.start_phalanx_server(cli.home, cli.env, "--trust-jobs")
    try:
        assert "jobs run as this account" in server.log.read_text()
        cli.env.update(PHALANX_SERVER=server.url)
        cli.write("who/main.py", "import os; print('uid', os.getuid(), flush=True)\n")
        spec = cli.write("who.yml", "command: python main.py\ncode: who\n")
        job = cli.wait(cli.create(spec), ("Completed", "Failed"))
        # Through a server `job show` names no path of the server's disk: the job's
        # folder is where the server keeps it.
        assert job["job_dir"] is None
        log = cli.home / "jobs" / job["name"] / "user_logs" / "std_log_process_0.txt"
        assert "uid 0" in log.read_text()
    finally:
        servers.kill_phalanx_server(server)


@pytest.mark.parametrize("cli", ["local"], indirect=True)
def test_a_job_made_on_the_machine_is_walled_off_too(cli: Cli) -> None:
    # A server walled the workspace's jobs off; root then makes a job with its own CLI,
    # whose Python may lie where no other account goes (/root): the supervisor runs on a
    # view of it, as the server's do.
    servers.kill_phalanx_server(servers.start_phalanx_server(cli.home, cli.env))
    cli.write("who/main.py", "import os; print('uid', os.getuid(), flush=True)\n")
    spec = cli.write("who.yml", "command: python main.py\ncode: who\n")
    job = cli.wait(cli.create(spec), ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    log = Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt"
    assert int(log.read_text().split()[1]) >= DEFAULT_FIRST_UID


HOLDER = """
import os, sys, time
from pathlib import Path
print("uid", os.getuid(), flush=True)
go = Path(sys.argv[1])
deadline = time.monotonic() + 300
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
print("released", flush=True)
"""


@SERVER
def test_jobs_of_two_workspaces_on_one_machine_never_share_an_account(
    cli: Cli, tmp_path: Path
) -> None:
    """Two root servers give out uids from the same default range; while a job of one
    holds a uid the other's jobs get others, so one's end never stops the other."""
    go = Path(tempfile.gettempdir()) / f"phalanx-go-{uuid.uuid4().hex}"
    first = _job(cli, "holder", HOLDER, "", f"python main.py {go}")
    first_log = cli.home / "jobs" / first / "user_logs" / "std_log_process_0.txt"
    _wait_for("the first job's uid", lambda: first_log.is_file() and "uid" in first_log.read_text())
    (tmp_path / "other").mkdir()
    other_home = jobpython.workspace_home(tmp_path / "other")
    env = {k: v for k, v in cli.env.items() if k not in ("PHALANX_SERVER", "PHALANX_HOME")}
    other = servers.start_phalanx_server(other_home, env)
    try:
        client = {**env, "PHALANX_SERVER": other.url, "PHALANX_HOME": str(tmp_path / "laptop2")}
        (cli.workdir / "quick").mkdir()
        (cli.workdir / "quick" / "main.py").write_text("import os; print('uid', os.getuid())\n")
        (cli.workdir / "quick.yml").write_text("command: python main.py\ncode: quick\n")
        made = subprocess.run(
            [PHALANX, "job", "create", "-f", "quick.yml"], env=client, cwd=cli.workdir,
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        second = made.stdout.split()[-1]
        streamed = subprocess.run(
            [PHALANX, "job", "stream", second], env=client, cwd=cli.workdir,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert streamed.returncode == 0, streamed.stdout + streamed.stderr
    finally:
        servers.kill_phalanx_server(other)
    uids = [int(line.split()[1]) for line in first_log.read_text().splitlines() if "uid" in line]
    second_uid = int(streamed.stdout.split("uid ")[1].split()[0])
    assert second_uid != uids[0], "the two workspaces' jobs ran as one account"
    # The second job's end (its account's processes killed) left the first one running.
    assert cli.show(first)["status"] == "Running"
    go.touch()
    try:
        job = cli.wait(first, ("Completed", "Failed", "Canceled"), timeout=120)
    finally:
        go.unlink(missing_ok=True)
    assert job["status"] == "Completed" and len(job["attempts"]) == 1, job


def test_the_readme_server_as_root_keeps_its_workspace_where_jobs_reach(tmp_path: Path) -> None:
    """The README's server block as root, PHALANX_HOME unset, HOME a closed folder (as
    /root is): `server token create` and `server start` agree on /var/lib/phalanx, whose
    jobs walled off can reach, instead of refusing over ~/.phalanx (issue 36)."""
    home = Path(tempfile.mkdtemp())  # 0700, as /root
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env["HOME"] = str(home)
    log = tmp_path / "server.log"
    # A mount namespace of its own with an empty /var/lib: nothing of this machine's is
    # touched, and the namespace's tmpfs goes with its last process.
    script = (
        "mount -t tmpfs phalanx-test /var/lib && "
        f"{PHALANX} server token create --user ada --role admin > {tmp_path / 'token'} && "
        f"exec {PHALANX} server start --port {port}"
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd="/",
        )  # fmt: skip
    try:
        servers._wait_port(port, proc, "phalanx server")
        token = (tmp_path / "token").read_text().strip()
        answer = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/jobs",
            headers={"Authorization": f"Bearer {token}"}, timeout=60,
        )  # fmt: skip
        said = log.read_text()
        assert answer.status_code == 200, (answer.text, said)  # the token's workspace
        assert "workspace /var/lib/phalanx on" in said, said
        assert "jobs walled off" in said, said
        assert not (home / ".phalanx").exists()
    finally:
        servers._kill(proc)
        shutil.rmtree(home)


def test_a_server_workspace_defaults_by_who_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phalanx.workspace.layout import SERVICE_HOME, server_home

    monkeypatch.delenv("PHALANX_HOME", raising=False)
    closed, open_ = tmp_path / "closed", tmp_path / "open"
    closed.mkdir(mode=0o700)
    open_.mkdir(mode=0o755)
    monkeypatch.setenv("HOME", str(closed))
    assert server_home() == SERVICE_HOME  # root (these tests run as root), home closed
    monkeypatch.setenv("HOME", str(open_))
    assert server_home() == (open_ / ".phalanx").resolve()
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "chosen"))
    monkeypatch.setenv("HOME", str(closed))
    assert server_home() == (tmp_path / "chosen").resolve()
