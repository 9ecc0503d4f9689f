"""Ray compute on a real two-node Ray cluster started on this machine (head + worker):
placement across nodes, every rank's log, a lost node classified as infrastructure and
the job resumed once a node is back, and the errors a user can fix."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.bench.raycluster import RayCluster

pytestmark = pytest.mark.slow

DDP = """
import json, os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
keys = ("RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "MASTER_ADDR", "PHALANX_RAY_NODE_ID",
        "PHALANX_JOB_NAME")
rec = {k: os.environ.get(k) for k in keys}
rec.update(total=t.item(), host=socket.gethostname())
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"rank_{dist.get_rank()}.json")
open(out, "w").write(json.dumps(rec))
print("rank", dist.get_rank(), "total", t.item(), flush=True)
dist.destroy_process_group()
"""


def _job(cli: Cli, compute: str, nodes: int = 2, script: str = "ddp.py", extra: str = "") -> Path:
    return cli.write(
        "job.yml",
        f"""
        command: python {script}
        code: src
        compute: {compute}
        resources: {{instance_count: {nodes}}}
        distribution: {{type: pytorch, process_count_per_instance: 1}}
        limits: {{timeout: 300}}
        {extra}
        """,
    )


def test_two_node_ddp_job_on_a_registered_ray_cluster(cli: Cli, ray_cluster: RayCluster) -> None:
    cli.run("compute", "create", "--name", "testray", "--type", "ray",
            "--address", ray_cluster.gcs_address, check=True)  # fmt: skip
    listed = json.loads(cli.run("compute", "list", "--json", check=True).stdout)
    assert [t["name"] for t in listed] == ["local", "testray"]
    cli.write("src/ddp.py", DDP)
    name = cli.create(_job(cli, "azureml:testray"))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])
    ranks = [json.loads((job_dir / "outputs" / f"rank_{r}.json").read_text()) for r in range(2)]
    assert [r["total"] for r in ranks] == [3.0, 3.0]
    assert [(r["RANK"], r["NODE_RANK"], r["WORLD_SIZE"]) for r in ranks] == [
        ("0", "0", "2"), ("1", "1", "2"),
    ]  # fmt: skip
    # STRICT_SPREAD: each node of the job on its own Ray node.
    assert ranks[0]["PHALANX_RAY_NODE_ID"] != ranks[1]["PHALANX_RAY_NODE_ID"]
    assert all(r["PHALANX_RAY_NODE_ID"] for r in ranks)
    assert ranks[0]["MASTER_ADDR"] == ray_cluster.gcs_address.split(":")[0]
    for rank in range(2):
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"rank {rank} total 3.0" in log
    supervisor = (job_dir / "system_logs" / "supervisor.txt").read_text()
    assert "Ray placed 2 node(s)" in supervisor


def test_ray_client_address_inline(cli: Cli, ray_cluster: RayCluster) -> None:
    cli.write("src/ddp.py", DDP)
    name = cli.create(_job(cli, ray_cluster.client_address, nodes=1))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    rank0 = json.loads((Path(job["job_dir"]) / "outputs" / "rank_0.json").read_text())
    assert rank0["total"] == 1.0 and rank0["PHALANX_RAY_NODE_ID"]


STEPS = """
import os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt = os.path.join(os.environ["PHALANX_CHECKPOINT_DIR"], "step.txt")
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print(f"attempt {os.environ['PHALANX_ATTEMPT']} starts at step {start}", flush=True)
for step in range(start, 40):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step + 1))
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.25)
print("done", flush=True)
dist.destroy_process_group()
"""


def test_a_lost_node_is_infrastructure_and_the_job_resumes_when_a_node_is_back(
    cli: Cli, ray_cluster: RayCluster
) -> None:
    cli.write("src/steps.py", STEPS)
    spec = _job(cli, ray_cluster.gcs_address, script="steps.py",
                extra="retry: {max_attempts: 3}")  # fmt: skip
    name = cli.create(spec)
    job = cli.wait(name, ("Running",), timeout=120)
    checkpoint = Path(job["job_dir"]) / "checkpoints" / "step.txt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() or int(checkpoint.read_text() or 0) < 5:
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.2)
    ray_cluster.kill_node("node_b")
    # The next attempt waits for Ray to have two nodes again.
    time.sleep(3)
    ray_cluster.start_worker("node_b")
    job = cli.wait(name, ("Completed", "Failed"), timeout=300)
    assert job["status"] == "Completed", job
    first, *rest = job["attempts"]
    assert first["cause"] == "infrastructure", first
    assert "lost" in json.dumps(first), first
    assert rest and rest[-1]["status"] == "Succeeded"
    assert int(checkpoint.read_text()) == 40
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt").read_text()
    resumed = [line for line in log.splitlines() if line.startswith(f"attempt {len(rest) + 1}")]
    assert resumed and int(resumed[0].rsplit(" ", 1)[1]) >= 5  # from the checkpoint


def test_errors_a_user_can_fix(cli: Cli, ray_cluster: RayCluster) -> None:
    cli.write("src/ddp.py", DDP)
    unknown = cli.run("job", "create", "-f", str(_job(cli, "azureml:nosuch")))
    assert unknown.returncode == 2 and "compute target 'nosuch' not found" in unknown.stderr
    refused = cli.run("compute", "create", "--name", "gone", "--address", "127.0.0.1:1")
    assert refused.returncode == 2 and "cannot reach 127.0.0.1:1" in refused.stderr
    cli.run("compute", "create", "--name", "authed", "--address", ray_cluster.gcs_address,
            "--token-env", "PHALANX_TEST_RAY_TOKEN", check=True)  # fmt: skip
    shown = json.loads(cli.run("compute", "show", "authed", "--json", check=True).stdout)[
        "settings"
    ]
    assert shown["token"] == "environment variable PHALANX_TEST_RAY_TOKEN"
    no_token = cli.run("job", "create", "-f", str(_job(cli, "authed")))
    assert no_token.returncode == 2 and "PHALANX_TEST_RAY_TOKEN is not set" in no_token.stderr
    bad = cli.run("compute", "create", "--name", "local", "--address", ray_cluster.gcs_address)
    assert bad.returncode == 2 and "reserved" in bad.stderr


def test_token_authenticated_cluster(cli: Cli, ray_token_cluster: RayCluster) -> None:
    from conftest import RAY_TEST_TOKEN

    cli.write(
        "src/ddp.py",
        DDP
        + "\nimport os; print('token seen' if os.environ.get('RAY_AUTH_TOKEN') else 'no token')\n",
    )
    cli.run("compute", "create", "--name", "authed", "--address",
            ray_token_cluster.gcs_address, "--token-env", "MY_RAY_TOKEN", check=True)  # fmt: skip
    cli.env["MY_RAY_TOKEN"] = RAY_TEST_TOKEN
    name = cli.create(_job(cli, "authed", nodes=1))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt").read_text()
    assert "rank 0 total 1.0" in log and "no token" in log  # ranks never get the credential
    found = [
        p for p in cli.home.rglob("*") if p.is_file() and RAY_TEST_TOKEN.encode() in p.read_bytes()
    ]
    assert found == []  # not in specs, records, logs or the database

    cli.env["MY_RAY_TOKEN"] = "not-the-token"
    name = cli.create(_job(cli, "authed", nodes=1))
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Failed"
    assert "cannot connect to the Ray cluster" in job["error"]["message"]


@LOCAL_AND_SERVER
def test_compute_targets_without_a_cluster(cli: Cli) -> None:
    """create (--no-check, --store-token from stdin), list, show, delete: the token kept
    in the 0600 secrets file by reference, never in the database or any output."""
    token = "tok-" + "5" * 40
    made = cli.run_input(token + "\n", "compute", "create", "--name", "later",
                         "--address", "ray://head.example:10001", "--store-token",
                         "--placement", "pack", "--no-check")  # fmt: skip
    assert made.returncode == 0, made.stderr
    shown = cli.run("compute", "show", "later", "--json", check=True).stdout
    assert json.loads(shown)["settings"]["token"] == "stored in the secrets file"
    assert json.loads(shown)["settings"]["placement"] == "pack"
    text = cli.run("compute", "show", "later", check=True).stdout
    assert "token: stored in the secrets file" in text and "placement: pack" in text
    listing = cli.run("compute", "list", check=True).stdout
    assert "later" in listing and "ray://head.example:10001" in listing and "local" in listing
    secrets = cli.home / "secrets.json"
    assert token in secrets.read_text() and (secrets.stat().st_mode & 0o777) == 0o600
    others = [p for p in cli.home.rglob("*") if p.is_file() and p != secrets]
    assert not [p for p in others if token.encode() in p.read_bytes()]  # the database, WAL…
    assert token not in shown + listing + text
    cli.run("compute", "delete", "later", check=True)
    assert token not in secrets.read_text()
    gone = cli.run("compute", "show", "later")
    assert gone.returncode == 2 and "compute target 'later' not found" in gone.stderr


def test_ray_nodes_run_their_launcher_in_the_image(cli: Cli, ray_cluster: RayCluster) -> None:
    from phalanx.environments.containers.engine import find_engine
    from phalanx.environments.containers.sweep import job_containers

    engine = find_engine()
    if engine.run(["image", "exists", "phalanx-test-bookworm"]).returncode != 0:
        pytest.fail("no test image: run `make test-image`")
    where = (
        "container=os.path.exists('/run/.containerenv'), python=os.path.realpath(sys.executable), "
    )
    cli.write("src/ddp.py", "import sys\n" + DDP.replace("rec.update(", "rec.update(" + where))
    spec = _job(cli, ray_cluster.gcs_address, extra="environment: {image: phalanx-test-bookworm}")
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=240)
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])
    ranks = [json.loads((job_dir / "outputs" / f"rank_{r}.json").read_text()) for r in range(2)]
    assert [r["total"] for r in ranks] == [3.0, 3.0]
    assert all(r["container"] and r["python"].startswith("/usr/bin/python3") for r in ranks)
    assert ranks[0]["PHALANX_RAY_NODE_ID"] != ranks[1]["PHALANX_RAY_NODE_ID"]
    for rank in range(2):
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"rank {rank} total 3.0" in log
    out = engine.run(["ps", "-aq", "--filter", f"label=phalanx.job={name}"]).stdout
    assert out.split() == [] and job_containers(engine, job_dir) == []


def test_ray_nodes_build_the_image_themselves(cli: Cli, ray_cluster: RayCluster) -> None:
    """A pip layer and a Docker context, built by each node from the files the supervisor
    sent (no registry between the machines), each node's build log shipped back."""
    from test_containers import IMAGE, PROBE, _wheel, make_test_image

    make_test_image()
    value = time.time_ns()  # new content: fresh builds
    _wheel(cli.workdir / "wheels", value)
    cli.write("requirements.txt", "./wheels/demo_layer-1.0-py3-none-any.whl\n")
    cli.write("ctx/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    cli.write("ctx/marker.txt", f"built {value}\n")
    # What the context's .dockerignore leaves out is not sent to the nodes.
    cli.write("ctx/.dockerignore", "data/\n")
    cli.write("ctx/data/unsent.bin", f"{value}\n")
    cli.write(
        "src/probe.py", PROBE.replace('"found.json"', "f\"found_{os.environ['NODE_RANK']}.json\"")
    )
    for environment, key, expected in (
        (f"{{image: {IMAGE}, pip_file: requirements.txt}}", "value", value),
        ("{build: {path: ctx}}", "marker", f"built {value}"),
    ):
        extra = f"environment: {environment}"
        spec = _job(cli, ray_cluster.gcs_address, script="probe.py", extra=extra)
        job = cli.wait(cli.create(spec), ("Completed", "Failed"), timeout=300)
        assert job["status"] == "Completed", job
        job_dir = Path(job["job_dir"])
        for node in range(2):
            found = json.loads((job_dir / "outputs" / f"found_{node}.json").read_text())
            assert found[key] == expected, found
            built = (job_dir / "system_logs" / f"image_build_node{node}.txt").read_text()
            assert "phalanx-env:" in built or "STEP" in built, built
    contexts = list((ray_cluster.temp_dir / "nodes").glob("*/containers/contexts/*/"))
    assert [c for c in contexts if (c / "marker.txt").is_file()], contexts
    assert not [c for c in contexts if (c / "data").exists()]
    # A build that fails on the nodes fails the job in one line naming its log, brought
    # back into the workspace (the node's folder goes with the attempt).
    cli.write("ctx/Dockerfile", f"FROM {IMAGE}\nRUN echo node build broke {value}; exit 3\n")
    spec = _job(
        cli, ray_cluster.gcs_address, script="probe.py", extra="environment: {build: {path: ctx}}"
    )
    job = cli.wait(cli.create(spec), ("Completed", "Failed"), timeout=300)
    assert job["status"] == "Failed", job
    message = job["error"]["message"]
    assert message.startswith("environment: image build failed (exit ") and "\n" not in message
    assert " on a Ray node; see " in message
    kept = Path(message.rsplit("; see ", 1)[1])
    assert kept.is_relative_to(cli.home) and f"node build broke {value}" in kept.read_text()
    # A conda file's local path cannot reach the nodes: one line at create.
    cli.write(
        "conda.yml", "dependencies:\n  - pip:\n    - ./wheels/demo_layer-1.0-py3-none-any.whl\n"
    )
    extra = f"environment: {{image: {IMAGE}, conda_file: conda.yml}}"
    proc = cli.run("job", "create", "-f", str(_job(cli, ray_cluster.gcs_address, extra=extra)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "is a path on this machine, which Ray nodes do not see" in proc.stderr


def test_a_cancel_stops_the_nodes_image_builds(cli: Cli, ray_cluster: RayCluster) -> None:
    """A build that would take long is under way on the nodes; `job cancel` ends the job
    and the builds on every node, none left running."""
    import psutil

    from test_containers import IMAGE, make_test_image

    make_test_image()
    marker = f"phalanx-cancel-{time.time_ns()}"
    cli.write("slow/Dockerfile", f"FROM {IMAGE}\nRUN echo {marker}; sleep 600\n")
    cli.write("src/ddp.py", DDP)
    spec = _job(cli, ray_cluster.gcs_address, extra="environment: {build: {path: slow}}")
    name = cli.create(spec)
    logs = ray_cluster.temp_dir / "nodes"
    deadline = time.monotonic() + 120
    while not [p for p in logs.glob(f"*/jobs/{name}-*/system_logs/image_build_node*.txt")
               if marker in p.read_text()]:  # fmt: skip
        assert time.monotonic() < deadline, "no node began the build"
        time.sleep(0.2)
    cli.run("job", "cancel", name, check=True)
    assert cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=60)["status"] == "Canceled"

    def building() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if marker in " ".join(proc.cmdline()):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    deadline = time.monotonic() + 30
    while building():
        assert time.monotonic() < deadline, f"builds left running: {building()}"
        time.sleep(0.2)
