"""Ray nodes that share nothing with the workspace (files: local): each node sets the job
up in a folder of its own, makes its inputs ready through its own cache (Azurite behind a
datastore), and its logs, metrics and outputs reach the workspace while the job runs; the
job's environment is built by Ray (runtime_env). On the real two-node test cluster, each
node with its own PHALANX_NODE_HOME."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

import servers
from conftest import Cli, blob_datastore
from phalanx.bench.raycluster import RayCluster
from phalanx.launch.logtimes import entries, lookup
from phalanx.tracking.runfiles import read_run_data

pytestmark = pytest.mark.slow

FILES = {"train/a.bin": b"a" * 3000, "train/sub/b.bin": b"b" * 5000}

SCRIPT = """
import hashlib, json, os, sys, time
from pathlib import Path
import torch.distributed as dist
from phalanx.train import log_metric
dist.init_process_group("gloo")
rank = dist.get_rank()
data = Path(sys.argv[1])
digest = hashlib.sha256()
for path in sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith(".")):
    digest.update(path.relative_to(data).as_posix().encode() + path.read_bytes())
rec = {"input": str(data), "digest": digest.hexdigest(), "rank": rank,
       "job_dir": os.environ["PHALANX_JOB_DIR"], "home": os.environ["PHALANX_HOME"]}
Path(os.environ["PHALANX_OUTPUTS_DIR"], f"rank_{rank}.json").write_text(json.dumps(rec))
if rank == 0:
    Path(sys.argv[2], "weights.txt").write_text("trained")
    log_metric("loss", 0.5, step=1)
