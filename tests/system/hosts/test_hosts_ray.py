"""phalanx's Ray path on hosts that share nothing but the network (tests/hostbed.py).

One bed for the module (Ray starts slowly on a small machine): a Ray head host
and two Ray worker hosts (``ray start`` as an operator runs it, each on its own
address), a server host (``phalanx server start``, with a compute target of
type ray at the head's Ray Client address), a client host with only the CLI and
the job's folder, Azurite on a host of its own (the object store), and a second
client host that a test switches off. Ray's processes end with their hosts: the
bed switches every host off (never ``ray stop`` on this machine, which would end
every Ray process of it; on a host it sees only the host's own).

Needs root (CI runs as root); the bed refuses to start otherwise.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import hostbed
from hostbed import Host, HostBed
from phalanx.bench.azurite import find_azurite
from servers import AZURITE_ACCOUNT, AZURITE_KEY
from test_hosts import PORT, SERVER_HOME, _wait_answering, start_postgresql

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

GCS_PORT = 6379
CLIENT_PORT = 10001
BLOB_PORT = 10000
"""Ports on the head host's own network stack: no other process of this machine is there."""
RAY_COMMON = [
    "--disable-usage-stats",
    "--object-store-memory=100000000",  # the hosts share this machine's memory
]


@dataclass
class Team:
    """The bed, with who is where."""

    bed: HostBed
    url: str
    token: str

    @property
    def blob_endpoint(self) -> str:
        return f"http://{self.bed['blob'].address}:{BLOB_PORT}/{AZURITE_ACCOUNT}"

    @property
    def blob_connection(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.blob_endpoint};"
        )

    def client_env(self) -> dict[str, str]:
        return self.bed["client"].env(PHALANX_SERVER=self.url, PHALANX_TOKEN=self.token)


def _ray_env(host: Host) -> dict[str, str]:
    return host.env(RAY_USAGE_STATS_ENABLED="0")


def _alive_nodes(head: Host) -> int:
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print('ALIVE', sum(n['Alive'] for n in ray.nodes()))"
    )
    proc = head.run([sys.executable, "-c", probe, f"{head.address}:{GCS_PORT}"],
                    _ray_env(head), check=False, timeout=60)  # fmt: skip
    counts = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("ALIVE ")]
    return int(counts[-1]) if proc.returncode == 0 and counts else -1


