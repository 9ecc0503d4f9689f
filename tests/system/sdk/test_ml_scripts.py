"""Scripts written for Azure ML's v2 SDK, run with only their ``azure.ai.ml`` imports
changed to ``phalanx.ml``: ``python script.py`` in a subprocess, real jobs, on this
machine's workspace and through a phalanx server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import LOCAL_AND_SERVER, Cli
from phalanx.spec import load_spec_text
from phalanx.workspace import Workspace
from test_distributions import MPI_SCRIPT, TF_SCRIPT

TRAIN = """
import argparse, json, os, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--data")
parser.add_argument("--epochs", type=int)
parser.add_argument("--model")
args = parser.parse_args()
rank, world, node = os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["NODE_RANK"]
files = sorted(os.listdir(args.data))
seen = {"world": int(world), "node": int(node), "files": files, "epochs": args.epochs}
pathlib.Path(args.model, f"rank_{rank}.json").write_text(json.dumps(seen))
print(f"rank {rank} of {world} on node {node} read {files} for {args.epochs} epochs", flush=True)
"""

# An Azure ML SDK v2 script: data asset, a 2-node PyTorch job with a uri_folder input and
# an output, stream, model registration from the output, downloads, lists, cancel.
PYTORCH_AZURE_SCRIPT = """
from azure.ai.ml import MLClient, command, Input, Output
from azure.ai.ml.constants import AssetTypes, InputOutputModes
from azure.ai.ml.entities import AmlCompute, Data, Model, PyTorchDistribution
from azure.identity import DefaultAzureCredential

ml_client = MLClient(
    DefaultAzureCredential(),
    subscription_id="00000000-0000-0000-0000-000000000000",
    resource_group_name="my-resource-group",
    workspace_name="my-workspace",
)

# Azure ML's tutorial: the cluster, created when it is missing.
cpu_compute_target = "cpu-cluster"
try:
    cpu_cluster = ml_client.compute.get(cpu_compute_target)
    print(f"You already have a cluster named {cpu_compute_target}, we'll reuse it as is.")
except Exception:
    print("Creating a new cpu compute target...")
    cpu_cluster = AmlCompute(
        name=cpu_compute_target,
        type="amlcompute",
        size="STANDARD_DS3_V2",
        min_instances=0,
        max_instances=4,
        idle_time_before_scale_down=180,
        tier="Dedicated",
    )
    cpu_cluster = ml_client.compute.begin_create_or_update(cpu_cluster).result()
print("CLUSTER", cpu_cluster.name, cpu_cluster.size)

digits = ml_client.data.create_or_update(
    Data(name="digits", path="./data", type=AssetTypes.URI_FOLDER, description="tiny")
)
print("DATA", digits.name, digits.version, digits.id)

job = command(
    code="./src",
    command="python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}} "
    "--model ${{outputs.model}}",
    inputs={
        "data": Input(
            type=AssetTypes.URI_FOLDER,
            path=f"azureml:digits:{digits.version}",
            mode=InputOutputModes.RO_MOUNT,
        ),
        "epochs": 1,
    },
    outputs={"model": Output(type=AssetTypes.URI_FOLDER, mode=InputOutputModes.RW_MOUNT)},
    environment_variables={"GLOO_SOCKET_IFNAME": "lo"},
    compute="cpu-cluster",
    instance_count=2,
    distribution=PyTorchDistribution(process_count_per_instance=1),
    experiment_name="sdk-scripts",
    display_name="tiny ddp",
    timeout=120,
)
job.inputs.epochs = 2
returned_job = ml_client.jobs.create_or_update(job)
print("SUBMITTED", returned_job.name, returned_job.status)
print("STUDIO", returned_job.studio_url, returned_job.services["Studio"].endpoint)
ml_client.jobs.stream(returned_job.name)
finished = ml_client.jobs.get(returned_job.name)
print("FINISHED", finished.status, finished.outputs["model"].path)
print("SAME", ml_client.jobs.create_or_update(finished).name)

model = ml_client.models.create_or_update(
    Model(
        path=f"azureml://jobs/{returned_job.name}/outputs/model",
        name="tiny-net",
        type=AssetTypes.CUSTOM_MODEL,
        description="trained by the sdk",
    )
)
print("MODEL", model.name, model.version)
ml_client.models.download(name="tiny-net", version=model.version, download_path="./downloaded")
ml_client.jobs.download(returned_job.name, download_path="./job-files", output_name="model")
ml_client.jobs.download(returned_job.name, download_path="./all-files", all=True)
try:
    ml_client.jobs.download(returned_job.name, download_path="./x", output_name="weights")
except Exception as exc:
    print("DOWNLOAD_REFUSED", type(exc).__name__, exc)
