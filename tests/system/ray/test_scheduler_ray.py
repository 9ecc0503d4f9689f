"""The queue of a Ray target, on the real two-node test cluster (2 CPUs a node).

Until the target's capacity has been read, its jobs are handed to Ray in
queue order and a placement group Ray cannot place shows the job as waiting
(Queued, with Ray's reason), not Running. Once the probe has read the
cluster's nodes, a job that does not fit waits in phalanx's own queue.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import Cli
from phalanx.bench.raycluster import RayCluster

pytestmark = pytest.mark.slow

HOLD = """
command: >-
  python -c "import os, time, pathlib;
  print('STARTED', flush=True);
  gate = pathlib.Path(os.environ['GATES'], os.environ['PHALANX_JOB_NAME']);
  [time.sleep(0.1) for _ in range(3000) if not gate.exists()]"
compute: azureml:sched
environment_variables: {GATES: "%s"}
resources: {instance_count: 2}
distribution: {type: pytorch, process_count_per_instance: 1}
limits: {timeout: 300}
"""


def _until(what: str, check: object, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def test_a_ray_target_queues_what_its_nodes_cannot_hold(
    cli: Cli, ray_cluster: RayCluster, tmp_path: Path
) -> None:
    # Each job node asks for a whole Ray node (2 CPUs): one 2-node job at a time.
    cli.run("compute", "create", "--name", "sched", "--type", "ray", "--address",
            ray_cluster.gcs_address, "--cpus-per-node", "2", check=True)  # fmt: skip
    gates = tmp_path / "gates"
    gates.mkdir()
    spec = cli.write("job.yml", HOLD % gates)
    first = cli.create(spec)
    second = cli.create(spec)
    _until("the first job runs", lambda: cli.show(first)["status"] == "Running")
    # Either Ray holds the second one's placement group (capacity not read yet), or the
    # scheduler holds it in the queue (read): both show it waiting, with a reason.
    _until("the second job shows as waiting", lambda: cli.show(second)["status"] == "Queued")
    _until("a reason for the wait", lambda: (cli.show(second).get("queue") or {}).get("reason"))
    time.sleep(2)
    assert cli.show(second)["status"] == "Queued"  # waiting, never Running meanwhile
    assert not list((Path(cli.show(second)["job_dir"]) / "user_logs").glob("*.txt"))
    _until(
        "the probe read the cluster",
        lambda: json.loads(cli.run("queue", "--compute", "sched", "--json", check=True).stdout)[0][
            "capacity"
        ],
    )
    view = json.loads(cli.run("queue", "--compute", "sched", "--json", check=True).stdout)[0]
    assert len(view["capacity"]["hosts"]) == 2
    assert {h["cpus"] for h in view["capacity"]["hosts"]} == {2.0}
    running_hosts = {r["host"] for r in view["running"] if r["job"] == first}
    assert running_hosts == {h["host"] for h in view["capacity"]["hosts"]}  # placed by Ray
    (gates / first).touch()
    _until("the second job runs", lambda: cli.show(second)["status"] == "Running", timeout=120)
    # With the cluster's nodes known, a third job waits in phalanx's queue, not in Ray.
    third = cli.create(spec)
    _until("the third job's reason", lambda: (cli.show(third).get("queue") or {}).get("reason"))
    reason = cli.show(third)["queue"]["reason"]
    assert reason.startswith("needs 2 CPUs on each of 2 nodes; 0 CPUs free"), reason
    # Not in Ray: a queued job has no supervisor yet (it starts when the job is granted).
    supervisor = Path(cli.show(third)["job_dir"]) / "system_logs" / "supervisor.txt"
    assert not supervisor.exists() or "waiting for Ray to place" not in supervisor.read_text()
    (gates / second).touch()
    (gates / third).touch()
    for name in (first, second, third):
        assert cli.wait(name, ("Completed", "Failed"), timeout=180)["status"] == "Completed"