def _wait_nodes(head: Host, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while (alive := _alive_nodes(head)) != count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{alive} Ray node(s) alive after {timeout} s, wanted {count}")
        time.sleep(1)


def _ray_start(host: Host, args: list[str], env: dict[str, str], tries: int = 3) -> None:
    """``ray start`` on ``host``, tried again as an operator would where it gave up: Ray
    bounds a node's start-up at 30 s of its own (its raylet's agents), which a busy
    machine outlasts. What a try left is stopped first (``ray stop`` on the host sees
    only the host's processes)."""
    for attempt in range(1, tries + 1):
        if host.run(["ray", "start", *args], env, timeout=180, check=attempt == tries).returncode:
            host.run(["ray", "stop", "--force"], env, timeout=120, check=False)
        else:
            return


def start_ray_worker(bed: HostBed, name: str) -> None:
    """``ray start --address`` on host ``name``: it joins the head's cluster."""
    host, head = bed[name], bed["head"]
    _ray_start(host, [f"--address={head.address}:{GCS_PORT}", f"--node-ip-address={host.address}",
                      "--num-cpus=1", *RAY_COMMON], _ray_env(host))  # fmt: skip


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    """Ray head, two Ray workers, a server (on PostgreSQL) with a Ray target at the head, a client,
    Azurite (the object store) on a host of its own, and a second client (``laptop``)
    that a test switches off for good."""
    with HostBed(["head", "w1", "w2", "server", "client", "blob", "laptop"]) as bed:
        blob = bed["blob"]
        azurite = blob.popen(
            [str(find_azurite()), "--blobHost", blob.address, "--blobPort", str(BLOB_PORT),
             "--location", "/root/azurite", "--silent", "--skipApiVersionCheck", "--loose"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        head = bed["head"]
        # The head runs no job's node (no CPU to give): the two workers do. Its GCS
        # declares a silent node dead after 5 missed checks 2 s apart (Ray's default is
        # up to a minute), as an operator who wants lost nodes noticed sooner sets it.
        head_env = _ray_env(head)
        head_env.update(RAY_health_check_period_ms="2000", RAY_health_check_timeout_ms="2000")
        _ray_start(head, ["--head", f"--node-ip-address={head.address}", f"--port={GCS_PORT}",
                          f"--ray-client-server-port={CLIENT_PORT}", "--num-cpus=0",
                          "--include-dashboard=false", *RAY_COMMON], head_env)  # fmt: skip
        for name in ("w1", "w2"):
            start_ray_worker(bed, name)
        _wait_nodes(head, 3)
        server = bed["server"]
        # Each node samples its machine every second (the default, 15 s, outlasts the jobs).
        env = server.env(PHALANX_HOME=SERVER_HOME, PHALANX_SYSTEM_METRICS_INTERVAL="1",
                         PHALANX_DB=start_postgresql(server))  # fmt: skip
        token = server.run(["phalanx", "server", "token", "create", "--user", "alice"],
                           env).stdout.split()[0]  # fmt: skip
        start = (f"exec phalanx server start --host {server.address} --port {PORT} "
                 "--workers 1 >/root/server.log 2>&1")  # fmt: skip
        proc = server.popen(["sh", "-c", start], env)
        team = Team(bed, f"http://{server.address}:{PORT}", token)
        _wait_answering(bed["client"], team.url)
        bed["client"].run(["phalanx", "compute", "create", "--name", "cluster", "--type", "ray",
                           "--address", f"ray://{head.address}:{CLIENT_PORT}"],
                          team.client_env(), timeout=120)  # fmt: skip
        _wait_answering(bed["client"], f"http://{blob.address}:{BLOB_PORT}")
        yield team
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        azurite.kill()
        azurite.wait(timeout=30)
    assert hostbed.leftovers(bed.bed) == []


def _story(team: Team, name: str, seen: str) -> str:
    """What the server host kept of job ``name``, for a failed assertion's message."""
    logs = team.bed["server"].run(
        ["sh", "-c", f"tail -n 60 {SERVER_HOME}/jobs/{name}/system_logs/*.txt "
         f"/root/server.log {SERVER_HOME}/scheduler.log"], check=False,
    )  # fmt: skip
    ray = team.bed["head"].run(
        ["sh", "-c", "tail -n 20 /tmp/ray/session_latest/logs/ray_client_server*.err"],
        check=False,
    )
    return (
        f"{seen}\n--- on the server host:\n{logs.stdout}{logs.stderr}"
        f"\n--- Ray Client's servers on the head host:\n{ray.stdout}"
    )


def _wait_status(team: Team, name: str, statuses: tuple[str, ...], timeout: float) -> dict:
    client = team.bed["client"]
    deadline = time.monotonic() + timeout
    shown: dict = {}
    while time.monotonic() < deadline:
        shown = json.loads(
            client.run(["phalanx", "job", "show", name, "--json"], team.client_env()).stdout
        )
        if shown["status"] in statuses:
            return shown
        time.sleep(1)
    raise AssertionError(_story(team, name, f"{name} not {statuses} in {timeout} s: {shown}"))


def _create_and_stream(team: Team, folder: str) -> tuple[str, str, str]:
    """`job create -f job.yml` in ``folder`` on the client host, then `job stream
    --all-ranks` to its end, which must be a success: the job's name, what was streamed,
    and the job's story for assertion messages."""
    client, env = team.bed["client"], team.client_env()
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd=folder)
    name = created.stdout.split()[-1]
    streamed = client.run(["phalanx", "job", "stream", name, "--all-ranks"], env,
                          cwd=folder, timeout=600, check=False)  # fmt: skip
    story = _story(team, name, streamed.stdout + streamed.stderr)
    assert streamed.returncode == 0, story
    return name, streamed.stdout, story


def _rank_hosts(out: str, ending: str, story: str) -> list[str]:
    """The host of each of the 2 ranks, from their first ``rank R on HOST …`` line, which
    must end with ``ending``."""
    hosts = []
    for rank in range(2):
        lines = [ln for ln in out.splitlines() if f"rank {rank} on " in ln]
        assert lines and lines[0].endswith(ending), story
        hosts.append(lines[0].split(" on ")[1].split()[0])
    return hosts


def _fetch(team: Team, path: str) -> bytes:
    """A file of the server's workspace, read from the client host through the API."""
    script = (
        "import sys, urllib.request\n"
        "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + "
        "sys.argv[2]})\n"
        "sys.stdout.buffer.write(urllib.request.urlopen(req, timeout=30).read())\n"
    )
    url = f"{team.url}/api/v1/{urllib.parse.quote(path)}?raw=true"
    return team.bed["client"].run([sys.executable, "-c", script, url, team.token]).stdout.encode()


DDP = """\
import os, pathlib, socket, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
host = socket.gethostname()
print(f"rank {rank} on {host} total {t.item()}", flush=True)
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / f"rank_{rank}.txt").write_text(host)
dist.destroy_process_group()
"""
DDP_SPEC = """\
command: python ddp.py ${{outputs.result}}
code: src
compute: cluster
resources: {instance_count: 2}
distribution: {type: pytorch, process_count_per_instance: 1}
outputs:
  result: {type: uri_folder}
limits: {timeout: 600}
"""


def test_a_two_node_job_from_a_client_host_runs_on_the_two_worker_hosts(team: Team) -> None:
    client = team.bed["client"]
    client.write("/root/ddp/src/ddp.py", DDP)
    client.write("/root/ddp/job.yml", DDP_SPEC)
    name, out, story = _create_and_stream(team, "/root/ddp")
    # Both ranks' lines reached the client, each rank on a worker host of its own.
    hosts = _rank_hosts(out, "total 3.0", story)
    assert sorted(hosts) == ["w1", "w2"], story
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 60)
    assert shown["status"] == "Completed", story
    # The output came back to the server's workspace, readable there and from the client.
    for rank in range(2):
        assert _fetch(team, f"jobs/{name}/files/outputs/result/rank_{rank}.txt") == (
            hosts[rank].encode()
        ), shown
    # Nothing of the job is left on the worker hosts' disks, nor on the client's of the server.
    for worker in ("w1", "w2"):
        left = team.bed[worker].run(["sh", "-c", "ls /root/.phalanx/node/jobs 2>/dev/null"],
                                    check=False).stdout.split()  # fmt: skip
        assert not [d for d in left if d.startswith(name)], left
    assert not client.exists(SERVER_HOME)


def test_a_gcs_address_is_refused_where_no_ray_node_runs(team: Team) -> None:
    """Ray lets only a machine of the cluster join it by its GCS address: the server host
    runs no Ray node, so it says so at once, in one line, rather than a minute later."""
    client, env = team.bed["client"], team.client_env()
    head = team.bed["head"].address
    refused = client.run(["phalanx", "compute", "create", "--name", "by-gcs", "--address",
                          f"{head}:{GCS_PORT}"], env, check=False)  # fmt: skip
    assert refused.returncode == 2, refused
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "runs none" in refused.stderr and f"ray://{head}:{CLIENT_PORT}" in refused.stderr
    client.write("/root/gcs/src/hello.py", "print('hello')\n")
    client.write(
        "/root/gcs/job.yml", f"command: python hello.py\ncode: src\ncompute: {head}:{GCS_PORT}\n"
    )
    name = client.run(
        ["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/gcs"
    ).stdout.split()[-1]
    started = time.monotonic()
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 120)
    assert shown["status"] == "Failed", shown
    assert "runs none" in shown["error"]["message"], shown
    assert time.monotonic() - started < 50  # not Ray's minute of waiting for a raylet


def _blob_container(team: Team, files: dict[str, str]) -> str:
    """A new container on the blob host holding ``files``, made from the client host (as
    a user uploads a data set); its name."""
    container = f"c{time.time_ns():x}"
    script = (
        "import json, sys\n"
        "from azure.storage.blob import BlobServiceClient\n"
        "service = BlobServiceClient.from_connection_string(sys.argv[1])\n"
        "service.create_container(sys.argv[2])\n"
        "for name, text in json.loads(sys.argv[3]).items():\n"
        "    service.get_blob_client(sys.argv[2], name).upload_blob(text.encode())\n"
    )
    team.bed["client"].run([sys.executable, "-c", script, team.blob_connection, container,
                            json.dumps(files)], timeout=120)  # fmt: skip
    return container


def _blob_names(team: Team, container: str, prefix: str) -> dict[str, bytes]:
    """The blobs under ``prefix``, read on the blob host itself."""
    script = (
        "import json, sys\n"
        "from azure.storage.blob import BlobServiceClient\n"
        "service = BlobServiceClient.from_connection_string(sys.argv[1])\n"
        "c = service.get_container_client(sys.argv[2])\n"
        "print(json.dumps({b.name: c.download_blob(b.name).readall().decode(errors='replace')\n"
        "                  for b in c.list_blobs(name_starts_with=sys.argv[3])}))\n"
    )
    out = team.bed["blob"].run(
        [sys.executable, "-c", script, team.blob_connection, container, prefix]
    )
    return {k: v.encode() for k, v in json.loads(out.stdout).items()}


def _datastore(team: Team, name: str, container: str) -> None:
    """Datastore ``name`` on the blob host's ``container``, its key piped in from the
    client and kept by the server (the client's environment is not the server's)."""
    team.bed["client"].run(
        ["phalanx", "datastore", "create", "--name", name, "--type", "azure_blob",
         "--account-name", AZURITE_ACCOUNT, "--container-name", container,
         "--endpoint", team.blob_endpoint, "--store"],
        team.client_env(), input=AZURITE_KEY + "\n", timeout=120,
    )  # fmt: skip


TRAIN = """\
import os, pathlib, socket, sys, time
import torch, torch.distributed as dist
from phalanx.train import Checkpointer
dist.init_process_group("gloo")
rank, host = dist.get_rank(), socket.gethostname()
data, out, where, steps, pause = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), \\
    sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
words = sum(len(p.read_text().split()) for p in sorted(data.rglob("*.txt")))
checkpoints = Checkpointer(where)
loaded = checkpoints.load_latest()
start = loaded.step + 1 if loaded is not None else 0
print(f"rank {rank} on {host} attempt {os.environ['PHALANX_ATTEMPT']} starts at step {start} "
      f"with {words} words", flush=True)
for step in range(start, steps):
    t = torch.ones(1)
    dist.all_reduce(t)
    checkpoints.save({"step": torch.tensor(step), "words": words}, step)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(pause)
checkpoints.close()
out.mkdir(parents=True, exist_ok=True)
(out / f"rank_{rank}.txt").write_text(f"{host} {words}")
dist.destroy_process_group()
"""


def _train_spec(steps: int, pause: float, retries: int = 1, store: str = "blobs") -> str:
    return f"""\
command: >-
  python train.py ${{{{inputs.data}}}} ${{{{outputs.model}}}}
  azureml://datastores/{store}/paths/checkpoints {steps} {pause}
code: src
compute: cluster
inputs:
  data: {{type: uri_folder, path: azureml://datastores/{store}/paths/train, mode: download}}
outputs:
  model: {{type: uri_folder, path: azureml://datastores/{store}/paths/model, mode: upload}}
resources: {{instance_count: 2}}
distribution: {{type: pytorch, process_count_per_instance: 1}}
retry: {{max_attempts: {retries}}}
limits: {{timeout: 600}}
"""


def test_a_job_reads_and_writes_the_blob_host_from_the_worker_hosts(team: Team) -> None:
    """Its input downloaded from the datastore on each worker, its checkpoints saved to the
    datastore, its output uploaded there: nothing passes through the client."""
    client, env = team.bed["client"], team.client_env()
    container = _blob_container(team, {"train/a.txt": "one two three", "train/b/c.txt": "four"})
    _datastore(team, "blobs", container)
    client.write("/root/train/src/train.py", TRAIN)
    client.write("/root/train/job.yml", _train_spec(steps=3, pause=1.0))
    name, out, story = _create_and_stream(team, "/root/train")
    for rank in range(2):
        assert f"rank {rank} step 2" in out, story
    # The output reached the datastore from both worker hosts; the data were read there.
    model = _blob_names(team, container, "model/")
    assert sorted(model) == ["model/rank_0.txt", "model/rank_1.txt"], (model, story)
    assert sorted(v.decode().split()[0] for v in model.values()) == ["w1", "w2"]
    assert {v.decode().split()[1] for v in model.values()} == {"4"}
    # The checkpoints are on the datastore, each committed.
    saved = _blob_names(team, container, "checkpoints/")
    committed = sorted(n.split("/")[1] for n in saved if n.endswith("/COMMITTED"))
    assert committed[-1] == f"step_{2:012d}", sorted(saved)
    # Each worker host sampled its own machine, named by its node; the server host, where
    # no rank ran, sampled nothing.
    metrics = json.loads(client.run(["phalanx", "job", "metrics", name, "--json"], env).stdout)
    for node in range(2):
        assert metrics.get(f"system/node{node}/job_rss_gb"), sorted(metrics)
    assert "system/cpu_percent" not in metrics, sorted(metrics)
    sampled = team.bed["server"].run(
        ["sh", "-c", f"cat {SERVER_HOME}/jobs/{name}/system_metrics_attempt*_node*.jsonl"]
    )
    assert {json.loads(ln)["node"] for ln in sampled.stdout.splitlines()} == {"w1", "w2"}
    # The key reached the ranks in a file of their node's own, gone with the job; it is in
    # no file of a worker host, nor of the job's folder on the server. Not looked for in
    # the install the hosts share read-only (-xdev), which a checkout in ~ puts in /root:
    # Azure's SDK and phalanx's own test helpers hold the emulator's well-known key.
    for host, folder in (("w1", "/root"), ("w2", "/root"), ("server", f"{SERVER_HOME}/jobs")):
        found = team.bed[host].run(
            ["find", folder, "-xdev", "-type", "f", "-exec", "grep", "-lF", AZURITE_KEY, "{}", "+"],
            check=False,
        )
        assert not found.stdout and not found.stderr, (host, found.stdout, found.stderr)


def _committed_steps(team: Team, container: str) -> list[int]:
    """The checkpoint steps committed on the blob host, listed there."""
    script = (
        "import sys\n"
        "from azure.storage.blob import BlobServiceClient\n"
        "service = BlobServiceClient.from_connection_string(sys.argv[1])\n"
        "c = service.get_container_client(sys.argv[2])\n"
        "for b in c.list_blobs(name_starts_with='checkpoints/'):\n"
        "    print(b.name)\n"
    )
    out = team.bed["blob"].run([sys.executable, "-c", script, team.blob_connection, container])
    names = out.stdout.split()
    return sorted(int(n.split("/")[1].removeprefix("step_")) for n in names
                  if n.endswith("/COMMITTED"))  # fmt: skip


def _reboot_ray_worker(team: Team, name: str) -> None:
    """Host ``name`` comes back as a rebooted machine: every process of it ended (Ray's
    gave up on a head they could not reach), its link up, its Ray node started again."""
    host = team.bed[name]
    # From inside the host, -1 reaches every process of it but its first (the bed's).
    host.run(["kill", "-KILL", "-1"], check=False)
    deadline = time.monotonic() + 30
    while len(host.run(["ps", "-e", "-o", "pid="]).stdout.split()) > 2:  # init, ps
        assert time.monotonic() < deadline, host.run(["ps", "-ef"]).stdout
        time.sleep(0.2)
    team.bed.heal(name)
    start_ray_worker(team.bed, name)


def test_a_worker_host_cut_off_mid_training_is_infrastructure_and_the_job_resumes(
    team: Team,
) -> None:
    """A worker's link goes down while the job trains: Ray loses the node, the attempt
    ends as infrastructure, and once the host is back the job resumes on both workers from
    the checkpoint it saved to the datastore."""
    client, env = team.bed["client"], team.client_env()
    container = _blob_container(team, {"train/a.txt": "one two three"})
    _datastore(team, "faults", container)
    client.write("/root/faults/src/train.py", TRAIN)
    client.write("/root/faults/job.yml",
                 _train_spec(steps=30, pause=0.5, retries=3, store="faults"))  # fmt: skip
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/faults")
    name = created.stdout.split()[-1]
    deadline = time.monotonic() + 300
    while not (steps := _committed_steps(team, container)) or steps[-1] < 5:
        assert time.monotonic() < deadline, _story(team, name, "no progress")
        time.sleep(1)
    team.bed.cut("w2")
    cut_at = steps[-1]
    shown = _wait_attempt_over(team, name, 1, timeout=300)
    first = shown["attempts"][0]
    assert first["cause"] == "infrastructure", _story(team, name, json.dumps(first))
    assert "lost" in json.dumps(first), first
    _reboot_ray_worker(team, "w2")
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 600)
    streamed = client.run(["phalanx", "job", "stream", name, "--all-ranks"], env, timeout=120,
                          check=False)  # fmt: skip
    story = _story(team, name, json.dumps(shown["attempts"], indent=1) + streamed.stdout)
    assert shown["status"] == "Completed", story
    assert shown["attempts"][-1]["status"] == "Succeeded", story
    # The last attempt began where the datastore's checkpoint was, on both workers again.
    last = len(shown["attempts"])
    began = [ln for ln in streamed.stdout.splitlines() if f" attempt {last} starts at step " in ln]
    hosts = sorted(ln.split(" on ")[1].split()[0] for ln in began)
    assert hosts == ["w1", "w2"], story
    resumed = {int(ln.split(" starts at step ")[1].split()[0]) for ln in began}
    assert len(resumed) == 1 and resumed.pop() >= cut_at, story
    assert _committed_steps(team, container)[-1] == 29, story


