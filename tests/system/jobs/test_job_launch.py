"""Real multi-process jobs through the CLI: environment, logs, success, failure."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import LOCAL_AND_SERVER, Cli, job_processes_under

ENV_SCRIPT = """
import json, os, sys
keys = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "NODE_RANK", "PHALANX_JOB_NAME", "PHALANX_ATTEMPT", "PHALANX_CHECKPOINT_DIR",
        "PHALANX_OUTPUTS_DIR", "PHALANX_INPUT_GREETING", "PHALANX_OUTPUT_RESULT", "MY_VAR",
        "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]
seen = {k: os.environ.get(k) for k in keys}
seen["cwd"] = os.getcwd()
seen["argv"] = sys.argv[1:]
out = os.path.join(sys.argv[2], f"rank_{os.environ['RANK']}.json")
with open(out, "w") as f:
    json.dump(seen, f)
print(f"hello from rank {os.environ['RANK']}")
print(f"to stderr from rank {os.environ['RANK']}", file=sys.stderr)
"""

ENV_JOB = """
$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
type: command
name: {name}
experiment_name: launch-tests
code: src
command: >-
  python record_env.py ${{{{inputs.greeting}}}} ${{{{outputs.result}}}}
  ${{{{outputs.checkpoints}}}}
inputs:
  greeting: hi
outputs:
  result:
    type: uri_folder
environment_variables:
  MY_VAR: "42"
  # What a cluster's NCCL needs (docs/deploy.md); no NCCL here, only that they arrive.
  NCCL_SOCKET_IFNAME: "=eth0"
  NCCL_IB_HCA: "mlx5_0:1,mlx5_1:1"
resources:
  instance_count: 2
distribution:
  type: pytorch
  process_count_per_instance: 2
limits:
  timeout: 300
"""


@LOCAL_AND_SERVER
def test_two_nodes_two_processes_each_rank_sees_its_environment(cli: Cli, db: str | None) -> None:
    cli.write("src/record_env.py", ENV_SCRIPT)
    spec = cli.write("job.yml", ENV_JOB.format(name="envjob"))
    name = cli.create(spec)
    assert name == "envjob"
    job = cli.wait(name, ("Completed", "Failed", "Canceled"))
    assert job["status"] == "Completed", job

    result_dir = Path(job["outputs_dir"]) / "result"
    seen = {}
    for path in sorted(result_dir.glob("rank_*.json")):
        data = json.loads(path.read_text())
        seen[int(data["RANK"])] = data
    assert sorted(seen) == [0, 1, 2, 3]  # every rank exactly once (one file per rank)
    ports = {d["MASTER_PORT"] for d in seen.values()}
    assert len(ports) == 1
    for rank, env in seen.items():
        assert env["WORLD_SIZE"] == "4"
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["LOCAL_RANK"] == str(rank % 2)
        assert env["NODE_RANK"] == str(rank // 2)
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["PHALANX_JOB_NAME"] == "envjob"
        assert env["PHALANX_ATTEMPT"] == "1"
        assert env["PHALANX_CHECKPOINT_DIR"] == job["checkpoint_dir"]
        assert env["PHALANX_OUTPUTS_DIR"] == job["outputs_dir"]
        assert env["PHALANX_INPUT_GREETING"] == "hi"
        assert env["PHALANX_OUTPUT_RESULT"] == str(result_dir)
        assert env["MY_VAR"] == "42"
        assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_IB_HCA"]) == ("=eth0", "mlx5_0:1,mlx5_1:1")
        assert env["argv"] == ["hi", str(result_dir), job["checkpoint_dir"]]
        assert env["cwd"] == str(Path(job["job_dir"]) / "code")

    logs = sorted(Path(p).name for p in job["user_logs"])
    assert logs == [f"std_log_process_{r}.txt" for r in range(4)]
    for rank in range(4):
        text = (Path(job["job_dir"]) / "user_logs" / f"std_log_process_{rank}.txt").read_text()
        assert f"hello from rank {rank}" in text
        assert f"to stderr from rank {rank}" in text

    assert [a["status"] for a in job["attempts"]] == ["Succeeded"]
    assert job["attempts"][0]["exit_code"] == 0
    assert job["error"] is None
    listed = cli.run("job", "list", check=True).stdout
    assert "envjob" in listed and "Completed" in listed
    assert (cli.home / "phalanx.db").exists() == (db is None)  # PHALANX_DB reached every process


FAIL_SCRIPT = """
import os, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
if dist.get_rank() == 2:
    open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "raised_at"), "w").write(str(time.time()))
    raise ValueError("rank two cannot go on")