print("JOBS", [j.name for j in ml_client.jobs.list()])
print("MODELS", [(m.name, m.version) for m in ml_client.models.list()])
print("DATA_LIST", [(d.name, d.version) for d in ml_client.data.list()])
print("COMPUTE", [(c.name, c.max_instances) for c in ml_client.compute.list()])
print("DEFAULT_STORE", ml_client.datastores.get_default().name)
print("STORES", [d.name for d in ml_client.datastores.list()])

clone = ml_client.jobs.get(returned_job.name)
clone.name = None
clone.code = "./src"
clone.command = "sleep 60"
clone.inputs = {}
clone.display_name = "to cancel"
sleeper = ml_client.create_or_update(clone)
print("CLONE", sleeper.name, sleeper.outputs["model"].path)
poller = ml_client.jobs.begin_cancel(sleeper.name)
poller.result()
print("CANCELED", poller.done(), ml_client.jobs.get(sleeper.name).status)
try:
    ml_client.jobs.stream(sleeper.name)
except Exception as exc:
    print("STREAM_RAISED", type(exc).__name__, exc)
"""

# The same job as YAML: what `phalanx job create -f` would store.
PYTORCH_YAML = """
type: command
code: ./src
command: >-
  python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}}
  --model ${{outputs.model}}
environment_variables: {GLOO_SOCKET_IFNAME: lo}
inputs:
  data: {type: uri_folder, path: "azureml:digits:1", mode: ro_mount}
  epochs: 2
outputs:
  model: {type: uri_folder, mode: rw_mount}
compute: cpu-cluster
resources: {instance_count: 2}
distribution: {type: pytorch, process_count_per_instance: 1}
limits: {timeout: 120}
experiment_name: sdk-scripts
display_name: tiny ddp
"""

MPI_TF_AZURE_SCRIPT = """
from azure.ai.ml import MLClient, command
from azure.ai.ml.entities import MpiDistribution, TensorFlowDistribution
from azure.identity import DefaultAzureCredential

ml_client = MLClient.from_config(DefaultAzureCredential())