def _wait_attempt_over(team: Team, name: str, number: int, timeout: float) -> dict:
    """``job show`` once attempt ``number`` has ended."""
    client = team.bed["client"]
    deadline = time.monotonic() + timeout
    shown: dict = {}
    while time.monotonic() < deadline:
        shown = json.loads(
            client.run(["phalanx", "job", "show", name, "--json"], team.client_env()).stdout
        )
        attempts = shown["attempts"]
        if len(attempts) >= number and attempts[number - 1]["ended_at"]:
            return shown
        time.sleep(1)
    raise AssertionError(_story(team, name, f"attempt {number} not over in {timeout} s: {shown}"))


PARTITION_S = 20.0
"""How long the server host is cut off from the Ray head (and everything else)."""


def test_a_partition_of_the_server_from_the_head_heals_without_loss_or_duplicates(
    team: Team,
) -> None:
    """The server host's link is down for 20 s while a job trains: once it is back the
    same attempt goes on to the end (nothing lost, nothing run twice), and a `job stream`
    the client began before the partition picks up again and ends with the job."""
    client, env = team.bed["client"], team.client_env()
    container = _blob_container(team, {"train/a.txt": "one two"})
    _datastore(team, "split", container)
    client.write("/root/split/src/train.py", TRAIN)
    client.write("/root/split/job.yml",
                 _train_spec(steps=60, pause=0.5, retries=3, store="split"))  # fmt: skip
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/split")
    name = created.stdout.split()[-1]
    stream = client.popen(["phalanx", "job", "stream", name, "--all-ranks"], env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (steps := _committed_steps(team, container)) or steps[-1] < 5:
            assert time.monotonic() < deadline, _story(team, name, "no progress")
            time.sleep(1)
        team.bed.cut("server")
        time.sleep(PARTITION_S)  # the fault's length, not a wait for a condition
        assert _committed_steps(team, container)[-1] > steps[-1]  # it trained meanwhile
        team.bed.heal("server")
        out, _ = stream.communicate(timeout=600)
    finally:
        if stream.poll() is None:
            stream.kill()
            stream.wait(timeout=30)
    text = out.decode(errors="replace")
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 120)
    story = _story(team, name, json.dumps(shown["attempts"], indent=1) + text[-4000:])
    assert stream.returncode == 0 and shown["status"] == "Completed", story
    assert len(shown["attempts"]) == 1, story  # not run again
    # The stream shows every step of each rank exactly once, the partition's too.
    for rank in range(2):
        for step in range(60):
            assert text.count(f"rank {rank} step {step}\n") == 1, (rank, step, story)


