"""MPI and TensorFlow distributions, run for real: Open MPI's mpirun with mpi4py
collectives across 2 nodes x 2 processes, and tensorflow-cpu's
MultiWorkerMirroredStrategy across two workers, each with its TF_CONFIG."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Cli

MPI_SCRIPT = """
import json, os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
        "MASTER_PORT", "PHALANX_JOB_NAME", "PHALANX_ATTEMPT", "EXTRA", "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA"]
keys += [k for k in os.environ if k.startswith("OMPI_COMM_WORLD_")]
seen = {k: os.environ.get(k) for k in keys}
seen.update(mpi_rank=comm.Get_rank(), mpi_size=comm.Get_size(), total=total)
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"rank_{comm.Get_rank()}.json")
open(out, "w").write(json.dumps(seen))
print(f"rank {comm.Get_rank()} allreduce {total}", flush=True)
if os.environ.get("FAIL_RANK") == str(comm.Get_rank()):
    raise RuntimeError("rank {} gives up".format(comm.Get_rank()))
"""

MPI_JOB = """
command: python mpi_job.py
code: src
resources: {instance_count: 2}
distribution: {type: mpi, process_count_per_instance: 2}
environment_variables: {EXTRA: forwarded, NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: mlx5_0}
limits: {timeout: 120}
"""


def test_mpi_job_runs_allreduce_over_two_nodes_of_two(cli: Cli) -> None:
    # Rank variables of whatever submitted the job (here: a stale set) are not the ranks'.
    cli.env.update(RANK="5", WORLD_SIZE="9", LOCAL_RANK="3")
    cli.write("src/mpi_job.py", MPI_SCRIPT)
    name = cli.create(cli.write("job.yml", MPI_JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    job_dir = Path(job["job_dir"])
    for rank in range(4):
        seen = json.loads((job_dir / "outputs" / f"rank_{rank}.json").read_text())
        assert seen["total"] == 10 and seen["mpi_size"] == 4 and seen["mpi_rank"] == rank
        assert seen["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert seen["OMPI_COMM_WORLD_SIZE"] == "4"
        assert seen["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"  # two hosts of two slots
        assert seen["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert (seen["RANK"], seen["WORLD_SIZE"]) == (str(rank), "4")
        assert (seen["LOCAL_RANK"], seen["NODE_RANK"]) == (str(rank % 2), str(rank // 2))
        assert seen["MASTER_ADDR"] == "127.0.0.1" and int(seen["MASTER_PORT"]) > 0
        assert (seen["PHALANX_JOB_NAME"], seen["EXTRA"]) == (name, "forwarded")
        # mpirun forwards the NCCL settings to every rank on every node (-x).
        assert (seen["NCCL_SOCKET_IFNAME"], seen["NCCL_IB_HCA"]) == ("eth0", "mlx5_0")
        log = (job_dir / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"rank {rank} allreduce 10" in log
    node_log = (job_dir / "system_logs" / "node_0.txt").read_text()
    assert "vader" not in node_log  # no shared-memory clash between the two "hosts"


def test_mpi_rank_failure_is_the_root_cause(cli: Cli) -> None:
    cli.write("src/mpi_job.py", MPI_SCRIPT)
    name = cli.create(cli.write("job.yml", MPI_JOB), "environment_variables.FAIL_RANK=2")
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Failed", job
    error = job["error"]
    assert error["rank"] == 2 and "rank 2 gives up" in error["message"], error
    assert job["attempts"][-1]["cause"] == "user_error"


TF_SCRIPT = """
import json, os
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = config["task"]["index"]
def step():
    ctx = tf.distribute.get_replica_context()
    return tf.constant(float(index + 1)) * 10.0
values = strategy.run(step)
total = strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)
out = os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], f"worker_{index}.json")
open(out, "w").write(json.dumps({"config": config, "total": float(total),
                                 "replicas": strategy.num_replicas_in_sync}))
print("worker", index, "total", float(total), flush=True)
"""

TF_JOB = """
command: python tf_job.py
code: src
resources: {instance_count: 2}
distribution: {type: tensorflow, worker_count: 2}
environment_variables: {TF_CPP_MIN_LOG_LEVEL: "2", CUDA_VISIBLE_DEVICES: ""}
limits: {timeout: 240}
"""


def test_tensorflow_two_workers_allreduce(cli: Cli) -> None:
    cli.write("src/tf_job.py", TF_SCRIPT)
    name = cli.create(cli.write("job.yml", TF_JOB))
    job = cli.wait(name, ("Completed", "Failed"), timeout=240)
    assert job["status"] == "Completed", job
    outputs = Path(job["job_dir"]) / "outputs"
    results = [json.loads((outputs / f"worker_{i}.json").read_text()) for i in range(2)]
    workers = results[0]["config"]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert [w.split(":")[0] for w in workers] == ["127.0.0.1", "127.0.0.2"]  # one per node
    for i, result in enumerate(results):
        assert result["config"]["task"] == {"type": "worker", "index": i}
        assert result["config"]["cluster"] == {"worker": workers}
        assert result["replicas"] == 2
        assert result["total"] == 30.0  # 10 x (1 + 2), reduced across both workers


PS_SCRIPT = """
import json, os, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("task", task, flush=True)
if task["type"] == "ps":
    time.sleep(300)  # a parameter server serves until it is stopped
else:
    time.sleep(3)  # some work, while the parameter server is up
"""


def test_parameter_servers_are_stopped_once_the_workers_finish(cli: Cli) -> None:
    cli.write("src/ps_job.py", PS_SCRIPT)
    job_yml = cli.write(
        "job.yml",
        """
        command: python ps_job.py
        code: src
        distribution: {type: tensorflow, worker_count: 1, parameter_server_count: 1}
        limits: {timeout: 120}
        """,
    )
    name = cli.create(job_yml)
    # Within 90 s, so not by waiting out the parameter server's 300 s.
    job = cli.wait(name, ("Completed", "Failed"), timeout=90)
    assert job["status"] == "Completed", job
    logs = Path(job["job_dir"]) / "user_logs"
    assert "'type': 'worker', 'index': 0" in (logs / "std_log_process_0.txt").read_text()
    assert "'type': 'ps', 'index': 0" in (logs / "std_log_process_1.txt").read_text()