mpi_job = command(
    code="./src",
    command="python mpi_job.py",
    environment_variables={"EXTRA": "forwarded"},
    instance_count=2,
    distribution=MpiDistribution(process_count_per_instance=1),
    timeout=120,
)
tf_job = command(
    code="./src",
    command="python tf_job.py",
    environment_variables={"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    instance_count=2,
    distribution=TensorFlowDistribution(worker_count=2),
    timeout=240,
)
for job in (mpi_job, tf_job):
    returned_job = ml_client.jobs.create_or_update(job, experiment_name="sdk-distributions")
    print("SUBMITTED", returned_job.name)
    ml_client.jobs.stream(returned_job.name)
    print("FINISHED", returned_job.name, ml_client.jobs.get(returned_job.name).status)
"""


def as_phalanx(script: str) -> str:
    """The script with its ``azure.ai.ml`` imports changed, and nothing else."""
    changed = script.replace("from azure.ai.ml", "from phalanx.ml")
    before, after = script.splitlines(), changed.splitlines()
    differ = [b for a, b in zip(before, after, strict=True) if a != b]
    assert differ and all(line.startswith("from phalanx.ml") for line in differ)
    return changed


def run_script(
    cli: Cli, name: str, script: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    path = cli.workdir / name
    path.write_text(as_phalanx(textwrap.dedent(script).lstrip()))
    proc = subprocess.run(
        [sys.executable, str(path)],
        env=cli.env,
        cwd=cli.workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc


def printed(stdout: str, key: str) -> list[str]:
    """The words after ``key`` on the line that starts with it."""
    line = next(line for line in stdout.splitlines() if line.startswith(key + " "))
    return line.split(" ")[1:]


@LOCAL_AND_SERVER
def test_pytorch_script_with_data_model_list_stream_and_cancel(cli: Cli) -> None:
    cli.write("src/train.py", TRAIN)
    cli.write("data/a.txt", "1")
    cli.write("data/b.txt", "2")
    proc = run_script(cli, "train_job.py", PYTORCH_AZURE_SCRIPT, timeout=300)
    out, err = proc.stdout, proc.stderr

    assert printed(out, "CLUSTER") == ["cpu-cluster", "STANDARD_DS3_V2"]
    assert "Creating a new cpu compute target..." in out
    assert printed(out, "DATA") == ["digits", "1", "azureml:digits:1"]
    name, status = printed(out, "SUBMITTED")
    assert status == "Queued"
    # The job's page: the server's; on this machine none while no `phalanx studio` runs.
    page = f"{cli.server.url}/jobs/{name}" if cli.server is not None else "None"
    assert printed(out, "STUDIO") == [page] * 2
    # stream() printed rank 0's log as the CLI does, and returned when the job ended.
    assert "rank 0 of 2 on node 0 read ['a.txt', 'b.txt'] for 2 epochs" in out
    assert printed(out, "FINISHED") == ["Completed", f"azureml://jobs/{name}/outputs/model"]
    assert printed(out, "SAME") == [name]  # the job itself, given again
    # A copy (name None) is a new job; the output kept with the first is not its path.
    clone = printed(out, "CLONE")
    assert clone[0] != name and clone[1] == f"azureml://jobs/{clone[0]}/outputs/model"
    assert printed(out, "MODEL") == ["tiny-net", "1"]
    for rank in range(2):
        for folder in ("downloaded/tiny-net", "job-files/named-outputs/model"):
            seen = json.loads((cli.workdir / folder / f"rank_{rank}.json").read_text())
            assert seen == {"world": 2, "node": rank, "files": ["a.txt", "b.txt"], "epochs": 2}
    files = cli.workdir / "all-files"
    assert "rank 0 of 2" in (files / "artifacts/user_logs/std_log_process_0.txt").read_text()
    assert (files / "artifacts/outputs/model/rank_1.json").is_file()
    assert (files / "named-outputs/model/rank_1.json").is_file()
    assert (
        f"DOWNLOAD_REFUSED MLError ml_client.jobs.download(): output_name: job {name} has no "
        "output 'weights'; its outputs: model (and checkpoints)"
    ) in out
    assert name in " ".join(printed(out, "JOBS"))
    assert "('tiny-net', '1')" in out and "('digits', '1')" in out
    assert printed(out, "COMPUTE")[0].startswith("[('local',") and "('cpu-cluster', 1)" in out
    assert printed(out, "DEFAULT_STORE") == ["default"]
    assert printed(out, "STORES") == ["['default']"]
    assert printed(out, "CANCELED") == ["True", "Canceled"]
    assert "STREAM_RAISED JobFailed job" in out and "ended Canceled" in out
    # The unused credential and the workspace name are each noted once.
    assert err.count("does not use the credential") == 1
    assert err.count("workspace_name 'my-workspace' is served by") == 1

    # What the job stores is what the same job submitted as YAML stores.
    stored = Workspace(cli.home).get_job(name)
    yaml_spec = load_spec_text(PYTORCH_YAML, base_dir=cli.workdir).to_record()
    if cli.server is not None:  # the code arrived as an upload on the server
        assert stored.spec.pop("code") != yaml_spec.pop("code")
    assert stored.spec == yaml_spec
    from phalanx.workspace.layout import JobPaths

    kept = JobPaths(Path(stored.job_dir)).spec_yaml.read_text()  # the YAML command() made
    assert "resources:\n  instance_count: 2\n" in kept and "azureml:digits:1" in kept


def test_mpi_and_tensorflow_scripts(cli: Cli) -> None:
    cli.write("src/mpi_job.py", MPI_SCRIPT)
    cli.write("src/tf_job.py", TF_SCRIPT)
    cli.write(".azureml/config.json", '{"subscription_id": "s", "resource_group": "r", '
              '"workspace_name": "home"}')  # fmt: skip
    proc = run_script(cli, "distributed.py", MPI_TF_AZURE_SCRIPT, timeout=400)
    out = proc.stdout
    mpi_name, tf_name = (
        line.split()[1] for line in out.splitlines() if line.startswith("SUBMITTED")
    )
    assert f"FINISHED {mpi_name} Completed" in out and f"FINISHED {tf_name} Completed" in out
    assert "rank 0 allreduce 3" in out  # streamed: 1 + 2 over two nodes of one rank
    assert "worker 0 total 30.0" in out
    assert "workspace_name" not in proc.stderr  # config.json names this workspace's folder
    ws = Workspace(cli.home)
    mpi_dir = Path(ws.get_job(mpi_name).job_dir)
    for rank in range(2):
        seen = json.loads((mpi_dir / "outputs" / f"rank_{rank}.json").read_text())
        assert (seen["mpi_size"], seen["total"], seen["EXTRA"]) == (2, 3, "forwarded")
        assert seen["NODE_RANK"] == str(rank)
    tf_dir = Path(ws.get_job(tf_name).job_dir)
    for index in range(2):
        result = json.loads((tf_dir / "outputs" / f"worker_{index}.json").read_text())
        assert result["replicas"] == 2 and result["total"] == 30.0
    assert ws.get_job(tf_name).experiment_name == "sdk-distributions"


@pytest.mark.parametrize("script", [PYTORCH_AZURE_SCRIPT, MPI_TF_AZURE_SCRIPT])
def test_scripts_change_only_their_import_lines(script: str) -> None:
    as_phalanx(script)