MPI_JOB = """\
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"rank {comm.Get_rank()} on {socket.gethostname()} allreduce {total}", flush=True)
"""


def test_an_mpi_job_runs_its_ranks_on_the_two_worker_hosts(team: Team) -> None:
    """mpirun on node 0's host; node 1's daemon started by its agent on the other host (no
    ssh between them), the ranks talking over the hosts' addresses."""
    client = team.bed["client"]
    client.write("/root/mpi/src/mpi_job.py", MPI_JOB)
    client.write(
        "/root/mpi/job.yml",
        "command: python mpi_job.py\ncode: src\ncompute: cluster\n"
        "resources: {instance_count: 2}\n"
        "distribution: {type: mpi, process_count_per_instance: 1}\nlimits: {timeout: 600}\n",
    )
    _, out, story = _create_and_stream(team, "/root/mpi")
    hosts = _rank_hosts(out, "allreduce 3", story)
    assert sorted(hosts) == ["w1", "w2"], story


IN_IMAGE = """\
import os, pathlib, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
marker = pathlib.Path("/opt/marker").read_text().strip()
print(f"rank {rank} on {socket.gethostname()} marker {marker} total {t.item()}", flush=True)
dist.destroy_process_group()
"""


def test_a_job_in_an_image_built_by_the_worker_hosts(team: Team) -> None:
    """The spec names a Docker context on the client's disk. It travels with the job to
    the server, whose supervisor sends it to the nodes; each worker host builds the image
    in its own podman store (only the base image was put there, as an operator pulls it)
    and runs its node in it. Neither the client nor the server host builds or holds it."""
    from test_containers import IMAGE, make_test_image

    make_test_image()
    for worker in ("w1", "w2"):
        team.bed[worker].load_image(IMAGE)
    client = team.bed["client"]
    value = time.time_ns()  # new content: a fresh build on each host
    client.write("/root/img/ctx/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    client.write("/root/img/ctx/marker.txt", f"built-{value}\n")
    client.write("/root/img/src/in_image.py", IN_IMAGE)
    client.write(
        "/root/img/job.yml",
        "command: python in_image.py\ncode: src\ncompute: cluster\n"
        "environment: {build: {path: ctx}}\nresources: {instance_count: 2}\n"
        "distribution: {type: pytorch, process_count_per_instance: 1}\n"
        "limits: {timeout: 600}\n",
    )
    name, out, story = _create_and_stream(team, "/root/img")
    hosts = _rank_hosts(out, f"marker built-{value} total 3.0", story)
    assert sorted(hosts) == ["w1", "w2"], story
    # Each node's build log came back to the server's workspace.
    for node in range(2):
        log = _fetch(team, f"jobs/{name}/files/system_logs/image_build_node{node}.txt").decode()
        assert "COPY marker.txt" in log, log
    # Each worker host built its own image; the server and client hosts hold none.
    for worker in ("w1", "w2"):
        images = team.bed[worker].run(["podman", "images", "--format", "{{.Repository}}"])
        assert "localhost/phalanx-env" in images.stdout.split(), images.stdout
    for other in ("server", "client"):
        held = team.bed[other].run(["podman", "images", "-q"], check=False)
        assert held.stdout.split() == [], (other, held.stdout, held.stderr)


def test_an_input_on_the_clients_disk_is_refused_for_the_ray_hosts(team: Team) -> None:
    """A folder of the client's reaches the server with the job, but no Ray worker sees
    the server's disk: the job fails in one line naming the input and the fix."""
    client, env = team.bed["client"], team.client_env()
    client.write("/root/local/src/train.py", "print('never')\n")
    client.write("/root/local/data/a.txt", "one\n")
    client.write(
        "/root/local/job.yml",
        "command: python train.py ${{inputs.data}}\ncode: src\ncompute: cluster\n"
        "inputs:\n  data: {type: uri_folder, path: ./data}\n",
    )
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/local")
    name = created.stdout.split()[-1]
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 300)
    message = shown["error"]["message"] if shown["error"] else ""
    assert shown["status"] == "Failed", _story(team, name, json.dumps(shown))
    assert "inputs.data" in message and "does not see" in message, message
    assert "\n" not in message