dist.barrier()      # the others wait here for rank 2, which never comes
time.sleep(600)
"""


def test_one_failing_rank_fails_the_job_and_stops_every_process(cli: Cli) -> None:
    cli.write("src/fail.py", FAIL_SCRIPT)
    spec = cli.write(
        "job.yml",
        """
        command: python fail.py
        code: src
        resources: {instance_count: 2}
        distribution: {type: pytorch, process_count_per_instance: 2}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=120)
    ended = time.time()
    assert job["status"] == "Failed"
    error = job["error"]
    assert error["rank"] == 2
    assert error["exit_code"] == 1
    assert error["message"] == "ValueError: rank two cannot go on"
    assert "fail.py" in error["traceback"]
    assert error["node_rank"] == 1 and error["local_rank"] == 0
    assert job["attempts"][0]["status"] == "Failed"
    assert job["attempts"][0]["cause"] == "user_error"
    assert job["attempts"][0]["exit_code"] == 1

    raised_at = float((Path(job["outputs_dir"]) / "raised_at").read_text())
    # Stopped by phalanx, not by the others' 600 s sleep (a bound against a hang, not a
    # speed check: a busy machine takes seconds to notice and stop four processes).
    assert ended - raised_at < 60, "the job took more than 60 s to stop after the failure"
    assert job_processes_under(cli.home) == []

    shown = cli.run("job", "show", name, check=True).stdout
    assert "rank 2" in shown and "ValueError: rank two cannot go on" in shown


@LOCAL_AND_SERVER
def test_cancel_stops_every_process(cli: Cli) -> None:
    cli.write("src/sleep.py", "import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    spec = cli.write(
        "job.yml",
        """
        command: python sleep.py
        code: src
        resources: {instance_count: 2}
        distribution: {type: pytorch, process_count_per_instance: 1}
        """,
    )
    name = cli.create(spec)
    cli.wait(name, ("Running",))
    deadline = time.monotonic() + 60
    log0 = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    while not (log0.exists() and "started" in log0.read_text()):
        assert time.monotonic() < deadline, "rank 0 never started"
        time.sleep(0.2)
    assert len(job_processes_under(cli.home)) >= 4  # 2 launchers + 2 wrappers + commands

    started = time.monotonic()
    out = cli.run("job", "cancel", name, check=True)
    assert "Canceled" in out.stdout
    assert time.monotonic() - started < 15
    job = cli.show(name)
    assert job["status"] == "Canceled"
    assert job["attempts"][0]["status"] == "Canceled"
    assert job_processes_under(cli.home) == []
    again = cli.run("job", "cancel", name, check=True)
    assert "already ended" in again.stdout


def test_timeout_fails_the_job(cli: Cli) -> None:
    cli.write("src/sleep.py", "import time\ntime.sleep(600)\n")
    spec = cli.write(
        "job.yml",
        """
        command: python sleep.py
        code: src
        limits: {timeout: 3}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=60)
    assert job["status"] == "Failed"
    assert job["attempts"][0]["cause"] == "timeout"
    assert "limits.timeout" in job["error"]["message"]
    assert job["duration_s"] < 15
    assert job_processes_under(cli.home) == []


def test_command_not_found_names_the_rank_and_the_shell_error(cli: Cli) -> None:
    spec = cli.write("job.yml", "command: no-such-program --flag\n")
    proc = cli.run("run", str(spec))
    assert proc.returncode == 1
    [listed] = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    job = cli.show(listed["name"])
    assert job["status"] == "Failed"
    assert job["error"]["rank"] == 0
    assert job["error"]["exit_code"] == 127
    assert "no-such-program" in job["error"]["message"]


def test_process_tree_leaves_nothing_behind_after_success(cli: Cli) -> None:
    spec = cli.write("job.yml", "command: echo done\n")
    proc = cli.run("run", str(spec))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done" in proc.stdout
    assert "Completed" in proc.stdout
    assert job_processes_under(cli.home) == []
