"""phalanx's Ray path on hosts that share nothing but the network (tests/hostbed.py).

One bed for the module (Ray starts slowly on a small machine): a Ray head host
and two Ray worker hosts (``ray start`` as an operator runs it, each on its own
address), a server host (``phalanx server start``, with a compute target of
type ray at the head) and a client host with only the CLI and the job's folder.
Ray's processes end with their hosts: the bed switches every host off (never
``ray stop``, which would end every Ray process of this machine).

Needs root (CI runs as root); the bed refuses to start otherwise.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import hostbed
from hostbed import Host, HostBed
from test_hosts import PORT, SERVER_HOME, _wait_answering

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

GCS_PORT = 6379
CLIENT_PORT = 10001
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


def start_ray_worker(bed: HostBed, name: str) -> None:
    """``ray start --address`` on host ``name``: it joins the head's cluster."""
    host, head = bed[name], bed["head"]
    host.run(["ray", "start", f"--address={head.address}:{GCS_PORT}",
              f"--node-ip-address={host.address}", "--num-cpus=1", *RAY_COMMON],
             _ray_env(host), timeout=180)  # fmt: skip


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    """Ray head, two Ray workers, a server with a Ray target at the head, a client."""
    with HostBed(["head", "w1", "w2", "server", "client"]) as bed:
        head = bed["head"]
        # The head runs no job's node (no CPU to give): the two workers do.
        head.run(["ray", "start", "--head", f"--node-ip-address={head.address}",
                  f"--port={GCS_PORT}", f"--ray-client-server-port={CLIENT_PORT}",
                  "--num-cpus=0", "--include-dashboard=false", *RAY_COMMON],
                 _ray_env(head), timeout=180)  # fmt: skip
        for name in ("w1", "w2"):
            start_ray_worker(bed, name)
        _wait_nodes(head, 3)
        server = bed["server"]
        env = server.env(PHALANX_HOME=SERVER_HOME)
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
        yield team
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert hostbed.leftovers() == []


def _story(team: Team, name: str, seen: str) -> str:
    """What the server host kept of job ``name``, for a failed assertion's message."""
    logs = team.bed["server"].run(
        ["sh", "-c", f"tail -n 60 {SERVER_HOME}/jobs/{name}/system_logs/*.txt "
         f"/root/server.log {SERVER_HOME}/scheduler.log"], check=False,
    )  # fmt: skip
    return f"{seen}\n--- on the server host:\n{logs.stdout}{logs.stderr}"


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
    client, env = team.bed["client"], team.client_env()
    client.write("/root/ddp/src/ddp.py", DDP)
    client.write("/root/ddp/job.yml", DDP_SPEC)
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/ddp")
    name = created.stdout.split()[-1]
    streamed = client.run(["phalanx", "job", "stream", name, "--all-ranks"], env,
                          cwd="/root/ddp", timeout=600, check=False)  # fmt: skip
    story = _story(team, name, streamed.stdout + streamed.stderr)
    assert streamed.returncode == 0, story
    # Both ranks' lines reached the client, each rank on a worker host of its own.
    hosts = {}
    for rank in range(2):
        lines = [ln for ln in streamed.stdout.splitlines() if f"rank {rank} on " in ln]
        assert lines and lines[0].endswith("total 3.0"), story
        hosts[rank] = lines[0].split(" on ")[1].split()[0]
    assert sorted(hosts.values()) == ["w1", "w2"], story
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
