"""Elastic compute on Ray's real autoscaler (issue 24).

The cluster is a Ray head at no CPUs with Ray's own autoscaler over its fake
multi-node provider (``phalanx.bench.raycluster.start_autoscaling_cluster``),
which starts and stops real raylet processes of this machine as worker nodes of
1 CPU each (a node type of up to 3). phalanx's target over it may grow to 2.
No GPU runs here; everything else is what a real elastic cluster does.

Each test starts from a cluster at 0 workers with no resource request; its own
workspace's probe and scheduler end with the test (the ``cli`` fixture).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.bench.raycluster import (
    RayCluster,
    start_autoscaling_cluster,
    stop_cluster,
    take_worker,
    worker_nodes,
)
from phalanx.kinds.ray.settings import LOW_PRIORITY_RESOURCE
from phalanx.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

IDLE_S = 6.0
"""The autoscaler's own idle timeout (``idle_timeout_minutes``), in seconds."""


@pytest.fixture(scope="module")
def elastic_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    cluster = start_autoscaling_cluster(
        tmp_path_factory.mktemp("elastic"), {"cpu1": {"CPU": 1}}, max_workers=3,
        idle_timeout_s=IDLE_S,
    )  # fmt: skip
    yield cluster
    stop_cluster(cluster)


def request(cluster: RayCluster, bundles: list[dict[str, float]]) -> None:
    """Set the cluster's resource request as phalanx's probe would (``[]``: none)."""
    script = (
        "import json, ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR')\n"
        "from ray.autoscaler.sdk import request_resources\n"
        "request_resources(bundles=json.loads(sys.argv[2]))\n"
    )
    subprocess.run([sys.executable, "-c", script, cluster.gcs_address, json.dumps(bundles)],
                   env=cluster.env, check=True, capture_output=True, timeout=60)  # fmt: skip


def wait_workers(cluster: RayCluster, count: int, timeout: float) -> float:
    """Block until the cluster has ``count`` worker nodes; the seconds it took."""
    start = time.monotonic()
    while (now := len(worker_nodes(cluster))) != count:
        assert time.monotonic() - start < timeout, f"{now} workers after {timeout} s, not {count}"
        time.sleep(0.5)
    return time.monotonic() - start


@pytest.fixture
def empty(elastic_cluster: RayCluster) -> RayCluster:
    """The cluster at 0 workers, no request left by a test before."""
    request(elastic_cluster, [])
    wait_workers(elastic_cluster, 0, timeout=IDLE_S + 60)
    return elastic_cluster


class Watch:
    """The most worker nodes the cluster had, looked at every moment on a thread."""

    def __init__(self, cluster: RayCluster) -> None:
        self.cluster = cluster
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(RuntimeError):  # a reading that failed: the next counts
                self.most = max(self.most, len(worker_nodes(self.cluster)))
            # A node lives at least the autoscaler's idle timeout (6 s): a look every
            # second or two sees each, at little CPU.
            self._stop.wait(1.0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=90)
        return self.most


def elastic_target(cli: Cli, cluster: RayCluster, name: str = "elastic", *extra: str) -> None:
    cli.run("compute", "create", "--name", name, "--type", "ray", "--address",
            cluster.client_address, "--max-nodes", "2", "--min-nodes", "0",
            "--idle-time-before-scale-down", "4s", "--node-cpus", "1",
            "--cpus-per-node", "1", *extra, check=True)  # fmt: skip


STEPS = """
import os, time
rank = int(os.environ["RANK"])
for step in range(3):
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(float(os.environ.get("PAUSE", "0.5")))
"""


def job_spec(cli: Cli, nodes: int, pause: float = 0.5, timeout: int = 300) -> Path:
    cli.write("src/steps.py", STEPS)
    return cli.write(
        f"job{nodes}.yml",
        "command: python steps.py\ncode: src\ncompute: elastic\n"
        f"environment_variables: {{PAUSE: '{pause}'}}\n"
        f"resources: {{instance_count: {nodes}}}\n"
        "distribution: {type: pytorch, process_count_per_instance: 1}\n"
        f"limits: {{timeout: {timeout}}}\n",
    )


def queue_of(cli: Cli, target: str = "elastic") -> dict:
    views = json.loads(cli.run("queue", "--compute", target, "--json", check=True).stdout)
    return views[0]


def until(what: str, check: object, timeout: float = 120, seen: object = None) -> object:
    """Poll ``check`` until it is true; ``seen()`` says what was there instead."""
    deadline = time.monotonic() + timeout
    while not (value := check()):  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}; instead: {seen() if seen else value}")  # type: ignore[operator]
        time.sleep(0.3)
    return value