# MLflow with no set-up: the node's endpoint keeps rank 0's calls, in the node's folder.
import mlflow
mlflow.log_param("node", os.environ["NODE_RANK"])
mlflow.log_metric("mlflow_loss", 0.25 + rank, step=1)
note = Path(f"note_{rank}.txt")
note.write_text(f"from rank {rank}")
mlflow.log_artifact(str(note), artifact_path="notes")
print("halfway", rank, flush=True)
time.sleep(float(sys.argv[3]))
dist.barrier()
print("finished", rank, flush=True)
dist.destroy_process_group()
"""


def _expected_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(FILES):
        digest.update(path.removeprefix("train/").encode() + FILES[path])
    return digest.hexdigest()


def test_nodes_keep_their_own_files_and_ship_them_back(
    cli: Cli, ray_cluster: RayCluster, azurite: servers.Azurite
) -> None:
    from azure.storage.blob import BlobServiceClient

    container = blob_datastore(cli, azurite, FILES)
    cli.run(
        "compute", "create", "--name", "apart", "--address", ray_cluster.gcs_address, check=True
    )  # fmt: skip  (files: local is the default)
    cli.write("src/nodes.py", SCRIPT)
    spec = cli.write(
        "job.yml",
        """
        command: python nodes.py ${{inputs.data}} ${{outputs.model}} 6
        code: src
        compute: apart
        inputs:
          data: {type: uri_folder, path: azureml://datastores/blobs/paths/train, mode: download}
        outputs:
          model: {type: uri_folder, path: azureml://datastores/blobs/paths/out, mode: upload}
        resources: {instance_count: 2}
        distribution: {type: pytorch, process_count_per_instance: 1}
        limits: {timeout: 300}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Running",), timeout=180)
    job_dir = Path(job["job_dir"])
    # Logs stream: a rank's line is in the workspace while the job still runs.
    deadline = time.monotonic() + 60
    while "halfway" not in _text(job_dir / "user_logs" / "std_log_process_1.txt"):
        assert time.monotonic() < deadline, "rank 1's log never reached the workspace"
        time.sleep(0.2)
    assert cli.show(name)["status"] == "Running"

    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    ranks = [json.loads((job_dir / "outputs" / f"rank_{r}.json").read_text()) for r in range(2)]
    homes = {ray_cluster.node_home("node_a"), ray_cluster.node_home("node_b")}
    # Each node ran the job in its own folder, fed from its own cache.
    assert {Path(r["home"]) for r in ranks} == homes
    for r in ranks:
        home = Path(r["home"])
        assert Path(r["job_dir"]).is_relative_to(home / "jobs")
        assert Path(r["input"]).is_relative_to(home / "cache" / "downloads")
        assert r["digest"] == _expected_digest()
    for home in homes:  # each node's copy of the job is gone once shipped; its cache stays
        assert not list((home / "jobs").glob(f"{name}-*"))
    # Nothing was fetched by the supervisor.
    assert not (cli.workdir.parent / "cache" / "downloads").exists()
    for rank in range(2):
        log = _text(job_dir / "user_logs" / f"std_log_process_{rank}.txt")
        assert f"halfway {rank}" in log and f"finished {rank}" in log
        # Its lines were timed as they arrived here (the node's own index stayed there).
        path = job_dir / "user_logs" / f"std_log_process_{rank}.txt"
        size = path.stat().st_size
        found = entries(path, [size])
        assert found and found[-1][0] == size, found
        (when,) = lookup(found, [size])
        assert when is not None and abs(time.time() - when) < 600
    assert (job_dir / "system_logs" / "node_1.txt").is_file()
    metrics = [json.loads(x) for x in _text(job_dir / "metrics.jsonl").splitlines()]
    assert sorted((m["name"], m["value"]) for m in metrics) == [
        ("loss", 0.5), ("mlflow_loss", 0.25)
    ]  # fmt: skip
    # What rank 0 logged with mlflow was shipped with the rest; rank 1's was not kept.
    assert read_run_data(job_dir).params == {"node": "0"}
    assert [p.name for p in (job_dir / "outputs" / "notes").iterdir()] == ["note_0.txt"]
    # The upload-mode output went node -> workspace -> datastore.
    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    blob = service.get_blob_client(container, "out/weights.txt")
    assert blob.download_blob().readall() == b"trained"
    # The storage key travelled in memory only: no file of the workspace or a node has it.
    for root in (cli.home, *homes):
        leaked = [
            p for p in root.rglob("*")
            if p.is_file() and not p.is_symlink()
            and servers.AZURITE_KEY.encode() in p.read_bytes()
        ]  # fmt: skip
        assert leaked == [], leaked


def test_shared_files_write_the_workspace_directly(cli: Cli, ray_cluster: RayCluster) -> None:
    cli.run("compute", "create", "--name", "together", "--address", ray_cluster.gcs_address,
            "--files", "shared", check=True)  # fmt: skip
    cli.write("src/nodes.py", SCRIPT)
    cli.write("data/x.bin", "x")
    spec = cli.write(
        "job.yml",
        f"""
        command: python nodes.py ${{{{inputs.data}}}} ${{{{outputs.model}}}} 0
        code: src
        compute: together
        inputs:
          data: {{type: uri_folder, path: {cli.workdir / "data"}}}
        outputs:
          model: {{type: uri_folder}}
        resources: {{instance_count: 1}}
        limits: {{timeout: 300}}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    rank0 = json.loads((Path(job["job_dir"]) / "outputs" / "rank_0.json").read_text())
    assert rank0["job_dir"] == job["job_dir"]
    assert rank0["input"] == str(cli.workdir / "data")
    assert (Path(job["job_dir"]) / "outputs" / "model" / "weights.txt").read_text() == "trained"
    shown = json.loads(cli.run("compute", "show", "together", "--json", check=True).stdout)[
        "settings"
    ]
    assert shown["files"] == "shared"


ENV_SCRIPT = """
import json, os, sys
import pyfiglet, torch
out = {"python": sys.executable, "pyfiglet": pyfiglet.__file__, "torch": torch.__version__}
open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "env.json"), "w").write(json.dumps(out))
"""


# Two jobs that each build an environment (pip) on a node, beside the other suites.
@pytest.mark.timeout(900)
def test_environment_is_built_by_ray_on_the_node(cli: Cli, ray_cluster: RayCluster) -> None:
    cli.write("src/env_job.py", ENV_SCRIPT)
    cli.write("requirements.txt", "-r common.txt\n")
    cli.write("common.txt", "pyfiglet==1.0.4  # a small pure-Python package\n")
    job_yml = """
        command: python env_job.py
        code: src
        compute: {address}
        environment: {{pip_file: {file}}}
        resources: {{instance_count: 1}}
        limits: {{timeout: 600}}
        """
    spec = cli.write("job.yml", job_yml.format(address=ray_cluster.gcs_address,
                                               file="requirements.txt"))  # fmt: skip
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=600)
    assert job["status"] == "Completed", job
    seen = json.loads((Path(job["job_dir"]) / "outputs" / "env.json").read_text())
    assert "runtime_resources" in seen["python"]  # Ray's environment on the node
    assert "runtime_resources" in seen["pyfiglet"] and seen["torch"]
    assert not (cli.home / "envs").exists()  # nothing built by the supervisor

    cli.write("bad.txt", "phalanx-no-such-package-anywhere==9.9\n")
    spec = cli.write("job.yml", job_yml.format(address=ray_cluster.gcs_address, file="bad.txt"))
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=600)
    assert job["status"] == "Failed"
    assert "Ray could not build the job's environment" in job["error"]["message"], job["error"]

    cli.write("local.txt", "./mypkg\n")
    spec = cli.write("job.yml", job_yml.format(address=ray_cluster.gcs_address, file="local.txt"))
    refused = cli.run("job", "create", "-f", str(spec))
    assert refused.returncode == 2 and "installs from a path on this machine" in refused.stderr


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


MPI_SCRIPT = """
import json, os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
keys = ["RANK", "NODE_RANK", "PHALANX_RAY_NODE_ID", "PHALANX_JOB_DIR", "OMPI_COMM_WORLD_LOCAL_SIZE"]
seen = {k: os.environ.get(k) for k in keys}
seen.update(rank=comm.Get_rank(), total=total, out=sys.argv[1],
            container=os.path.exists("/run/.containerenv"), mpi4py=MPI.__file__, cwd=os.getcwd())
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"rank_{comm.Get_rank()}.json")
open(out, "w").write(json.dumps(seen))
print(f"rank {comm.Get_rank()} allreduce {total}", flush=True)
"""


@pytest.mark.parametrize("image", [None, "phalanx-test-bookworm"])
def test_mpi_across_ray_nodes(cli: Cli, ray_cluster: RayCluster, image: str | None) -> None:
    """mpirun on node 0; node 1's daemon started by node 1's agent (no ssh), its ranks in
    node 1's folder and environment, their logs shipped back. In an image: mpirun in node
    0's container, node 1's daemon in a container on node 1, the image's Open MPI."""
    if image is not None:
        from test_containers import IMAGE, make_test_image

        make_test_image()
        image = IMAGE
    cli.write("src/mpi_job.py", MPI_SCRIPT)
    spec = cli.write(
        "job.yml",
        f"""
        command: python mpi_job.py ${{{{outputs.model}}}}
        code: src
        compute: {ray_cluster.gcs_address}
        outputs:
          model: {{type: uri_folder}}
        resources: {{instance_count: 2}}
        distribution: {{type: mpi, process_count_per_instance: 2}}
        limits: {{timeout: 300}}
        """
        + (f"environment: {{image: {image}}}\n" if image else ""),
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=240)
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])
    ranks = [json.loads((job_dir / "outputs" / f"rank_{r}.json").read_text()) for r in range(4)]
    assert [r["total"] for r in ranks] == [10] * 4
    assert [r["NODE_RANK"] for r in ranks] == ["0", "0", "1", "1"]
    assert {r["OMPI_COMM_WORLD_LOCAL_SIZE"] for r in ranks} == {"2"}
    node_ids = [r["PHALANX_RAY_NODE_ID"] for r in ranks]
    assert node_ids[0] == node_ids[1] != node_ids[2] == node_ids[3]
    for r in ranks:
        # Each node's ranks ran in that node's folder, with that node's command.
        assert Path(r["PHALANX_JOB_DIR"]).name.endswith(f"-node{r['NODE_RANK']}")
        assert r["out"].startswith(r["PHALANX_JOB_DIR"])
        assert r["cwd"].startswith(r["PHALANX_JOB_DIR"])  # not node 0's folder
    for rank in range(4):
        log = _text(job_dir / "user_logs" / f"std_log_process_{rank}.txt")
        assert f"rank {rank} allreduce 10" in log
    # With an image every rank ran in a container, on the image's own mpi4py.
    assert {r["container"] for r in ranks} == {image is not None}
    assert {r["mpi4py"].startswith("/usr/lib/python3/") for r in ranks} == {image is not None}
    # Two Ray nodes of one machine: no shared-memory segments between them.
    assert "vader" not in _text(job_dir / "system_logs" / "node_0.txt")