LIVE = """\
import json, sys, time, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
first = None
with urllib.request.urlopen(req, timeout=120) as events:
    event = ""
    for raw in events:
        line = raw.decode().rstrip("\\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event != "end":
            for rank, text, *_ in json.loads(line[6:])["lines"]:  # cont, time
                first = first or time.time()
                print(f"[{rank}] {text}", flush=True)
        elif line == "" and event == "end":
            break
print("FIRST", first)
"""


def test_the_studios_live_log_reaches_a_client_host_while_ranks_run(team: Team) -> None:
    """The studio page's live log (server-sent events) from the client host: every rank's
    lines, the first while the job still runs, and the end of the stream with the job."""
    client, env = team.bed["client"], team.client_env()
    container = _blob_container(team, {"train/a.txt": "one"})
    _datastore(team, "live", container)
    client.write("/root/live/src/train.py", TRAIN)
    client.write("/root/live/job.yml", _train_spec(steps=10, pause=0.5, store="live"))
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/live")
    name = created.stdout.split()[-1]
    url = f"{team.url}/api/v1/jobs/{name}/logs/events?rank=all"
    live = client.run([sys.executable, "-c", LIVE, url, team.token], timeout=600, check=False)
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 60)
    story = _story(team, name, live.stdout + live.stderr)
    assert live.returncode == 0 and shown["status"] == "Completed", story
    for rank in range(2):
        for step in range(10):
            assert live.stdout.count(f"[{rank}] rank {rank} step {step}\n") == 1, story
    first = float(live.stdout.rsplit("FIRST ", 1)[1])
    ended = shown["attempts"][-1]["ended_at"]
    assert first < dt.datetime.fromisoformat(ended).timestamp(), (first, ended)