def test_a_job_waits_for_nodes_the_autoscaler_adds_and_they_go_after_it(
    cli: Cli, empty: RayCluster
) -> None:
    """An empty cluster, max 2: a 2-node job says it waits for 2 nodes, the autoscaler
    adds them, the job completes, and the nodes are removed after the idle times."""
    elastic_target(cli, empty)
    watch = Watch(empty)
    name = cli.create(job_spec(cli, nodes=2))
    reason = until(
        "the job waits for nodes",
        lambda: (cli.show(name).get("queue") or {}).get("reason", "").startswith("waiting for"),
        timeout=60,
    )
    assert reason
    seen = cli.show(name)["queue"]["reason"]
    assert seen.startswith("waiting for 2 nodes: cluster 0 → 2 of max 2"), seen
    job = cli.wait(name, ("Completed", "Failed"), timeout=300)
    assert job["status"] == "Completed", job
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_1.txt").read_text()
    assert "rank 1 step 2" in log
    scaling = queue_of(cli)["scaling"]
    assert (scaling["max_nodes"], scaling["min_nodes"]) == (2, 0)
    # The nodes go: phalanx withdraws its request after its idle time (4 s), then Ray's
    # own idle timeout removes them.
    took = wait_workers(empty, 0, timeout=4 + IDLE_S + 60)
    assert watch.stop() == 2
    assert queue_of(cli)["scaling"]["requested"] == 0
    until(  # the probe reads the nodes every 5 s
        "compute show says the cluster is back at 0",
        lambda: (
            "elastic: 0 → 0 worker nodes (min 0, max 2"
            in " ".join(cli.run("compute", "show", "elastic", check=True).stdout.split())
        ),
        timeout=30,
    )
    assert took < 4 + IDLE_S + 60


def test_jobs_beyond_max_nodes_wait_for_each_other_and_the_cluster_stays_within_it(
    cli: Cli, empty: RayCluster
) -> None:
    """Two jobs that together need 3 nodes, max 2: the second waits for the first (not
    for nodes), and the cluster never has more than 2 workers (Ray's type allows 3)."""
    elastic_target(cli, empty)
    watch = Watch(empty)
    first = cli.create(job_spec(cli, nodes=2, pause=1.5))
    until("the first waits for nodes", lambda: cli.show(first).get("queue"), timeout=60)
    second = cli.create(job_spec(cli, nodes=1))
    reason = until(
        "the second waits",
        lambda: (cli.show(second).get("queue") or {}).get("reason"),
        timeout=60,
    )
    assert isinstance(reason, str) and not reason.startswith("waiting for 1 node"), reason
    done = cli.wait(first, ("Completed", "Failed"), timeout=300)
    assert done["status"] == "Completed", done
    later = cli.wait(second, ("Completed", "Failed"), timeout=300)
    assert later["status"] == "Completed", later
    started, ended = (dt.datetime.fromisoformat(t) for t in (later["started_at"], done["ended_at"]))
    assert started >= ended - dt.timedelta(seconds=1), (later, done)
    assert queue_of(cli)["scaling"]["requested"] <= 2
    assert watch.stop() <= 2


@LOCAL_AND_SERVER
def test_a_job_larger_than_the_cluster_grows_is_refused_at_create(
    cli: Cli, elastic_cluster: RayCluster
) -> None:
    """At `job create`, on this machine's workspace and through a server alike."""
    elastic_target(cli, elastic_cluster)
    settings = json.loads(cli.run("compute", "show", "elastic", "--json", check=True).stdout)
    assert settings["scaling"]["max_nodes"] == 2
    proc = cli.run("job", "create", "-f", str(job_spec(cli, nodes=3)))
    assert proc.returncode == 2, proc
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "asks for 3 nodes" in line and "2 nodes of 1 CPUs" in line, line
    assert "--max-nodes" in line


