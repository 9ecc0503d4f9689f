"""Jobs in container images: ranks run in the image's Python, logs and root cause as without
one, containers labelled and removed by every path that ends an attempt, one-line errors.

The image is ``phalanx-test-bookworm`` (Debian bookworm minbase with python3, no torch),
made once per machine by ``make test-image``; torch comes from phalanx's environment,
mounted read-only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from conftest import BIN, REPO, Cli
from phalanx.environments.containers.build import TAG
from phalanx.environments.containers.engine import CONTAINERS_CONF, Engine, find_engine
from phalanx.environments.containers.ignore import ContextIgnore, ignore_file
from phalanx.environments.containers.image import ImageRef, image_id
from phalanx.environments.containers.sweep import job_containers
from phalanx.errors import PhalanxError
from test_distributions import TF_JOB, TF_SCRIPT
from test_job_retry import STEPS, TWO_NODES, _steps_done, _wait_for_step

IMAGE = os.environ.get("PHALANX_TEST_IMAGE", "phalanx-test-bookworm")


def make_test_image() -> None:
    """The test image, made here when ``make test-image`` was not run. Quick when it is
    there and has what the recipe puts in (Open MPI since MPI jobs run in images)."""
    subprocess.run(["sh", str(REPO / "tests" / "images" / "make-test-image.sh")], check=True)


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The engine, with the test image on it."""
    found = find_engine()
    make_test_image()
    return found


def _containers(engine: Engine, job_dir: Path) -> list[str]:
    return job_containers(engine, job_dir)


# Each rank records where it ran and what it saw, then all-reduces with the others.
RANKS = """
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
seen = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK",
        "PHALANX_JOB_NAME", "PHALANX_ATTEMPT", "GREETING", "PHALANX_CHECKPOINT_DIR",
        "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")}
seen.update(python=os.path.realpath(sys.executable), version=sys version_placeholder, sum=t.item(),
            container=os.path.exists("/run/.containerenv"), torch=torch.__file__)
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"rank_{dist.get_rank()}.json")
json.dump(seen, open(out, "w"))
print("hello from rank", dist.get_rank())
if os.environ.get("LOG_MLFLOW"):  # the image's Python, the node's endpoint, no set-up
    import mlflow
    mlflow.log_metric("in_image", dist.get_rank() + 1, step=0)
if os.environ.get("FAIL_RANK") == os.environ["RANK"]:
    raise ValueError("rank " + os.environ["RANK"] + " gives up")
dist.destroy_process_group()
""".replace("sys version_placeholder", "'%d.%d.%d' % sys.version_info[:3]")


def _spec(
    cli: Cli, *, nodes: int, procs: int, fail: str = "", image: str = IMAGE, mlflow: str = ""
) -> Path:
    cli.write("src/ranks.py", RANKS)
    return cli.write(
        "job.yml",
        f"""
        command: python ranks.py
        code: src
        environment: {{image: {image}}}
        environment_variables: {{GREETING: hi, FAIL_RANK: '{fail}', LOG_MLFLOW: '{mlflow}',
                                NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: mlx5_0}}
        resources: {{instance_count: {nodes}}}
        distribution: {{type: pytorch, process_count_per_instance: {procs}}}
        """,
    )