def test_a_ray_job_outlives_the_client_host_that_created_it(team: Team) -> None:
    """The laptop creates a 2-node job and is switched off for good at once: the job runs
    to its end on the worker hosts, and another client reads its logs."""
    laptop = team.bed["laptop"]
    env = laptop.env(PHALANX_SERVER=team.url, PHALANX_TOKEN=team.token)
    laptop.write("/root/job/src/ddp.py", DDP)
    laptop.write("/root/job/job.yml", DDP_SPEC)
    created = laptop.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/job")
    name = created.stdout.split()[-1]
    laptop.power_off()
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 600)
    streamed = team.bed["client"].run(["phalanx", "job", "stream", name, "--all-ranks"],
                                      team.client_env(), timeout=120, check=False)  # fmt: skip
    story = _story(team, name, json.dumps(shown) + streamed.stdout)
    assert shown["status"] == "Completed", story
    for rank in range(2):
        assert f"rank {rank} on w" in streamed.stdout, story


UNNAMED = """\
import sys
import torch.distributed as dist
from phalanx.train import Checkpointer
dist.init_process_group("gloo")
Checkpointer("azureml://datastores/" + sys.argv[1] + "/paths/checkpoints")
"""


def test_a_datastore_the_spec_does_not_name_is_refused_on_the_ray_hosts(team: Team) -> None:
    """A rank resolves only the datastores its spec names: one the server has but the spec
    does not name is refused in one line, and no workspace is made on the node for it."""
    client, env = team.bed["client"], team.client_env()
    _datastore(team, "unnamed", _blob_container(team, {}))
    client.write("/root/unnamed/src/train.py", UNNAMED)
    client.write(
        "/root/unnamed/job.yml",
        "command: python train.py unnamed\ncode: src\ncompute: cluster\n"
        "resources: {instance_count: 2}\n"
        "distribution: {type: pytorch, process_count_per_instance: 1}\n",
    )
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/unnamed")
    name = created.stdout.split()[-1]
    shown = _wait_status(team, name, ("Completed", "Failed", "Canceled"), 300)
    message = shown["error"]["message"] if shown["error"] else ""
    assert shown["status"] == "Failed", _story(team, name, json.dumps(shown))
    assert "datastore 'unnamed' is not one this job may use" in message, message
    assert "name it in an input, an output or the command" in message, message
    for worker in ("w1", "w2"):
        made = team.bed[worker].run(["find", "/root", "-name", "phalanx.db"]).stdout
        assert made == "", (worker, made)