def test_the_sdk_the_compute_yaml_and_the_cli_make_the_same_elastic_target(
    cli: Cli, elastic_cluster: RayCluster
) -> None:
    address = elastic_cluster.client_address
    elastic_target(cli, elastic_cluster, "gpu", "--tier", "low_priority")
    settings = json.loads(cli.run("compute", "show", "gpu", "--json", check=True).stdout)
    by_cli = settings["settings"]
    assert (by_cli["max_nodes"], by_cli["idle_time_before_scale_down"]) == (2, 4)
    assert by_cli["tier"] == "low_priority"
    listed = cli.run("compute", "list", check=True).stdout
    assert "0-2 (elastic) low-priority" in listed, listed
    cli.run("compute", "delete", "gpu", check=True)
    cli.write(
        "compute.yml",
        f"$schema: https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json\n"
        f"name: gpu\ntype: amlcompute\nsize: STANDARD_NC6\naddress: {address}\n"
        "min_instances: 0\nmax_instances: 2\nidle_time_before_scale_down: 4\n"
        "node_cpus: 1\ncpus_per_node: 1\ntier: low_priority\n",
    )
    cli.run("compute", "create", "-f", "compute.yml", check=True)
    by_yaml = json.loads(cli.run("compute", "show", "gpu", "--json", check=True).stdout)
    assert by_yaml["settings"] == by_cli
    cli.run("compute", "delete", "gpu", check=True)
    sdk = (
        "from phalanx.ml import MLClient\nfrom phalanx.ml.entities import AmlCompute\n"
        "import json, sys\n"
        "made = MLClient().compute.begin_create_or_update(AmlCompute(name='gpu', "
        "size='STANDARD_NC6', min_instances=0, max_instances=2, "
        "idle_time_before_scale_down=4, address=sys.argv[1], node_cpus=1, "
        "cpus_per_node=1, tier='low_priority')).result()\n"
        "print(json.dumps([made.max_instances, made.min_instances, "
        "made.idle_time_before_scale_down, made.tier, made.settings]))\n"
    )
    out = subprocess.run([sys.executable, "-c", sdk, address], env=cli.env, cwd=cli.workdir,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    most, least, idle, tier, by_sdk = json.loads(out.stdout.strip().splitlines()[-1])
    assert (most, least, idle, tier) == (2, 0, 4, "low_priority")
    assert by_sdk == by_cli
    # One cluster, one request: a second elastic target on it is refused in one line.
    proc = cli.run("compute", "create", "--name", "other", "--type", "ray", "--address",
                   address, "--max-nodes", "1", "--node-cpus", "1",
                   "--tier", "low_priority")  # fmt: skip
    assert proc.returncode != 0 and "already scales the cluster" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_scale_up_that_does_not_come_shows_rays_reason_and_ends_with_the_timeout(
    cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The node type's nodes cannot start (its provider fails every launch, as a cloud
    out of quota does): the waiting job shows the autoscaler's reason in `job show` and
    the queue, holds nothing, and fails once its limits.timeout has passed."""
    # A node type Ray cannot start: its object store is below Ray's minimum.
    broken = start_autoscaling_cluster(
        tmp_path_factory.mktemp("broken"),  # short: Ray's socket paths must fit 107 bytes
        {"big": {"CPU": 2, "object_store_memory": 1}},
        max_workers=1,
    )
    try:
        cli.run("compute", "create", "--name", "elastic", "--type", "ray", "--address",
                broken.client_address, "--max-nodes", "1", "--node-cpus", "2",
                "--cpus-per-node", "1", check=True)  # fmt: skip
        # Long enough that a Ray Client session that fails to start once (Ray's proxy
        # gives up after 30 s, and the probe tries again) still shows the reason first.
        name = cli.create(job_spec(cli, nodes=1, timeout=90))
        why = "Ray's autoscaler: Failed to launch 1 node(s) of type big: ValueError: "
        reason = until(
            "the autoscaler's reason reaches the job",
            lambda: why in (cli.show(name).get("queue") or {}).get("reason", ""),
            timeout=85,
            seen=lambda: (
                cli.show(name),
                queue_of(cli),
                (cli.home / "scheduler.log").read_text()[-3000:],
            ),
        )
        assert reason
        shown = cli.show(name)["queue"]["reason"]
        assert shown.startswith("waiting for 1 node: cluster 0 → 1 of max 1, requested "), shown
        assert "object store memory" in shown and "\n" not in shown
        view = queue_of(cli)
        assert view["running"] == [] and "Failed to launch" in view["scaling"]["trouble"]
        job = cli.wait(name, ("Failed", "Completed"), timeout=120)
        assert job["status"] == "Failed", job
        message = job["error"]["message"]
        assert message.startswith("waited its whole limits.timeout (90 s) for nodes"), message
        assert why in message
    finally:
        stop_cluster(broken)


def test_min_nodes_stay_without_jobs_and_go_with_the_target(cli: Cli, empty: RayCluster) -> None:
    """`--min-nodes 1`: the cluster is asked for one node as soon as the target is made,
    keeps it with no job past both idle times, and is asked for none once the target is
    deleted."""
    elastic_target(cli, empty, "elastic", "--min-nodes", "1")
    wait_workers(empty, 1, timeout=90)
    # Past phalanx's idle time (4 s) and Ray's own (6 s), with nothing queued: still 1.
    time.sleep(4 + IDLE_S + 4)
    assert len(worker_nodes(empty)) == 1
    assert queue_of(cli)["scaling"]["requested"] == 1
    cli.run("compute", "delete", "elastic", check=True)
    wait_workers(empty, 0, timeout=IDLE_S + 60)


SPOT_STEPS = """
import os, signal, sys, time
ckpt = os.path.join(os.environ["PHALANX_CHECKPOINT_DIR"], "step.txt")
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
attempt = os.environ["PHALANX_ATTEMPT"]
noticed = []
signal.signal(signal.SIGTERM, lambda *_: noticed.append(1))
def save(step):
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
print(f"attempt {attempt} starts at step {start}", flush=True)
for step in range(start, 30):
    time.sleep(0.4)
    print(f"attempt {attempt} step {step} done", flush=True)
    if noticed:  # the preemption notice: save now, leave as preempted
        save(step + 1)
        print(f"attempt {attempt} saved at {step + 1} on the notice", flush=True)
        sys.exit(143)
    if step % 10 == 9:
        save(step + 1)
save(30)
"""


class NoticeService:
    """What a cloud's metadata service says of eviction, served on this machine:
    ``FALSE`` until :meth:`announce` (then ``TRUE``), at ``url``."""

    def __init__(self) -> None:
        import http.server

        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"TRUE" if service.evicting.is_set() else b"FALSE"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.evicting = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/preempted"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _attempt_lines(log: str, attempt: int, what: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.startswith(f"attempt {attempt} {what}")]


def test_a_spot_job_saves_on_the_eviction_notice_and_resumes_on_a_new_node(
    cli: Cli, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A low-priority target over a node type that carries phalanx_low_priority: a
    dedicated job is refused at create. A spot job's node hears the cloud's eviction
    notice: its rank saves and leaves, the node is taken, and the job resumes on the node
    the autoscaler adds in its place, 0 steps lost. Then its node is taken with no notice
    (raylet and everything under it killed): it resumes again from its last checkpoint.
    Both count against max_preemptions, not max_attempts (1)."""
    # A job queued on a target that becomes low-priority before it starts fails, in words.
    nowhere = ("--type", "ray", "--address", "ray://127.0.0.1:9", "--no-check", "--max-nodes",
               "1", "--node-cpus", "1", "--cpus-per-node", "1")  # fmt: skip
    cli.run("compute", "create", "--name", "spot", *nowhere, check=True)
    cli.write("src/spot.py", "print('never')\n")
    queued = cli.create(cli.write("queued.yml", "command: python spot.py\ncode: src\n"
                                                "compute: spot\n"))  # fmt: skip
    ws = Workspace(cli.home, db=cli.env.get("PHALANX_DB"))
    try:  # in place, at once, as a target deleted and made again between two rounds
        [row] = ws.query("SELECT config_json FROM computes WHERE name = 'spot'")
        config = {**json.loads(row["config_json"]), "tier": "low_priority"}
        with ws.transaction() as tx:
            tx.execute("UPDATE computes SET config_json = :c WHERE name = 'spot'",
                       {"c": json.dumps(config)})  # fmt: skip
    finally:
        ws.close()
    cli.run("queue", check=True)  # a round now
    failed = cli.wait(queued, ("Failed", "Completed", "Running"), timeout=60)
    assert failed["status"] == "Failed", failed
    assert "compute 'spot' became low-priority" in failed["error"]["message"], failed
    cli.run("compute", "delete", "spot", check=True)

    notices = NoticeService()
    spot = start_autoscaling_cluster(
        tmp_path_factory.mktemp("spot"),
        {"spot": {"CPU": 1, LOW_PRIORITY_RESOURCE: 1}},
        max_workers=1,
        evictable=True,
        node_env={"PHALANX_EVICTION_NOTICE_URL": notices.url},
    )
    try:
        cli.run("compute", "create", "--name", "spot", "--type", "ray", "--address",
                spot.client_address, "--max-nodes", "1", "--node-cpus", "1",
                "--cpus-per-node", "1", "--idle-time-before-scale-down", "4s",
                "--tier", "LowPriority", check=True)  # fmt: skip
        listed = " ".join(cli.run("compute", "list", check=True).stdout.split())
        assert "0-1 (elastic) low-priority" in listed, listed
        # A cluster is dedicated or low-priority: no dedicated target, nor a job naming
        # its address, reaches its nodes.
        mixed = cli.run("compute", "create", "--name", "ded", "--type", "ray", "--address",
                        spot.client_address)  # fmt: skip
        assert mixed.returncode == 2, mixed
        assert "compute 'spot' is low_priority on the cluster at" in mixed.stderr, mixed.stderr
        cli.write("src/spot.py", SPOT_STEPS)
        inline = cli.write("inline.yml", f"command: python spot.py\ncode: src\n"
                                         f"compute: {spot.client_address}\n")  # fmt: skip
        refused = cli.run("job", "create", "-f", str(inline))
        assert refused.returncode == 2, refused
        assert f"compute {spot.client_address!r} is the cluster of compute 'spot'" in (
            refused.stderr
        ), refused.stderr
        body = (
            "command: python spot.py\ncode: src\ncompute: spot\n"
            "resources: {instance_count: 1}\nlimits: {timeout: 400}\n"
            "retry: {max_attempts: 1, max_preemptions: 2, preemption_grace: 20}\n"
        )
        dedicated = cli.run("job", "create", "-f", str(cli.write("dedicated.yml", body)))
        assert dedicated.returncode == 2, dedicated
        assert dedicated.stderr.startswith("error: queue_settings.job_tier: compute 'spot' is "
                                           "low-priority"), dedicated.stderr  # fmt: skip
        assert dedicated.stderr.count("\n") == 1
        name = cli.create(cli.write("spot.yml", body + "queue_settings: {job_tier: spot}\n"))
        job_dir = cli.home / "jobs" / name
        log_file = job_dir / "user_logs" / "std_log_process_0.txt"

        def log() -> str:
            return log_file.read_text() if log_file.exists() else ""

        until("attempt 1 ran 3 steps", lambda: len(_attempt_lines(log(), 1, "step")) >= 3,
              timeout=180, seen=lambda: cli.show(name))  # fmt: skip
        notices.evicting.set()
        until("the rank saved on the notice", lambda: _attempt_lines(log(), 1, "saved"),
              timeout=60, seen=log)  # fmt: skip
        # Its exit (the wrapper's record) shipped too, before the cloud takes the VM: the
        # attempt's end then says how many ranks saved. (A VM taken sooner ends it all the
        # same, without that count.)
        exited = job_dir / "system_logs" / "attempt_1" / "rank_0.json"
        until("the rank's exit reached the workspace", exited.exists, timeout=60, seen=log)
        taken_first = take_worker(spot, LOW_PRIORITY_RESOURCE)  # the cloud takes the VM
        notices.evicting.clear()
        until("attempt 2 ran 3 steps", lambda: len(_attempt_lines(log(), 2, "step")) >= 3,
              timeout=180, seen=lambda: cli.show(name))  # fmt: skip
        assert take_worker(spot, LOW_PRIORITY_RESOURCE) >= 2 and taken_first >= 1
        job = cli.wait(name, ("Completed", "Failed"), timeout=240)
        assert job["status"] == "Completed", job
        first, second, third = job["attempts"]
        assert (first["cause"], second["cause"], third["status"]) == (
            "preemption", "preemption", "Succeeded"
        ), job["attempts"]  # fmt: skip
        told = first["error"]["message"]
        assert told.startswith("node 0 is being taken away (a low-priority node): "), told
        assert notices.url in told and "1 rank(s) saved and exited" in told, told
        assert "preemption 1 of 2 allowed" in first["note"], first
        assert second["error"]["message"].startswith("node 0 was taken away (a low-priority")
        assert "preemption 2 of 2 allowed" in second["note"], second
        text = log()
        done_1 = max(int(ln.split()[3]) for ln in _attempt_lines(text, 1, "step"))
        [saved] = _attempt_lines(text, 1, "saved")
        [resumed] = _attempt_lines(text, 2, "starts")
        # 0 steps lost: what the first attempt did, it saved on the notice, and the second
        # went on from there.
        assert int(saved.split()[4]) == done_1 + 1 == int(resumed.rsplit(" ", 1)[1]), text
        assert (
            _attempt_lines(text, 3, "starts")
            and int((job_dir / "checkpoints" / "step.txt").read_text()) == 30
        )
        hosts = [a["nodes"][0]["host"] for a in job["attempts"]]
        assert len(set(hosts)) == 3, hosts  # each attempt on a node of its own
    finally:
        stop_cluster(spot)
        notices.close()
