"""An independent review of issue 21's walls, tried as attackers would (each test FAILS
while the hole it names is open, and asserts the safe behaviour).

One real ``phalanx server start`` as root, with tokens, so every job runs walled off as
an account of its own; an admin stores a credential (the canary) in the server's
secrets file. Each attack is made as a member (``bob``) through the HTTP API with the
member's token, or by the code of bob's job, and checks that no byte of the canary
came back and that nobody else's record changed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import jobpython
import servers
from conftest import BIN, PHALANX, job_processes_under, workspace_processes

pytestmark = pytest.mark.slow

USERS = {"root": "admin", "alice": "member", "bob": "member", "vic": "viewer"}
ENDED = ("Completed", "Failed", "Canceled")


@dataclass
class Team:
    """A server with tokens (jobs walled off), a token per user, a stored canary."""

    server: servers.PhalanxServer
    home: Path
    tokens: dict[str, str]
    canary: str

    def api(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url + "/api/v1",
            headers={"authorization": f"Bearer {self.tokens[user]}"},
            timeout=120,
        )

    def upload(self, user: str, files: dict[str, bytes]) -> str:
        """``PUT /uploads`` of a tar holding ``files``; the upload's id."""
        with self.api(user) as api:
            answer = api.put("/uploads", content=_tar(files))
        assert answer.status_code == 201, answer.text
        return str(answer.json()["upload"])

    def submit(
        self,
        user: str,
        name: str,
        script: str,
        body: str = "",
        files: dict[str, bytes] | None = None,
    ) -> str:
        """Create job ``name`` running ``script`` (its code uploaded, as the CLI does)."""
        code = {"code/main.py": script.encode(), **(files or {})}
        places = {"code": "code"}
        if any(k.startswith("req/") for k in code):
            places["environment.pip_file"] = "req/requirements.txt"
        spec = (
            f"type: command\nname: {name}\ncode: code\ncommand: python main.py\n"
            f"limits: {{timeout: 300}}\n{body}"
        )
        upload = self.upload(user, code)
        with self.api(user) as api:
            made = api.post("/jobs", json={"spec": spec, "upload": upload, "places": places})
        assert made.status_code == 201, made.text
        return name

    def job(self, user: str, name: str) -> dict[str, Any]:
        with self.api(user) as api:
            answer = api.get(f"/jobs/{name}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def wait(self, user: str, name: str, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (job := self.job(user, name))["status"] not in ENDED:
            assert time.monotonic() < deadline, f"job {name} still {job['status']}"
            time.sleep(0.3)
        return job

    def log_says(self, name: str, text: str, timeout: float = 120) -> None:
        """Wait until rank 0's log of job ``name`` holds ``text`` (read as root)."""
        log = self.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
        deadline = time.monotonic() + timeout
        while not (log.is_file() and text in log.read_text(errors="replace")):
            assert time.monotonic() < deadline, f"job {name} never logged {text!r}"
            time.sleep(0.2)

    def cancel(self, user: str, name: str) -> None:
        with self.api(user) as api:
            api.post(f"/jobs/{name}/cancel")


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    root = tmp_path_factory.mktemp("review")
    home = jobpython.workspace_home(root)  # reachable by the jobs' accounts
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(
        PHALANX_HOME=str(home),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PHALANX_CACHE_DIR=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
    )
    tokens = {}
    for user, role in USERS.items():
        made = subprocess.run(
            [PHALANX, "server", "token", "create", "--user", user, "--role", role],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        tokens[user] = made.stdout.strip()
    # One serving process: its memory is the server's (see the metrics test).
    server = servers.start_phalanx_server(home, env, "--auth", "--workers", "1")
    canary = f"canary-{uuid.uuid4().hex}"
    made_team = Team(server, home, tokens, canary)
    with made_team.api("root") as admin:
        stored = admin.post(
            "/datastores",
            json={
                "name": "vault", "type": "s3", "bucket": "b", "store": True,
                "endpoint_url": "http://127.0.0.1:9", "no_check": True,
                "piped": {"key": canary, "secret": canary},
            },
        )  # fmt: skip
    assert stored.status_code == 201, stored.text
    assert canary in (home / "secrets.json").read_text()
    yield made_team
    servers.kill_phalanx_server(server)
    for proc in [*job_processes_under(home), *workspace_processes(home)]:
        with contextlib.suppress(psutil.Error):
            proc.kill()


# A job's code writes its attempt's record of rank 0 itself, naming the server's
# secrets file as the rank's log, and kills its wrapper so that nothing overwrites the
# record. The supervisor (root) reads the rank's "log" for the root cause.
FORGED_RECORD = """
import json, os, signal, time
from pathlib import Path
home = Path(os.environ["PHALANX_JOB_DIR"]).parent.parent
attempt = Path(os.environ["PHALANX_ERROR_FILE"]).parent
record = {"rank": 0, "exit_code": 1, "signal": None, "signals_received": [],
          "ended_at": time.time(), "error": None, "log_file": str(home / "secrets.json")}
(attempt / "rank_0.json").write_text(json.dumps(record))
print("record planted", flush=True)
# The rank wrapper copies this output into the log: kill it only once it has (what a
# rank writes in the instant its wrapper is SIGKILLed may be lost with the wrapper).
log = Path(os.environ["PHALANX_JOB_DIR"]) / "user_logs" / "std_log_process_0.txt"
deadline = time.time() + 30
while time.time() < deadline and "record planted" not in log.read_text(errors="replace"):
    time.sleep(0.05)
pid = os.getpid()
while "phalanx.launch.worker" not in Path(f"/proc/{pid}/cmdline").read_text():
    pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
os.kill(pid, signal.SIGKILL)
"""


def test_a_forged_rank_record_does_not_make_root_read_the_servers_files(team: Team) -> None:
    name = team.submit("bob", f"forged-{uuid.uuid4().hex[:8]}", FORGED_RECORD)
    job = team.wait("bob", name)
    team.log_says(name, "record planted")  # the attack ran
    assert job["status"] == "Failed"
    shown = json.dumps(job)
    assert team.canary not in shown, "the root cause carries the server's secrets.json"
    assert "secrets.json" not in json.dumps(job.get("error"))


# An in-tree PEP 517 build backend: pip runs its hooks to build the "package" the job's
# requirements name. Whoever runs pip runs this code.
BACKEND = """
import os
from pathlib import Path

def _hook(*args, **kwargs):
    try:
        found = (Path(os.environ["PHALANX_HOME"]) / "secrets.json").read_text()
    except Exception as exc:
        found = repr(exc)
    raise SystemExit(f"BACKEND uid={os.getuid()} read={found!r}")

get_requires_for_build_wheel = prepare_metadata_for_build_wheel = build_wheel = _hook
"""
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'


def test_a_members_pip_file_runs_no_code_as_root(team: Team) -> None:
    name = team.submit(
        "bob", f"pipbuild-{uuid.uuid4().hex[:8]}", "print('never')\n",
        "environment:\n  pip_file: requirements.txt\n",
        {
            "code/evil/pyproject.toml": PYPROJECT.encode(),
            "code/evil/backend.py": BACKEND.encode(),
            "req/requirements.txt": b"../code/evil\n",  # pip's folder: the file's
        },
    )  # fmt: skip
    job = team.wait("bob", name)
    with team.api("bob") as bob:
        log = bob.get(f"/jobs/{name}/files/system_logs/environment.txt", params={"raw": True})
    seen = log.text + json.dumps(job)
    assert team.canary not in seen, "the build read the server's secrets.json"
    assert "BACKEND uid=0 " not in seen, "a member's build code ran as root"


# The job's checkpoints hold plain files when they are listed for registration; once
# root opens the first one (inotify says so), the second becomes a link to the
# server's secrets file.
SWAP = """
import ctypes, os, time
from pathlib import Path
home = Path(os.environ["PHALANX_JOB_DIR"]).parent.parent
out = Path(os.environ["PHALANX_JOB_DIR"]) / "checkpoints"
first = out / "a0.bin"
first.write_bytes(bytes(32 << 20))
(out / "a1.txt").write_text("plain\\n")
link = Path(os.environ["TMPDIR"]) / "link"
os.symlink(home / "secrets.json", link)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
assert libc.inotify_add_watch(fd, str(first).encode(), 0x20) >= 0  # IN_OPEN
print("armed", flush=True)
os.read(fd, 4096)
os.rename(link, out / "a1.txt")
print("swapped", flush=True)
time.sleep(300)
"""


def test_registering_a_running_jobs_output_never_follows_a_link_swapped_in(team: Team) -> None:
    name = team.submit("bob", f"swap-{uuid.uuid4().hex[:8]}", SWAP)
    try:
        team.log_says(name, "armed")
        model = f"loot-{uuid.uuid4().hex[:8]}"
        with team.api("bob") as bob:
            made = bob.post(
                "/models",
                json={"name": model, "path": f"azureml://jobs/{name}/outputs/checkpoints"},
            )
            leaked = []
            for f in made.json()["files"] if made.status_code == 201 else []:
                data = bob.get(f"/models/{model}/file", params={"path": f["path"]}).content
                if team.canary.encode() in data:
                    leaked.append(f["path"])
        assert made.status_code in (201, 400, 403, 409), made.text
        assert leaked == [], "the model's files hold the server's secrets.json"
    finally:
        team.cancel("bob", name)


# Bob's job names an output after a data asset nobody has registered yet; it waits
# until Alice has registered the name, then completes.
WAIT_FOR_GO = """
import os, time
from pathlib import Path
Path(os.environ["PHALANX_OUTPUT_D"], "data.csv").write_text("bob's rows\\n")
print("waiting", flush=True)
while not Path("go").exists():
    time.sleep(0.2)
"""


def test_a_jobs_named_output_publishes_no_version_of_anothers_name(team: Team) -> None:
    asset = f"shared-{uuid.uuid4().hex[:8]}"
    name = team.submit(
        "bob", f"squat-{uuid.uuid4().hex[:8]}", WAIT_FOR_GO,
        f"outputs:\n  d: {{type: uri_folder, name: {asset}}}\n",
    )  # fmt: skip
    team.log_says(name, "waiting")
    upload = team.upload("alice", {"rows.csv": b"alice's rows\n"})
    with team.api("alice") as alice:
        made = alice.post("/data", json={"name": asset, "upload": upload})
    assert made.status_code == 201, made.text
    (team.home / "jobs" / name / "code" / "go").write_text("")
    team.wait("bob", name)
    with team.api("vic") as vic:
        latest = vic.get(f"/data/{asset}").json()
    assert (latest["version"], latest["owner"]) == ("1", "alice"), latest


POISON = """
import os
from pathlib import Path
Path(os.environ["PHALANX_OUTPUT_OUT"], "rows.csv").write_text("bob's poisoned rows\\n")
"""


def test_a_members_job_does_not_rewrite_anothers_data_asset(team: Team) -> None:
    upload = team.upload("alice", {"rows.csv": b"alice's rows\n"})
    asset = f"clean-{uuid.uuid4().hex[:8]}"
    with team.api("alice") as alice:
        made = alice.post("/data", json={"name": asset, "upload": upload})
    assert made.status_code == 201, made.text
    path = made.json()["path"]  # azureml://datastores/default/paths/uploads/<id>
    name = f"poison-{uuid.uuid4().hex[:8]}"
    spec = f"outputs:\n  out: {{type: uri_folder, path: {path}, mode: upload}}\n"
    with contextlib.suppress(AssertionError):  # refused at create: the safe outcome
        team.submit("bob", name, POISON, spec)
        team.wait("bob", name)
    folder = team.home / "datastore" / path.split("/paths/", 1)[1]
    assert (folder / "rows.csv").read_text() == "alice's rows\n"


# A sparse file costs the job no disk, and the server reads all of it.
SPARSE_METRICS = """
import os, time
from pathlib import Path
os.truncate(Path(os.environ["PHALANX_JOB_DIR"]) / "metrics.jsonl", 256 << 20)
print("grown", flush=True)
time.sleep(300)
"""


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


def test_a_jobs_metrics_file_is_read_in_bounded_memory(team: Team) -> None:
    name = team.submit("bob", f"metrics-{uuid.uuid4().hex[:8]}", SPARSE_METRICS)
    try:
        team.log_says(name, "grown")
        pid = team.server.proc.pid  # --workers 1: the serving process itself
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from now
        before = _peak_rss(pid)
        with team.api("vic") as vic:
            answer = vic.get(f"/jobs/{name}/metrics")
        grown = _peak_rss(pid) - before
        assert answer.status_code in (200, 400, 413), answer.text
        assert grown < 64 << 20, f"one metrics request grew the server by {grown >> 20} MiB"
    finally:
        team.cancel("bob", name)


BAD_LOG_NAME = """
import os
from pathlib import Path
logs = Path(os.environ["PHALANX_JOB_DIR"]) / "user_logs"
(logs / "std_log_process_x.txt").write_text("a file of the job's own\\n")
print("planted", flush=True)
"""


def test_a_file_a_job_names_in_its_logs_folder_breaks_no_route(team: Team) -> None:
    name = team.submit("bob", f"logname-{uuid.uuid4().hex[:8]}", BAD_LOG_NAME)
    team.log_says(name, "planted")
    deadline = time.monotonic() + 120
    with team.api("vic") as vic:
        while True:  # its status, without the route under test
            listed = vic.get("/jobs", params={"limit": 50}).json()["jobs"]
            if next(j for j in listed if j["name"] == name)["status"] in ENDED:
                break
            assert time.monotonic() < deadline
            time.sleep(0.3)
        for route in ("", "/logs?all_ranks=true", "/logs/page?rank=all"):
            answer = vic.get(f"/jobs/{name}{route}")
            assert answer.status_code == 200, (route, answer.status_code, answer.text)


# Attempt 1 swaps its output folder for a link to a folder of root's; once its
# supervisor is lost (a crash, the OOM killer, a reboot, the database gone for 30
# minutes) the next supervisor prepares the job again, as root.
PLANT_OUTPUT_LINK = """
import os, shutil, time
from pathlib import Path
out, target = Path(os.environ["PHALANX_OUTPUT_OUT"]), os.environ["TARGET"]
if os.environ["PHALANX_ATTEMPT"] == "1":
    shutil.rmtree(out)
    os.symlink(target, out)
    print("planted", flush=True)
    time.sleep(300)
try:
    Path(target, "written-by-the-job").write_text("the job owns this folder")
    print("wrote into root's folder", flush=True)
except OSError as exc:
    print("refused:", exc, flush=True)
"""


def _supervisor_of(name: str) -> psutil.Process:
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmdline = proc.cmdline()
            if "phalanx.jobs.supervisor" in cmdline and name in cmdline:
                return proc
    raise AssertionError(f"no supervisor of {name}")


def test_a_lost_supervisors_successor_follows_no_link_the_job_planted(team: Team) -> None:
    parent = Path(tempfile.mkdtemp(prefix="review-"))
    target = parent / "roots"  # any folder of root's (not directly in /tmp)
    target.mkdir(mode=0o700)
    try:
        name = team.submit(
            "bob", f"relink-{uuid.uuid4().hex[:8]}", PLANT_OUTPUT_LINK,
            f"retry: {{max_attempts: 3}}\nenvironment_variables: {{TARGET: '{target}'}}\n"
            "outputs:\n  out: {type: uri_folder}\n",
        )  # fmt: skip
        team.log_says(name, "planted")
        _supervisor_of(name).kill()  # lost, as a crash or the OOM killer would lose it
        job = team.wait("bob", name, timeout=240)
        assert len(job["attempts"]) >= 2, job  # the job was prepared again
        assert target.stat().st_uid == 0, "root gave its folder to the job's account"
        assert list(target.iterdir()) == []
    finally:
        shutil.rmtree(parent, ignore_errors=True)


HOLD = """
import time
print("up", flush=True)
time.sleep(300)
"""


def _successor_of(team: Team, name: str, lost: int, timeout: float = 120) -> psutil.Process:
    """The supervisor the scheduler started in ``lost``'s place, once it holds the job."""
    deadline = time.monotonic() + timeout
    with team.api("root") as root:
        while True:
            pid = root.get(f"/jobs/{name}").json()["supervisor_pid"]
            if pid not in (None, lost):
                return psutil.Process(pid)
            assert time.monotonic() < deadline, f"no supervisor took {name} over"
            time.sleep(0.02)


def test_a_cancel_right_after_a_recovery_leaves_no_uid_held(team: Team) -> None:
    """A job recovered from a lost supervisor keeps its uid for its next supervisor. One
    canceled before that supervisor prepared it (2 of 5 cancels in issue 36, item 12) held
    the uid for ever. Here the successor is stopped as soon as it holds the job, so the
    cancel lands in that window every time."""
    claims = team.home / "server" / "accounts"
    for round_ in range(3):
        name = team.submit("alice", f"recovered-{round_}-{uuid.uuid4().hex[:6]}", HOLD,
                           "retry: {max_attempts: 3}\n")  # fmt: skip
        team.log_says(name, "up")
        folder = team.home / "jobs" / name
        uid = json.loads((folder / "account.json").read_text())["uid"]
        lost = _supervisor_of(name)
        lost.kill()  # lost, as a crash or the OOM killer would lose it
        successor = _successor_of(team, name, lost.pid)
        successor.suspend()
        try:
            with team.api("alice") as alice, ThreadPoolExecutor(1) as pool:
                asked = pool.submit(alice.post, f"/jobs/{name}/cancel")
                time.sleep(1.0)  # the cancel has signalled the successor, which sleeps
                successor.resume()
                answer = asked.result(timeout=120)
        finally:
            with contextlib.suppress(psutil.Error):
                successor.resume()
        assert answer.status_code == 200, answer.text
        assert team.wait("alice", name)["status"] == "Canceled"
        # Its end ended its account: no claim of its uid, here or on the machine.
        assert not (folder / "account.json").exists(), round_
        assert not (claims / str(uid)).exists(), round_
        machine = Path("/run/phalanx/accounts") / str(uid)
        assert not machine.exists() or machine.read_text() != str(folder), round_


# The job swaps its upload-mode output folder for a link to a folder of the server's and
# asks for an upload; the supervisor, as root, keeps its upload manifest there.
SWAP_UPLOAD_FOLDER = """
import os, shutil, time
from pathlib import Path
job = Path(os.environ["PHALANX_JOB_DIR"])
out = Path(os.environ["PHALANX_OUTPUT_LOOT"])
(out / "x.txt").write_text("x")
shutil.rmtree(out)
os.symlink(job.parent.parent / "server", out)
(job / "upload.request").touch()
print("swapped", flush=True)
time.sleep(5)
"""


def test_an_upload_writes_nothing_through_a_folder_the_job_swapped_for_a_link(
    team: Team,
) -> None:
    manifest = team.home / "server" / ".phalanx-upload.json"
    assert not manifest.exists()
    name = team.submit(
        "bob", f"manifest-{uuid.uuid4().hex[:8]}", SWAP_UPLOAD_FOLDER,
        "outputs:\n  loot: {type: uri_folder, mode: upload, "
        f"path: azureml://datastores/default/paths/loot-{uuid.uuid4().hex[:8]}}}\n",
    )  # fmt: skip
    team.wait("bob", name)
    team.log_says(name, "swapped")
    assert not manifest.exists(), "root wrote into server/ through the job's link"


# The supervisor (root) reads every rank record of the attempt whole, ten times a
# second; a sparse one costs the job nothing. (Sized to just under the machine's
# memory, it makes the OOM killer take the supervisor: a lost supervisor, see above.)
SPARSE_RANK_RECORD = """
import os, time
from pathlib import Path
attempt = Path(os.environ["PHALANX_ERROR_FILE"]).parent
with open(attempt / "rank_9.json", "wb") as f:
    f.truncate(256 << 20)
print("grown", flush=True)
time.sleep(300)
"""


def test_the_supervisor_reads_rank_records_in_bounded_memory(team: Team) -> None:
    name = team.submit("bob", f"records-{uuid.uuid4().hex[:8]}", SPARSE_RANK_RECORD)
    try:
        team.log_says(name, "grown")
        pid = _supervisor_of(name).pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = _peak_rss(pid)
        deadline = time.monotonic() + 5  # fifty of its polls
        while (grown := _peak_rss(pid) - before) < 64 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert grown < 64 << 20, f"the supervisor grew by {grown >> 20} MiB reading one record"
    finally:
        team.cancel("bob", name)


def _wheel(name: str, module: str) -> tuple[str, bytes]:
    """A pure-Python wheel holding ``module`` as ``<name>.py``: installing it runs no code."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-0.1"
    files = {
        f"{name}.py": module.encode(),
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode()
        ),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{n},sha256={digest(d)},{len(d)}\n" for n, d in files.items())
    files[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{dist}-py3-none-any.whl", buffer.getvalue()


def test_a_members_build_code_runs_as_the_jobs_account_and_its_environment_is_roots(
    team: Team,
) -> None:
    # A build backend beside the requirements: pip runs it, as the job's account.
    name = team.submit(
        "bob", f"pipuid-{uuid.uuid4().hex[:8]}", "print('never')\n",
        "environment:\n  pip_file: requirements.txt\n",
        {
            "req/evil/pyproject.toml": PYPROJECT.encode(),
            "req/evil/backend.py": BACKEND.encode(),
            "req/requirements.txt": b"./evil\n",
        },
    )  # fmt: skip
    job = team.wait("bob", name)
    with team.api("bob") as bob:
        log = bob.get(f"/jobs/{name}/files/system_logs/environment.txt", params={"raw": True})
    assert job["status"] == "Failed" and "pip install failed" in job["error"]["message"]
    uids = [int(w.split("=")[1]) for w in log.text.split() if w.startswith("uid=")]
    assert uids and 0 not in uids, log.text  # the backend ran, and not as root
    assert team.canary not in log.text + json.dumps(job)
    # A package that builds runs in the job; the environment is root's, read-only to it.
    wheel, data = _wheel("mypkg", "WHO = 'from the wheel'\n")
    name = team.submit(
        "bob", f"pipok-{uuid.uuid4().hex[:8]}",
        "import os, sys, mypkg\n"
        "print(mypkg.WHO, os.getuid(), os.access(mypkg.__file__, os.W_OK), sys.prefix, sep='|')\n",
        "environment:\n  pip_file: requirements.txt\n",
        {f"req/{wheel}": data, "req/requirements.txt": f"./{wheel}\n".encode()},
    )  # fmt: skip
    job = team.wait("bob", name)
    assert job["status"] == "Completed", job
    out = (team.home / "jobs" / name / "user_logs" / "std_log_process_0.txt").read_text()
    said, uid, writable, prefix = out.strip().splitlines()[-1].split("|")
    assert (said, writable) == ("from the wheel", "False"), out
    assert int(uid) != 0 and Path(prefix).stat().st_uid == 0
    assert not [p for p in Path(prefix).rglob("*") if not p.is_symlink() and p.lstat().st_uid != 0]