def test_two_nodes_of_two_ranks_run_in_the_image(cli: Cli, engine: Engine) -> None:
    name = cli.create(_spec(cli, nodes=2, procs=2, mlflow="yes"))
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    job_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (job, (job_dir / "system_logs").iterdir())
    # Every rank logged with mlflow; rank 0's point is the run's.
    points = [json.loads(x) for x in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(p["name"], p["value"], p["source"]) for p in points] == [("in_image", 1, "mlflow")]
    for rank in range(4):
        seen = json.loads((job_dir / "outputs" / f"rank_{rank}.json").read_text())
        # The image's Python (bookworm's), phalanx's torch lent read-only, the contract kept.
        assert seen["python"].startswith("/usr/bin/python3") and seen["container"] is True
        assert seen["version"] != ".".join(map(str, sys.version_info[:3]))
        assert seen["torch"].startswith(str(Path(sys.prefix)))
        assert seen["sum"] == 10.0  # 1 + 2 + 3 + 4: every rank took part
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["NODE_RANK"]) == (
            str(rank),
            "4",
            str(rank // 2),
        )
        assert seen["LOCAL_RANK"] == str(rank % 2) and seen["GREETING"] == "hi"
        assert (seen["NCCL_SOCKET_IFNAME"], seen["NCCL_IB_HCA"]) == ("eth0", "mlx5_0")
        assert seen["PHALANX_JOB_NAME"] == name and seen["PHALANX_ATTEMPT"] == "1"
        assert seen["PHALANX_CHECKPOINT_DIR"] == str(job_dir / "checkpoints")
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"hello from rank {rank}" in log
        attempt = job_dir / "system_logs" / "attempt_1"
        ended = json.loads((attempt / f"rank_{rank}.json").read_text())
        assert ended["exit_code"] == 0
    # No container outlives its job, and no environment file stays behind.
    assert _containers(engine, job_dir) == []
    assert list((job_dir / "system_logs").glob(".container_*.env")) == []
    assert (job_dir / "system_logs" / "containers").read_text().startswith(engine.name)
    supervisor = (job_dir / "system_logs" / "supervisor.txt").read_text()
    assert f"nodes run in {IMAGE} ({engine.name}, image " in supervisor


# Where each MPI rank ran: the container, and which mpi4py and Open MPI it loaded.
MPI_WHERE = """
where = {"container": os.path.exists("/run/.containerenv"), "mpi4py": MPI.__file__,
         "library": MPI.Get_library_version().split(",")[0],
         "python": os.path.realpath(sys.executable)}
open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"where_{comm.Get_rank()}.json"),
     "w").write(json.dumps(where))
"""


def test_mpi_job_runs_on_the_images_open_mpi(cli: Cli, engine: Engine) -> None:
    """Horovod-in-Docker's shape: mpirun, its daemons and every rank in the image, 2 nodes
    of 2 ranks; a failing rank is the root cause as without an image."""
    from test_distributions import MPI_JOB, MPI_SCRIPT

    cli.write("src/mpi_job.py", MPI_SCRIPT + MPI_WHERE)
    spec = cli.write("job.yml", MPI_JOB + f"environment: {{image: {IMAGE}}}\n")
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    job_dir = Path(job["job_dir"])
    assert job["status"] == "Completed", (job_dir / "system_logs" / "node_0.txt").read_text()
    for rank in range(4):
        seen = json.loads((job_dir / "outputs" / f"rank_{rank}.json").read_text())
        assert seen["total"] == 10 and seen["mpi_size"] == 4 and seen["mpi_rank"] == rank
        assert (seen["RANK"], seen["NODE_RANK"]) == (str(rank), str(rank // 2))
        assert (seen["PHALANX_JOB_NAME"], seen["EXTRA"]) == (name, "forwarded")
        assert (seen["NCCL_SOCKET_IFNAME"], seen["NCCL_IB_HCA"]) == ("eth0", "mlx5_0")
        where = json.loads((job_dir / "outputs" / f"where_{rank}.json").read_text())
        assert where["container"] is True and where["python"].startswith("/usr/bin/python3")
        # The image's own mpi4py on the image's Open MPI, not phalanx's lent copy.
        assert where["mpi4py"].startswith("/usr/lib/python3/dist-packages/"), where
        assert where["library"].startswith("Open MPI v4.1"), where
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"rank {rank} allreduce 10" in log
    assert _containers(engine, job_dir) == []
    supervisor = (job_dir / "system_logs" / "supervisor.txt").read_text()
    assert f"nodes run in {IMAGE} ({engine.name}, image " in supervisor
    # A rank that fails: its error, found inside the container, is the job's.
    name = cli.create(spec, "environment_variables.FAIL_RANK=3")
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Failed", job
    assert job["error"]["rank"] == 3 and "rank 3 gives up" in job["error"]["message"]
    assert _containers(engine, Path(job["job_dir"])) == []


def test_failing_rank_is_the_root_cause(cli: Cli, engine: Engine) -> None:
    spec = _spec(cli, nodes=1, procs=2, fail="1")
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Failed"
    error = job["error"]
    assert error["rank"] == 1 and "ValueError: rank 1 gives up" in error["message"], error
    assert "raise ValueError" in (error.get("traceback") or "")
    assert _containers(engine, Path(job["job_dir"])) == []


# Where a TensorFlow rank ran: its interpreter and the TF_CONFIG the worker wrapper gave it.
WHERE = """
import json, os, sys
seen = {"python": os.path.realpath(sys.executable),
        "container": os.path.exists("/run/.containerenv"),
        "tf_config": json.loads(os.environ["TF_CONFIG"])}
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"where_{os.environ['RANK']}.json")
json.dump(seen, open(out, "w"))
"""


def test_tensorflow_workers_run_in_the_image(cli: Cli, engine: Engine) -> None:
    cli.write("src/tf_job.py", TF_SCRIPT)
    cli.write("src/where.py", WHERE)
    spec = cli.write(
        "job.yml",
        TF_JOB.replace("python tf_job.py", "python where.py && python tf_job.py")
        + f"environment: {{image: {IMAGE}}}\n",
    )
    job = cli.wait(cli.create(spec), ("Completed", "Failed", "Canceled"), timeout=240)
    assert job["status"] == "Completed", job
    outputs = Path(job["job_dir"]) / "outputs"
    workers = None
    for index in range(2):
        where = json.loads((outputs / f"where_{index}.json").read_text())
        # The image's Python (phalanx's TensorFlow lent read-only), not phalanx's.
        assert where["python"].startswith("/usr/bin/python3") and where["container"] is True
        config = where["tf_config"]
        workers = workers or config["cluster"]["worker"]
        assert config["cluster"] == {"worker": workers}
        assert config["task"] == {"type": "worker", "index": index}
        result = json.loads((outputs / f"worker_{index}.json").read_text())
        assert result["config"] == config and result["replicas"] == 2
        assert result["total"] == 30.0  # reduced across both workers, one per node
    assert workers is not None
    assert [w.split(":")[0] for w in workers] == ["127.0.0.1", "127.0.0.2"]
    assert _containers(engine, Path(job["job_dir"])) == []
    # An image with torch of its own is lent nothing: without TensorFlow it is refused.
    torch_only, line = _refused_in_variant(cli, engine, "torch-only", STUB_TORCH, spec)
    assert line.startswith(f"error: environment.image '{torch_only}' has torch of its own but ")
    assert "install tensorflow in the image" in line


def _refused_in_variant(
    cli: Cli, engine: Engine, what: str, step: str, spec: Path, *sets: str
) -> tuple[str, str]:
    """Build the test image with ``step`` added (a tag of this run's own, removed after),
    have ``job create`` refuse ``spec`` in it; the tag and the one line it printed."""
    context = cli.write(f"{what}/Dockerfile", f"FROM {IMAGE}\n{step}\n").parent
    tag = f"phalanx-test-{what}:{uuid.uuid4().hex[:12]}"
    built = engine.run(["build", "-q", "-t", tag, str(context)], timeout=120)
    assert built.returncode == 0, built.stderr
    args = [a for s in (*sets, f"environment.image={tag}") for a in ("--set", s)]
    try:
        proc = cli.run("job", "create", "-f", str(spec), *args)
    finally:
        assert engine.run(["rmi", tag]).returncode == 0
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    return tag, line


# A package named torch in the image (what the probe looks for), not a working one.
_TORCH = "/usr/lib/python3/dist-packages/torch"
STUB_TORCH = f"RUN mkdir -p {_TORCH} && touch {_TORCH}/__init__.py"


def _steps_job(cli: Cli, steps: int) -> str:
    cli.write("src/steps.py", STEPS)
    job = TWO_NODES.format(steps=steps, max_preemptions=2) + f"environment: {{image: {IMAGE}}}\n"
    name = cli.create(cli.write("job.yml", job))
    _wait_for_step(cli, name, 20)
    return name


def test_preemption_reaches_the_ranks_inside_and_loses_no_step(cli: Cli, engine: Engine) -> None:
    # 400 steps of 0.05 s: the preemption at step 20 comes well before the job's end.
    name = _steps_job(cli, 400)
    assert len(_containers(engine, cli.home / "jobs" / name)) == 2  # one per node, labelled
    cli.run("job", "preempt", name, "--node", "1", check=True)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "preemption"),
        ("Succeeded", None),
    ]
    for rank in (0, 1):
        done = _steps_done(Path(job["job_dir"]), rank)
        assert sorted(step for _, step in done) == list(range(400))  # none lost, none redone
        ended = json.loads(
            (Path(job["job_dir"]) / "system_logs" / "attempt_1" / f"rank_{rank}.json").read_text()
        )
        assert ended["exit_code"] == 143 and "SIGTERM" in ended["signals_received"]
    assert _containers(engine, Path(job["job_dir"])) == []


def test_killed_supervisor_leaves_no_container(cli: Cli, engine: Engine) -> None:
    name = _steps_job(cli, 100000)
    job_dir = cli.home / "jobs" / name
    assert len(_containers(engine, job_dir)) == 2
    supervisor = next(
        p
        for p in psutil.process_iter(["cmdline"])
        if "phalanx.jobs.supervisor" in (p.info["cmdline"] or []) and name in p.info["cmdline"]
    )
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(10)
    # The scheduler notices the dead supervisor, removes the containers, ends the job.
    job = cli.wait(name, ("Failed", "Completed", "Canceled"), timeout=60)
    assert job["status"] == "Failed" and "supervisor" in job["error"]["message"]
    assert _containers(engine, job_dir) == []


def test_image_errors_are_one_line_at_create(cli: Cli, engine: Engine, tmp_path: Path) -> None:
    # An image that is not here and cannot be pulled (no registry is reachable in tests).
    proc = cli.run("job", "create", "-f", str(_spec(cli, nodes=1, procs=1, image="nope/none:1")))
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: environment.image 'nope/none:1' is not on this machine and ")
    assert "cannot be pulled" in line
    # An image without Python (of this test's own, removed once asked).
    empty = tmp_path / "empty"
    (empty / "etc").mkdir(parents=True)
    tar = subprocess.run(["tar", "-C", str(empty), "-c", "."], capture_output=True, check=True)
    nopython = f"phalanx-test-nopython:{uuid.uuid4().hex[:12]}"
    imported = subprocess.run(
        [engine.path, "import", "-", nopython],
        input=tar.stdout,
        env=engine.env(),
        capture_output=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    try:
        proc = cli.run("job", "create", "-f", str(_spec(cli, nodes=1, procs=1, image=nopython)))
    finally:
        assert engine.run(["rmi", nopython]).returncode == 0
    (line,) = proc.stderr.splitlines()
    assert proc.returncode == 2
    assert line.startswith(f"error: environment.image '{nopython}' has no Python")
    # No engine on the machine; an engine chosen that is not installed.
    spec = _spec(cli, nodes=1, procs=1)
    cli.env["PATH"] = str(BIN)
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: environment.image needs a container engine and ")
    cli.env["PHALANX_CONTAINER_ENGINE"] = "/nonexistent/podman"
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.stderr.startswith("error: PHALANX_CONTAINER_ENGINE=/nonexistent/podman: not an ")
    # An MPI job in an image without Open MPI (of this test's own, removed once asked).
    cli.env.pop("PHALANX_CONTAINER_ENGINE")
    cli.env["PATH"] = os.environ["PATH"]
    nompi, line = _refused_in_variant(
        cli, engine, "nompi", "RUN rm /usr/bin/mpirun /usr/bin/mpiexec", spec,
        "distribution.type=mpi",
    )  # fmt: skip
    assert line.startswith(f"error: environment.image '{nompi}' is an image without ")
    assert "install it in the image (openmpi-bin" in line
    # A conda file on an image: the image's Python is what a pin must name, and conda
    # packages are not layered.
    cli.write("conda.yml", "dependencies:\n  - python=3.9\n  - pip:\n    - six\n")
    proc = cli.run("job", "create", "-f", str(spec), "--set", "environment.conda_file=conda.yml")
    assert proc.returncode == 2 and "the image has Python 3.11" in proc.stderr
    cli.write("conda.yml", "dependencies:\n  - numpy=1.26\n")
    proc = cli.run("job", "create", "-f", str(spec), "--set", "environment.conda_file=conda.yml")
    assert proc.returncode == 2 and "on an image phalanx layers only its pip: packages" in (
        proc.stderr
    )


def _launch(tmp_path: Path, **kw: object) -> object:
    from phalanx.launch.node import NodeLaunch

    job_dir = tmp_path / "home" / "jobs" / "j"
    for sub in ("code", "checkpoints", "outputs"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    fields: dict[str, object] = dict(
        job_name="j", job_dir=job_dir, attempt=3, command="python x.py", node_rank=1, nnodes=2,
        nproc_per_node=2, master_addr="127.0.0.1", master_port=1234, workdir=job_dir / "code",
        checkpoint_dir=job_dir / "checkpoints", outputs_dir=job_dir / "outputs",
        user_env={"SECRET_TOKEN": "s3cr3t", "MULTI": "a\nb"},
    )  # fmt: skip
    fields.update(kw)
    return NodeLaunch(**fields)  # type: ignore[arg-type]


def test_run_command_line(tmp_path: Path) -> None:
    from phalanx.environments.containers.run import container_name, run_argv

    ref = ImageRef("docker", "/usr/bin/docker", "img", "abc", "/usr/bin/python3", "3.11",
                   "/usr/bin:/bin", torch=True)  # fmt: skip
    launch = _launch(tmp_path, devices=("2", "3"), shm_size="8g")
    env_file = tmp_path / "node.env"
    argv = run_argv(launch, ref, {**launch.env(), "NCCL_DEBUG": "INFO"}, env_file)  # type: ignore[attr-defined]
    # Labels, name, GPUs of the node only, a private /dev/shm of the spec's size.
    assert f"phalanx.job_dir={tmp_path / 'home' / 'jobs' / 'j'}" in argv
    assert "phalanx.attempt=3" in argv and container_name(launch) in argv  # type: ignore[arg-type]
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'
    assert argv[argv.index("--shm-size") + 1] == "8g" and "private" in argv
    assert argv[argv.index("--entrypoint") + 1 : argv.index("--entrypoint") + 5] == [
        "/usr/bin/python3", "abc", "-m", "torch.distributed.run"
    ]  # fmt: skip
    # Secrets stay out of the command line; a multi-line value is inherited by name.
    assert not any("s3cr3t" in a for a in argv)
    assert argv[argv.index("MULTI") - 1] == "-e"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    inside = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert inside["SECRET_TOKEN"] == "s3cr3t" and inside["NCCL_DEBUG"] == "INFO"
    assert inside["CUDA_VISIBLE_DEVICES"] == "0,1"  # the node's two GPUs, numbered from 0
    assert inside["PATH"].endswith(":/usr/bin:/bin") and "VIRTUAL_ENV" not in inside
    assert "HOME" not in inside  # the host's own variables stay outside


def test_mpi_command_line_on_one_machine(tmp_path: Path) -> None:
    """No GPU here: the GPUs are declared ids, and the command line is what is checked.
    Node 0's container runs every local node's daemon, so it gets every node's GPUs and
    each "host" its own, renumbered inside."""
    from phalanx.environments.containers.run import run_argv

    ref = ImageRef("docker", "/usr/bin/docker", "img", "abc", "/usr/bin/python3", "3.11",
                   "/usr/bin:/bin", torch=True, mpirun="/usr/bin/mpirun",
                   open_mpi=True)  # fmt: skip
    launch = _launch(
        tmp_path, distribution="mpi", node_rank=0, hosts=("127.0.0.1", "127.0.0.2"),
        devices=("2", "3"), node_devices=(("2", "3"), ("5", "6")),
    )  # fmt: skip
    env_file = tmp_path / "node.env"
    argv = run_argv(launch, ref, launch.env(), env_file)  # type: ignore[attr-defined]
    assert argv[argv.index("--gpus") + 1] == '"device=2,3,5,6"'
    inner = argv[argv.index("--entrypoint") + 1 :]
    assert inner[:2] == ["/usr/bin/mpirun", "abc"]  # the image's mpirun, not this machine's
    assert "/usr/bin/python3 -m phalanx.launch.mpi_agent" in inner
    assert inner[-3:] == ["-m", "phalanx.launch.worker", "python x.py"]
    assert inner[-4] == "/usr/bin/python3"
    inside = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert inside["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert json.loads(inside["PHALANX_MPI_DEVICES"]) == {"127.0.0.1": "0,1", "127.0.0.2": "2,3"}
    assert inside["PYTHONPATH"].split(":")[0] == "/opt/phalanx/lib"
    assert "PHALANX_LENT_PATH" not in inside  # an image with torch borrows nothing


def test_engine_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    podman = find_engine({"PHALANX_CONTAINER_ENGINE": "podman"})
    assert podman.name == "podman"
    env = podman.env({})
    assert env["CONTAINERS_CONF"] == str(CONTAINERS_CONF)
    assert podman.env({"CONTAINERS_CONF": "/mine.conf"})["CONTAINERS_CONF"] == "/mine.conf"
    assert "CONTAINERS_CONF" not in Engine("docker", "/usr/bin/docker").env({})


PROBE = """
import json, os, sys
found = {"marker": open("/opt/marker").read().strip() if os.path.exists("/opt/marker") else None,
         "from_image": os.environ.get("FROM_IMAGE")}
try:
    import demo_layer
    found.update(layer=demo_layer.__file__, value=demo_layer.VALUE)
except ImportError:
    pass
json.dump(found, open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "found.json"), "w"))
"""


def _probe_job(cli: Cli, environment: str) -> Path:
    cli.write("src/probe.py", PROBE)
    return cli.write(
        "job.yml",
        f"""
        command: python probe.py
        code: src
        environment: {environment}
        """,
    )


def _found(cli: Cli, name: str) -> dict[str, object]:
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=240)
    assert job["status"] == "Completed", job
    return json.loads((Path(job["job_dir"]) / "outputs" / "found.json").read_text())


def test_docker_context_is_built_once_and_reused(cli: Cli, engine: Engine) -> None:
    cli.write(
        "ctx/docker/Train.dockerfile",
        f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\nENV FROM_IMAGE=yes\n",
    )
    cli.write("ctx/marker.txt", f"built {time.time()}\n")  # new content: a fresh build
    spec = _probe_job(cli, "{build: {path: ctx, dockerfile_path: docker/Train.dockerfile}}")
    first = cli.create(spec)
    assert _found(cli, first)["marker"].startswith("built")  # type: ignore[union-attr]
    assert _found(cli, first)["from_image"] == "yes"
    build_log = cli.home / "jobs" / first / "system_logs" / "image_build.txt"
    assert "build" in build_log.read_text()
    # The same content again: the image is reused, nothing is built.
    second = cli.create(spec)
    assert _found(cli, second)["marker"] == _found(cli, first)["marker"]
    assert not (cli.home / "jobs" / second / "system_logs" / "image_build.txt").exists()
    # A build that fails fails the job in one line naming the kept log.
    cli.write("ctx/docker/Train.dockerfile", f"FROM {IMAGE}\nRUN echo broken step; exit 3\n")
    failed = cli.create(spec)
    job = cli.wait(failed, ("Completed", "Failed", "Canceled"), timeout=240)
    assert job["status"] == "Failed"
    message = job["error"]["message"]
    assert message.startswith("environment: image build failed (exit ")
    assert message.endswith(f"see {cli.home / 'jobs' / failed / 'system_logs' / 'image_build.txt'}")
    assert "\n" not in message
    # A missing context or Dockerfile, or one outside the context, is refused at create.
    proc = cli.run("job", "create", "-f", str(_probe_job(cli, "{build: {path: nowhere}}")))
    assert proc.returncode == 2 and "environment.build: folder" in proc.stderr
    spec = _probe_job(cli, "{build: {path: ctx, dockerfile_path: nope}}")
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2
    assert "error: environment.build.dockerfile_path: " in proc.stderr
    cli.write("Dockerfile", f"FROM {IMAGE}\n")
    spec = _probe_job(cli, "{build: {path: ctx, dockerfile_path: ../Dockerfile}}")
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "../Dockerfile is outside the build context" in proc.stderr


# Docker's rules, not .gitignore's: anchored at the root, `**` for any depth, the last
# matching pattern decides, a folder left out takes what is under it.
IGNORE = """
# logs and data stay out of the image
**/*.log
!logs/keep.log
data
!data/small.csv
/notes/*.md
Dockerfile
"""
CONTEXT = ("app.py", "top.log", "logs/a.log", "logs/keep.log", "src/deep/x.log", "data/big.bin",
           "data/small.csv", "notes/todo.md", "notes/sub/deep.md")  # fmt: skip
KEPT = [".dockerignore", "app.py", "data/small.csv", "logs/keep.log", "notes/sub/deep.md"]

LISTING = """
import json, os
files = sorted(os.path.relpath(os.path.join(d, f), "/opt/ctx")
               for d, _, names in os.walk("/opt/ctx") for f in names)
json.dump({"files": files, "app": open("/opt/ctx/app.py").read()},
          open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "found.json"), "w"))
"""


def _built(cli: Cli, spec: Path) -> tuple[dict[str, object], str, bool]:
    """A job's listing of the image's context, the image it ran in, whether it built one."""
    cli.write("src/probe.py", LISTING)
    name = cli.create(spec)
    found = _found(cli, name)
    built = (cli.home / "jobs" / name / "system_logs" / "image_build.txt").exists()
    return found, _image_of(cli, name), built


def _image_of(cli: Cli, name: str) -> str:
    """The built image job ``name`` ran in, as its supervisor's log names it."""
    supervisor = (cli.home / "jobs" / name / "system_logs" / "supervisor.txt").read_text()
    tag = re.search(rf"nodes run in ({TAG}:\w+)", supervisor)
    assert tag is not None, supervisor
    return tag[1]


def test_dockerignore_decides_what_the_image_holds_and_what_rebuilds(
    cli: Cli, engine: Engine
) -> None:
    for rel in CONTEXT:
        cli.write(f"ctx/{rel}", f"{rel} {time.time()}\n")  # new content: a fresh build
    cli.write("ctx/.dockerignore", IGNORE)
    cli.write("ctx/Dockerfile", f"FROM {IMAGE}\nCOPY . /opt/ctx\n")
    spec = _probe_job(cli, "{build: {path: ctx}}")
    found, first, built = _built(cli, spec)
    # podman left out what phalanx's hash leaves out.
    assert built and found["files"] == KEPT
    hashed = ContextIgnore.read(cli.workdir / "ctx" / ".dockerignore").files(cli.workdir / "ctx")
    assert [p.relative_to(cli.workdir / "ctx").as_posix() for p in sorted(hashed)] == KEPT
    # A file left out changes: the image is reused, nothing is built.
    cli.write("ctx/data/big.bin", "changed\n")
    cli.write("ctx/logs/a.log", "changed\n")
    found, second, built = _built(cli, spec)
    assert second == first and not built
    # A kept file changes: a new image, with it.
    cli.write("ctx/app.py", "edited\n")
    found, third, built = _built(cli, spec)
    assert third != first and built and found["app"] == "edited\n"


def test_prune_removes_the_built_images_no_job_uses(cli: Cli, engine: Engine) -> None:
    cli.write("ctx/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    cli.write("ctx/marker.txt", f"pruned {time.time()}\n")  # new content: a fresh build
    first = cli.create(_probe_job(cli, "{build: {path: ctx}}"))
    _found(cli, first)
    tag = _image_of(cli, first)
    # Just used: kept by default (7 days); a dry run of --all names it and removes nothing.
    out = cli.run("environment", "prune", check=True).stdout
    assert out.strip() == "no built image to remove" and image_id(engine, tag) is not None
    out = cli.run("environment", "prune", "--all", "--dry-run", check=True).stdout
    assert out.strip() == f"would remove {tag}" and image_id(engine, tag) is not None
    # A running job's container holds it: kept, with the engine's reason.
    cli.write("src/probe.py", "import time\ntime.sleep(120)\n")
    running = cli.create(_probe_job(cli, "{build: {path: ctx}}"))
    job_dir = cli.home / "jobs" / running
    deadline = time.monotonic() + 120
    running_filter = ["--filter", f"label=phalanx.job_dir={job_dir}", "--filter", "status=running"]
    while not engine.run(["ps", "-q", *running_filter]).stdout.split():
        assert time.monotonic() < deadline, "the job's container never ran"
        time.sleep(0.2)
    pruned = json.loads(cli.run("environment", "prune", "--all", "--json", check=True).stdout)
    # (An image of the same content that another test's job holds at once is kept too.)
    assert tag in pruned["kept"] and tag not in pruned["removed"], pruned
    assert image_id(engine, tag) is not None
    cli.run("job", "cancel", running, check=True)
    cli.wait(running, ("Canceled",), timeout=60)
    # Unused now: removed; the next job needing it builds it again.
    out = cli.run("environment", "prune", "--all", check=True).stdout
    assert f"removed {tag}" in out.splitlines() and image_id(engine, tag) is None
    cli.write("src/probe.py", PROBE)
    again = cli.create(_probe_job(cli, "{build: {path: ctx}}"))
    assert str(_found(cli, again)["marker"]).startswith("pruned")
    assert _image_of(cli, again) == tag
    assert (cli.home / "jobs" / again / "system_logs" / "image_build.txt").exists()
    proc = cli.run("environment", "prune", "--unused-for", "soon")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --unused-for must be a number of seconds or a duration")


def test_ignore_file_rules_and_choice(tmp_path: Path) -> None:
    from phalanx.environments.containers.build import ContextBuild

    ignore = ContextIgnore(
        ["# comment", "  *.tmp  ", "a/**/b", "c?", "[x-z].txt", "docs", "!docs/keep/**", "\\#x"]
    )
    assert ignore.excluded("f.tmp") and not ignore.excluded("sub/f.tmp")  # anchored at root
    assert ignore.excluded("a/b") and ignore.excluded("a/1/2/b/file")  # ** is any depth
    assert ignore.excluded("c1") and not ignore.excluded("c12")
    assert ignore.excluded("y.txt") and not ignore.excluded("a.txt")
    assert ignore.excluded("docs/x.md") and not ignore.excluded("docs/keep/sub/x.md")
    assert ignore.excluded("#x") and not ignore.excluded("# comment")
    with pytest.raises(PhalanxError, match=r"^\.dockerignore line 1: '\[ab' is not a valid"):
        ContextIgnore(["[ab"])
    with pytest.raises(PhalanxError, match=r"line 2: '!' needs a pattern"):
        ContextIgnore(["a", "!"])
    # Which file: beside the Dockerfile first, then .containerignore (podman), .dockerignore.
    ctx = tmp_path / "ctx"
    (ctx / "docker").mkdir(parents=True)
    dockerfile = ctx / "docker" / "Train.dockerfile"
    dockerfile.write_text(f"FROM {IMAGE}\n")
    (ctx / ".dockerignore").write_text("a\n")
    assert ignore_file(ctx, dockerfile, "podman") == ctx / ".dockerignore"
    (ctx / ".containerignore").write_text("b\n")
    assert ignore_file(ctx, dockerfile, "podman") == ctx / ".containerignore"
    assert ignore_file(ctx, dockerfile, "docker") == ctx / ".dockerignore"
    (ctx / "docker" / "Train.dockerfile.dockerignore").write_text("c\n")
    assert ignore_file(ctx, dockerfile, "docker") == Path(f"{dockerfile}.dockerignore")
    assert ignore_file(ctx, dockerfile, "podman") == Path(f"{dockerfile}.dockerignore")
    # The Dockerfile counts even where the ignore file names it (the engine reads it).
    podman = Engine("podman", "/usr/bin/podman")
    build = ContextBuild(ctx, dockerfile)
    (ctx / "docker" / "Train.dockerfile.dockerignore").write_text("docker\nc\n")
    before = build.key(podman)
    (ctx / "c").write_text("left out\n")
    assert build.key(podman) == before
    dockerfile.write_text(f"FROM {IMAGE}\nENV CHANGED=1\n")
    assert build.key(podman) != before


def _wheel(folder: Path, value: int) -> Path:
    """A pure-Python wheel of ``demo_layer`` (nothing to fetch from an index)."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo_layer-1.0-py3-none-any.whl"
    info = "demo_layer-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("demo_layer/__init__.py", f"VALUE = {value}\n")
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo_layer\nVersion: 1.0\n")
        whl.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        )  # fmt: skip
        whl.writestr(f"{info}/RECORD", "")
    return path


def test_image_with_a_pip_layer(cli: Cli, engine: Engine) -> None:
    value = int(time.time())  # new content: a fresh build
    _wheel(cli.workdir / "wheels", value)
    cli.write("requirements.txt", "./wheels/demo_layer-1.0-py3-none-any.whl\n")
    spec = _probe_job(cli, f"{{image: {IMAGE}, pip_file: requirements.txt}}")
    found = _found(cli, cli.create(spec))
    # Installed in the derived image (the base has no pip: phalanx's was lent to the build).
    assert found["value"] == value
    assert str(found["layer"]).startswith("/opt/phalanx/packages/")
    # A conda file's pip: section is layered the same way (its folder is the context).
    cli.write(
        "conda.yml",
        "dependencies:\n  - python=3.11\n  - pip:\n"
        "    - ./wheels/demo_layer-1.0-py3-none-any.whl\n",
    )
    found = _found(cli, cli.create(_probe_job(cli, f"{{image: {IMAGE}, conda_file: conda.yml}}")))
    assert found["value"] == value


def test_registered_environments(cli: Cli, engine: Engine) -> None:
    cli.write("envs/marker.txt", "registered\n")
    cli.write("envs/docker/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    env_file = cli.write(
        "envs/env.yml",
        """
        $schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json
        name: bookworm
        version: "1"
        image: {image}
        description: Debian's Python
        tags: {team: vision}
        """.replace("{image}", IMAGE),
    )
    out = cli.run("environment", "create", "-f", str(env_file), check=True).stdout
    assert "environment azureml:bookworm:1 created" in out
    built = cli.write(
        "envs/built.yml", "name: bookworm\nbuild: {path: ., dockerfile_path: docker/Dockerfile}\n"
    )
    out = cli.run("environment", "create", "-f", str(built), check=True).stdout
    assert "azureml:bookworm:2 created (a build context)" in out
    # The context was copied in: later edits do not change version 2.
    cli.write("envs/marker.txt", "edited\n")
    again = cli.run("environment", "create", "-f", str(env_file))
    assert again.returncode == 2 and "bookworm:1 already exists" in again.stderr
    listed = json.loads(cli.run("environment", "list", "--json", check=True).stdout)
    assert [(e["name"], e["version"]) for e in listed] == [("bookworm", "1"), ("bookworm", "2")]
    shown = json.loads(cli.run("environment", "show", "bookworm:1", "--json", check=True).stdout)
    assert shown["image"] == IMAGE and shown["tags"] == {"team": "vision"}
    assert shown["description"] == "Debian's Python"
    # Jobs name them as in Azure ML: NAME:VERSION, NAME@latest.
    assert _found(cli, cli.create(_probe_job(cli, "azureml:bookworm:1")))["marker"] is None
    assert _found(cli, cli.create(_probe_job(cli, "azureml:bookworm@latest")))["marker"] == (
        "registered"
    )
    proc = cli.run("job", "create", "-f", str(_probe_job(cli, "azureml:bookworm:7")))
    assert proc.returncode == 2
    assert "environment bookworm has no version '7' (versions: 1, 2)" in proc.stderr
    # A name nothing is registered under is recorded, with a note, as before.
    proc = cli.run("job", "create", "-f", str(_probe_job(cli, "azureml:AzureML-curated@latest")))
    assert proc.returncode == 0 and "is not registered here" in proc.stderr
    cli.wait(proc.stdout.strip(), ("Completed",))


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_build_context_through_a_server(cli: Cli, engine: Engine) -> None:
    # The context is on the laptop: it goes up with the job and is built on the server.
    cli.write("ctx/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    cli.write("ctx/marker.txt", f"from the laptop {time.time()}\n")
    name = cli.create(_probe_job(cli, "{build: {path: ctx}}"))
    found = _found(cli, name)
    assert str(found["marker"]).startswith("from the laptop")
    # The server's workspace prunes what its jobs built (not the laptop's: it has none).
    tag = _image_of(cli, name)
    out = cli.run("environment", "prune", "--all", "--json", check=True).stdout
    assert json.loads(out) == {"removed": [tag], "kept": {}, "dry_run": False}
    assert image_id(engine, tag) is None


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_registered_environment_through_a_server(cli: Cli, engine: Engine) -> None:
    # The YAML and the context it names are on the laptop; they go up and are registered.
    cli.write("envs/Dockerfile", f"FROM {IMAGE}\nCOPY marker.txt /opt/marker\n")
    cli.write("envs/marker.txt", f"served {time.time()}\n")
    env_file = cli.write("envs/env.yml", "name: served\nbuild: {path: .}\ndescription: up\n")
    out = cli.run("environment", "create", "-f", str(env_file), check=True).stdout
    assert "environment azureml:served:1 created (a build context)" in out
    listed = json.loads(cli.run("environment", "list", "--json", check=True).stdout)
    assert [(e["name"], e["version"], e["description"]) for e in listed] == [("served", "1", "up")]
    shown = json.loads(cli.run("environment", "show", "served@latest", "--json", check=True).stdout)
    assert shown["build"]["path"].startswith(str(cli.home / "environments" / "served" / "1"))
    found = _found(cli, cli.create(_probe_job(cli, "azureml:served@latest")))
    assert str(found["marker"]).startswith("served")
