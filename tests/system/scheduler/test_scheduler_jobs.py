"""The queue with real jobs: devices per node, waiting, order, cancel, lost processes.

GPUs are declared, not real (no GPU here): a local target made with
``--gpus 0-7`` hands out those ids through ``CUDA_VISIBLE_DEVICES``, which the
ranks print; torch on the CPU ignores them. Everything else is real: the CLI
in a subprocess, the scheduler process phalanx starts, supervisors, torchrun.
Tests that take ``db`` run twice: on the workspace's SQLite file and on a real
PostgreSQL named by ``PHALANX_DB``, which every process of the workspace inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from conftest import LOCAL_AND_SERVER, Cli, job_processes_under, workspace_processes
from phalanx.workspace import Workspace

# Each rank prints its devices, then waits until the file `release` exists in the
# job's working directory (or RELEASE_DIR) so the test decides when a job ends.
HOLD = """
command: >-
  python -c "import os, time, pathlib;
  print('DEVICES', os.environ['RANK'], os.environ['PHALANX_ATTEMPT'],
  os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True);
  gate = pathlib.Path(os.environ['RELEASE_DIR'], os.environ['PHALANX_JOB_NAME']);
  [time.sleep(0.1) for _ in range(3000) if not gate.exists()]"
environment_variables: {{RELEASE_DIR: "{gates}"}}
resources: {{instance_count: {nodes}, gpus_per_instance: {gpus}}}
distribution: {{type: pytorch, process_count_per_instance: 1}}
"""


def _hold_spec(cli: Cli, gates: Path, nodes: int = 1, gpus: int = 1, name: str = "job") -> Path:
    gates.mkdir(exist_ok=True)
    gates.chmod(0o755)  # a server's job runs walled off: its account must see the gates
    return cli.write(f"{name}.yml", HOLD.format(gates=gates, nodes=nodes, gpus=gpus))


def _query(cli: Cli, sql: str, **params: object) -> list[dict[str, Any]]:
    """Rows of the workspace database, read directly (a CLI call would also wake the
    scheduler), from SQLite or the PostgreSQL the CLI was given."""
    ws = Workspace(cli.home, db=cli.env.get("PHALANX_DB"))
    try:
        return [dict(row) for row in ws.query(sql, params)]
    finally:
        ws.close()


def _status(cli: Cli, name: str) -> str:
    return str(_query(cli, "SELECT status FROM jobs WHERE name = :name", name=name)[0]["status"])


def _wait_status(cli: Cli, name: str, wanted: tuple[str, ...], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while (status := _status(cli, name)) not in wanted:
        assert time.monotonic() < deadline, f"{name} still {status}, wanted {wanted}"
        time.sleep(0.1)
    return status


def _held_devices(cli: Cli) -> dict[str, list[str]]:
    """Every device held now → the jobs holding it (more than one would be a bug)."""
    held: dict[str, list[str]] = {}
    for row in _query(cli, "SELECT job_name, host, gpus_json FROM allocations"):
        for gpu in json.loads(row["gpus_json"]):
            held.setdefault(f"{row['host']}/{gpu}", []).append(row["job_name"])
    return held


def _devices_seen(cli: Cli, name: str, attempt: int | None = None) -> dict[int, str]:
    """RANK → the CUDA_VISIBLE_DEVICES it printed (in ``attempt`` only, when given)."""
    seen = {}
    for log in (cli.home / "jobs" / name / "user_logs").glob("std_log_process_*.txt"):
        # The rank may be writing the file now: its last piece, with no newline yet, is not a line.
        for line in log.read_text().split("\n")[:-1]:
            if line.startswith("DEVICES "):
                _, rank, printed_in, devices = line.split()
                if attempt is None or int(printed_in) == attempt:
                    seen[int(rank)] = devices
    return seen


def _open_attempts(cli: Cli) -> dict[str, int]:
    """Job → the number of its attempt that has begun and not ended."""
    rows = _query(cli, "SELECT job_name, number FROM attempts WHERE ended_at IS NULL")
    return {row["job_name"]: int(row["number"]) for row in rows}


def _wait_devices(cli: Cli, name: str, ranks: int, timeout: float = 60) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while len(seen := _devices_seen(cli, name)) < ranks:
        assert time.monotonic() < deadline, f"{name}: ranks never printed their devices"
        time.sleep(0.1)
    return seen


@LOCAL_AND_SERVER
def test_nodes_get_disjoint_gpus_and_a_job_waits_for_its_turn(
    cli: Cli, tmp_path: Path, db: str | None
) -> None:
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0-7",
            "--cpus", "64", check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    first = cli.create(_hold_spec(cli, gates, nodes=2, gpus=3))
    assert _wait_devices(cli, first, 2) == {0: "0,1,2", 1: "3,4,5"}
    # 2 GPUs are free: a 3-GPU job waits, and a 2-GPU job behind it may not take them.
    big = cli.create(_hold_spec(cli, gates, gpus=3, name="big"))
    small = cli.create(_hold_spec(cli, gates, gpus=2, name="small"))
    deadline = time.monotonic() + 30
    while not (cli.show(big).get("queue") and cli.show(small).get("queue")):
        assert time.monotonic() < deadline, "the scheduler never explained the wait"
        time.sleep(0.2)
    assert cli.show(big)["queue"]["reason"].startswith("needs 3 GPUs on 1 node; 2 GPUs free")
    assert "held for " + big in cli.show(small)["queue"]["reason"]
    shown = cli.run("job", "show", first, check=True).stdout
    assert "node 0:" in shown and "GPUs 0,1,2" in shown and "GPUs 3,4,5" in shown
    listed = cli.run("job", "list", check=True).stdout
    assert "#1" in listed and "#2" in listed
    queue = json.loads(cli.run("queue", "--json", check=True).stdout)[0]
    assert [q["job"] for q in queue["queued"]] == [big, small]
    assert {r["job"] for r in queue["running"]} == {first}
    time.sleep(1.0)
    assert (_status(cli, big), _status(cli, small)) == ("Queued", "Queued")

    (gates / first).touch()
    assert _wait_devices(cli, big, 1) == {0: "0,1,2"}
    assert _wait_devices(cli, small, 1) == {0: "3,4"}
    assert all(len(jobs) == 1 for jobs in _held_devices(cli).values())
    (gates / big).touch()
    (gates / small).touch()
    for name in (first, big, small):
        assert cli.wait(name, ("Completed", "Failed"))["status"] == "Completed"
    assert _held_devices(cli) == {}
    # Every process (CLI, scheduler, supervisors) used the database it was given.
    assert (cli.home / "phalanx.db").exists() == (db is None)


@LOCAL_AND_SERVER
def test_a_job_that_can_never_fit_is_refused_at_create(cli: Cli, tmp_path: Path) -> None:
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0-7",
            check=True)  # fmt: skip
    spec = _hold_spec(cli, cli.home.parent / "gates", gpus=9)
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2
    assert "9 GPUs" in proc.stderr and "has 8" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []
    cli.run("compute", "create", "--type", "local", "--name", "small", "--gpus", "none",
            "--memory", "1Gi", check=True)  # fmt: skip
    big = cli.run("job", "create", "-f", str(spec), "--set", "compute=small",
                  "--set", "resources.gpus_per_instance=0",
                  "--set", "resources.memory_per_instance=2Gi")  # fmt: skip
    assert big.returncode == 2 and "2 GiB of memory" in big.stderr and "1 GiB" in big.stderr
    typo = cli.run("job", "validate", "-f", str(spec), "--set", "resources.memory_per_instance=2Q")
    assert typo.returncode == 2 and "memory_per_instance" in typo.stderr, typo.stderr
    # Two local targets never share a device.
    clash = cli.run("compute", "create", "--type", "local", "--name", "team", "--gpus", "6,7")
    assert clash.returncode == 2 and "already belong to compute 'local'" in clash.stderr


def test_the_built_in_target_keeps_the_gpus_no_other_local_target_owns(
    cli: Cli, tmp_path: Path
) -> None:
    """With `nvidia-smi` listing 8 GPUs (a stand-in script: no GPU here), a second local
    target owning 6-7 leaves `local` 0-5, and jobs of both never share a device."""
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in *query-gpu=index*) seq 0 7 ;; *) exit 1 ;; esac\n')
    smi.chmod(0o755)
    cli.env["PATH"] = f"{fake}{os.pathsep}{cli.env['PATH']}"
    cli.env["PHALANX_SYSTEM_METRICS_INTERVAL"] = "0"
    gates = cli.home.parent / "gates"
    refused = cli.run("compute", "create", "--type", "local", "--name", "team")
    assert refused.returncode == 2 and "needs --gpus" in refused.stderr
    cli.run("compute", "create", "--type", "local", "--name", "team", "--gpus", "6,7",
            check=True)  # fmt: skip
    too_many = cli.run("job", "create", "-f", str(_hold_spec(cli, gates, gpus=7)))
    assert too_many.returncode == 2 and "has 6" in too_many.stderr, too_many.stderr
    six = cli.create(_hold_spec(cli, gates, gpus=6))
    team = cli.create(_hold_spec(cli, gates, gpus=2, name="team"), "compute=team")
    assert _wait_devices(cli, six, 1) == {0: "0,1,2,3,4,5"}
    assert _wait_devices(cli, team, 1) == {0: "6,7"}
    for name in (six, team):
        (gates / name).touch()
        assert cli.wait(name, ("Completed", "Failed"))["status"] == "Completed"


def test_priority_then_submission_order_and_cancel_while_queued(
    cli: Cli, tmp_path: Path, db: str | None
) -> None:
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0",
            check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    spec = _hold_spec(cli, gates)
    blocker = cli.create(spec)
    _wait_devices(cli, blocker, 1)
    low = cli.create(spec, "queue_settings.priority=low")
    medium = cli.create(spec)
    high = cli.create(spec, "queue_settings.priority=high")
    gone = cli.create(spec, "queue_settings.priority=high")
    time.sleep(1.0)  # its supervisor asleep in the queue
    asked = time.monotonic()
    cancel = cli.run("job", "cancel", gone, check=True)
    assert time.monotonic() - asked < 60  # a bound against a hang, not a speed check
    assert "Canceled" in cancel.stdout
    deadline = time.monotonic() + 15
    while [p for p in psutil.process_iter(["cmdline"]) if gone in (p.info["cmdline"] or [])]:
        assert time.monotonic() < deadline, "the canceled job's supervisor never ended"
        time.sleep(0.1)
    order = []
    running = blocker
    for _ in range(3):
        (gates / running).touch()
        cli.wait(running, ("Completed",))
        deadline = time.monotonic() + 30
        while not (nxt := [n for n in (low, medium, high) if _status(cli, n) != "Queued"
                           and n not in order]):  # fmt: skip
            assert time.monotonic() < deadline, "nothing started after the job ahead ended"
            time.sleep(0.05)
        assert len(nxt) == 1, nxt  # one GPU: one job at a time
        order.append(nxt[0])
        running = nxt[0]
    (gates / running).touch()
    cli.wait(running, ("Completed",))
    assert order == [high, medium, low]
    assert cli.show(gone)["status"] == "Canceled"


# A script that counts to 20, one step each 0.2 s, keeping its count in the checkpoint
# folder: a resumed attempt goes on from the count saved. The count is written aside and
# renamed into place, as a real checkpoint is: a rank killed in the middle of a write must
# not leave the next attempt an empty count.
COUNTER = """
command: >-
  python -c "import os, time, pathlib;
  ck = pathlib.Path(os.environ['PHALANX_CHECKPOINT_DIR'], 'count');
  tmp = ck.with_name('count.tmp');
  n = int(ck.read_text()) if ck.exists() else 0;
  print('START', n, flush=True);
  [(time.sleep(0.2), tmp.write_text(str(i + 1)), os.replace(tmp, ck),
    print('STEP', i + 1, flush=True)) for i in range(n, 20)]"
retry: {max_attempts: 2}
"""


def test_a_killed_supervisor_is_noticed_and_the_job_resumes(cli: Cli, db: str | None) -> None:
    name = cli.create(cli.write("count.yml", COUNTER))
    log = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + 60
    while "STEP 5" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the job never got to step 5"
        time.sleep(0.1)
    [row] = _query(cli, "SELECT supervisor_pid FROM jobs WHERE name = :name", name=name)
    os.kill(row["supervisor_pid"], signal.SIGKILL)
    # No CLI call from here on: the scheduler notices by itself.
    killed_at = time.monotonic()
    deadline = killed_at + 30
    while True:
        rows = _query(
            cli, "SELECT cause FROM attempts WHERE job_name = :name ORDER BY number", name=name
        )
        causes = [r["cause"] for r in rows]
        if causes[:1] == ["infrastructure"]:
            break
        assert time.monotonic() < deadline, "the lost supervisor was never noticed"
        time.sleep(0.1)
    assert time.monotonic() - killed_at < 10
    assert _wait_status(cli, name, ("Completed", "Failed"), timeout=90) == "Completed"
    job = cli.show(name)
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "infrastructure"),
        ("Succeeded", None),
    ]
    assert "supervisor process ended unexpectedly" in job["attempts"][0]["error"]["message"]
    assert job["attempts"][0]["note"].startswith("retried")
    text = log.read_text()
    starts = [int(line.split()[1]) for line in text.splitlines() if line.startswith("START")]
    assert starts[0] == 0 and starts[1] >= 5  # resumed from its checkpoint, not from 0
    assert _held_devices(cli) == {}


def test_a_killed_scheduler_and_waiting_supervisors_lose_no_job(cli: Cli, tmp_path: Path) -> None:
    """What a reboot does to the queue: every phalanx process of it dies at once."""
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0",
            check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    spec = _hold_spec(cli, gates)
    names = [cli.create(spec, "retry.max_attempts=2") for _ in range(3)]
    _wait_devices(cli, names[0], 1)
    for proc in [*workspace_processes(cli.home), *job_processes_under(cli.home)]:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    time.sleep(0.5)
    cli.run("queue", check=True)  # the first phalanx command after the "reboot"
    deadline = time.monotonic() + 60
    while [a["cause"] for a in cli.show(names[0])["attempts"]][:1] != ["infrastructure"]:
        assert time.monotonic() < deadline, "the running job's lost supervisor was not noticed"
        time.sleep(0.2)
    for name in names:
        (gates / name).touch()
    for name in names:
        assert cli.wait(name, ("Completed", "Failed"), timeout=90)["status"] == "Completed"
    assert _held_devices(cli) == {}


@pytest.mark.slow
def test_random_submissions_cancels_ends_and_kills_keep_devices_apart(
    cli: Cli, tmp_path: Path
) -> None:
    """Random events against the real queue; after each, no device is held twice."""
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0-3",
            "--cpus", "64", check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    rng = random.Random(13)
    specs = {g: _hold_spec(cli, gates, gpus=g, name=f"g{g}") for g in (1, 2, 3)}
    jobs: list[str] = []
    events: list[str] = []

    def check() -> None:
        for device, holders in _held_devices(cli).items():
            assert len(holders) == 1, f"{device} held by {holders} after {events[-3:]}"
        # What the ranks of attempts running now were really given: never the same device.
        # Only attempts open before and after the logs are read count: a requeued job's
        # log still holds its last attempt's line, and one that ended may just have given
        # its device to the next.
        before = _open_attempts(cli)
        printed = {name: _devices_seen(cli, name, n) for name, n in before.items()}
        after = _open_attempts(cli)
        seen: dict[str, str] = {}
        for name, devices_of_ranks in printed.items():
            if after.get(name) != before[name]:
                continue
            for devices in devices_of_ranks.values():
                for device in devices.split(","):
                    assert device not in seen, (
                        f"GPU {device}: {seen[device]} and {name} after {events[-3:]}"
                    )
                    seen[device] = name

    for _ in range(100):
        live = [n for n in jobs if _status(cli, n) in ("Queued", "Preparing", "Running")]
        running = [n for n in live if _status(cli, n) == "Running"]
        event = rng.random()
        if event < 0.45 or not live:
            gpus = rng.choice([1, 1, 2, 3])
            extra = ["queue_settings.priority=" + rng.choice(["low", "medium", "high"])]
            jobs.append(cli.create(specs[gpus], *extra))
            events.append(f"create {jobs[-1]} ({gpus} GPUs)")
        elif event < 0.75 and running:
            victim = rng.choice(running)
            (gates / victim).touch()
            events.append(f"end {victim}")
        elif event < 0.87:
            victim = rng.choice(live)
            cli.run("job", "cancel", victim, check=True)
            events.append(f"cancel {victim}")
        elif running:
            victim = rng.choice(running)
            [row] = _query(cli, "SELECT supervisor_pid FROM jobs WHERE name = :name", name=victim)
            if row["supervisor_pid"]:
                # It may have ended since its status was read (its job just finished).
                with contextlib.suppress(ProcessLookupError):
                    os.kill(row["supervisor_pid"], signal.SIGKILL)
            events.append(f"kill supervisor of {victim}")
        time.sleep(rng.choice([0.0, 0.2, 0.5]))
        check()
    for name in jobs:
        (gates / name).touch()
    for name in jobs:
        status = _wait_status(cli, name, ("Completed", "Failed", "Canceled"), timeout=120)
        check()
        if status == "Failed":
            # Only a job whose supervisor was killed (no retry: max_attempts 1) may fail.
            assert any(e == f"kill supervisor of {name}" for e in events), name
    assert _held_devices(cli) == {}
    assert not job_processes_under(cli.home)


@pytest.mark.slow
def test_a_spot_job_is_preempted_for_a_higher_one_and_resumes_losing_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    """The reference workload as a spot job on a 2-slot target; an urgent job takes its
    place, it saves at the step it reached, waits, resumes: the same weights as a run
    that was never interrupted."""
    from conftest import REPO
    from test_resume import JOB, _last_step, _shards, _weights

    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "none",
            "--cpus", "2", check=True)  # fmt: skip
    # 4 epochs (40 steps), preempted at step 6: the urgent job's preemption reaches the
    # spot job mid-run even where a busy machine takes seconds to place it.
    four_epochs = JOB.replace("--epochs 2", "--epochs 4")
    spec = cli.write("job.yml", four_epochs.format(code=REPO / "examples" / "imagenet",
                                           data=_shards(tmp_path)))  # fmt: skip
    baseline = cli.wait(cli.create(spec), ("Completed", "Failed"), timeout=180)
    assert baseline["status"] == "Completed", baseline

    spot = cli.create(spec, "queue_settings.job_tier=spot")
    log = cli.home / "jobs" / spot / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + 120
    while _last_step(log) < 6:
        assert time.monotonic() < deadline, "the spot job never reached step 6"
        time.sleep(0.1)
    urgent_spec = cli.write("urgent.yml", "command: python -c \"print('urgent ran')\"\n")
    urgent = cli.create(urgent_spec, "queue_settings.priority=high")
    assert cli.wait(urgent, ("Completed", "Failed"), timeout=120)["status"] == "Completed"
    job = cli.wait(spot, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "preemption"),
        ("Succeeded", None),
    ]
    first = job["attempts"][0]
    assert f"for job {urgent}" in first["error"]["message"]
    # The urgent job ran only once the spot job had saved and given its slots back.
    assert cli.show(urgent)["started_at"] >= first["ended_at"]
    text = log.read_text()
    saved = int(re.search(r"preempted at step (\d+); checkpoint saved", text).group(1))  # type: ignore[union-attr]
    resumed = int(re.search(r"resumed from checkpoint at step (\d+)", text).group(1))  # type: ignore[union-attr]
    assert resumed == saved  # 0 steps lost
    expected = _weights(baseline)
    for key, tensor in _weights(job).items():
        assert torch.equal(tensor, expected[key]), key


@LOCAL_AND_SERVER
def test_waiting_jobs_get_a_start_from_the_time_limit_ahead_or_unknown(cli: Cli) -> None:
    """Behind a job with limits.timeout 60, the next job should start about 60 s after
    it did; behind that one (which has no limit), the time is unknown: never invented."""
    tiny = ("--type", "local", "--name", "tiny", "--cpus", "1", "--gpus", "none")
    cli.run("compute", "create", *tiny, check=True)
    limited = cli.create(cli.write("limited.yml", "command: sleep 300\ncompute: tiny\n"
                                   "limits: {timeout: 60}\n"))  # fmt: skip
    running = cli.wait(limited, ("Running",))
    unlimited = cli.create(cli.write("unlimited.yml", "command: sleep 300\ncompute: tiny\n"))
    last = cli.create(cli.write("last.yml", "command: sleep 300\ncompute: tiny\n"))
    stream = cli.popen("job", "stream", unlimited)
    try:
        deadline = time.monotonic() + 60
        while not all("start" in (cli.show(n)["queue"] or {}) for n in (unlimited, last)):
            assert time.monotonic() < deadline, "the scheduler gave no estimate"
            time.sleep(0.2)
        began = datetime.fromisoformat(running["started_at"]).timestamp()
        start = cli.show(unlimited)["queue"]["start"]
        assert abs(start - (began + 60)) <= 5, (start, began)
        assert cli.show(last)["queue"]["start"] is None
        # The queue's answer (the API's, through a server) and its table at 80 columns.
        view = json.loads(cli.run("queue", "--compute", "tiny", "--json", check=True).stdout)[0]
        shown = [(q["job"], q["start"]) for q in view["queued"]]
        assert shown == [(unlimited, start), (last, None)]
        cli.env["COLUMNS"] = "80"
        text = cli.run("queue", "--compute", "tiny", check=True).stdout
        lines = text.splitlines()
        assert max(map(len, lines)) <= 80, text
        header = next(line for line in lines if line.strip().startswith("#")).split()
        assert header[-1] == "START", text
        first_row = next(line for line in lines if unlimited in line).split()
        assert re.fullmatch(r"in \d+[sm]", " ".join(first_row[-2:])), first_row
        assert next(line for line in lines if last in line).split()[-1] == "-"
        # job stream's waiting line says it too (it looks every 0.2 s).
        cli.run("job", "cancel", unlimited, check=True)
        out, _ = stream.communicate(timeout=60)
        waited = [ln for ln in out.splitlines() if ln.startswith("  #1 in the queue of tiny")]
        assert waited and re.search(r" · starts about \d\d:\d\d:\d\d \(in \d+[sm]\)$", waited[0]), (
            out
        )
    finally:
        stream.kill()
        cli.env.pop("COLUMNS", None)
        for name in (last, unlimited, limited):
            cli.run("job", "cancel", name, timeout=60)


# A job that asks for 2 CPU slots and holds them until the file named after it exists.
WHOLE_MACHINE = """
command: >-
  python -c "import os, time, pathlib;
  gate = pathlib.Path(os.environ['RELEASE_DIR'], os.environ['PHALANX_JOB_NAME']);
  [time.sleep(0.1) for _ in range(3000) if not gate.exists()]"
environment_variables: {{RELEASE_DIR: "{gates}"}}
resources: {{cpus_per_instance: 2}}
"""


def test_two_local_targets_draw_cpu_slots_from_one_machine(cli: Cli) -> None:
    """`team` beside `local` on a machine of 2 CPU slots: a job of each needs all 2; the
    second waits, saying which job of which target holds them (job show, the queue, job
    stream), and starts only after the first ended, before a 1-slot job queued on
    `local` after it (which would otherwise take the slot at once, and the next one, for
    good: `local`'s queue is looked at first). A target asking for more slots than the
    machine has is refused at create, and so is a `local` (the machine's size) smaller
    than a target's share."""
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "none",
            "--cpus", "2", check=True)  # fmt: skip
    big = cli.run("compute", "create", "--type", "local", "--name", "big", "--gpus", "none",
                  "--cpus", "3")  # fmt: skip
    assert big.returncode == 2 and len(big.stderr.strip().splitlines()) == 1, big.stderr
    assert "--cpus 3: this machine has 2 CPU slots" in big.stderr, big.stderr
    cli.run("compute", "create", "--type", "local", "--name", "team", "--gpus", "none",
            "--cpus", "2", check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    gates.mkdir()
    spec = cli.write("whole.yml", WHOLE_MACHINE.format(gates=gates))
    first = cli.create(spec)
    cli.wait(first, ("Running",))
    second = cli.create(spec, "compute=team")
    cli.env["COLUMNS"] = "200"  # the stream's waiting line whole
    stream = cli.popen("job", "stream", second)
    try:
        deadline = time.monotonic() + 30
        while not (cli.show(second).get("queue") or {}).get("reason"):
            assert time.monotonic() < deadline, "the scheduler never explained the wait"
            time.sleep(0.2)
        reason = cli.show(second)["queue"]["reason"]
        assert reason == (
            f"needs 2 CPUs on 1 node; 0 of this machine's 2 CPU slots free, 2 held by job "
            f"{first} on compute 'local'"
        )
        view = json.loads(cli.run("queue", "--compute", "team", "--json",
                                  check=True).stdout)[0]  # fmt: skip
        assert [(q["job"], q["reason"]) for q in view["queued"]] == [(second, reason)]
        third = cli.create(spec, "resources.cpus_per_instance=1")
        (gates / first).touch()
        cli.wait(second, ("Running",))
        waits = cli.show(third)
        assert waits["status"] == "Queued", waits
        (gates / second).touch()
        (gates / third).touch()
        out, _ = stream.communicate(timeout=90)
    finally:
        stream.kill()
    assert f"  #1 in the queue of team: {reason}" in out, out
    ran = [cli.wait(name, ("Completed", "Failed")) for name in (first, second, third)]
    assert [job["status"] for job in ran] == ["Completed"] * 3
    [before], [after], [last] = (job["attempts"] for job in ran)
    assert after["started_at"] >= before["ended_at"], (before, after)
    assert last["started_at"] >= after["ended_at"], (after, last)
    # `local`'s settings are the machine's: it may not shrink below a share given.
    cli.run("compute", "delete", "local", check=True)
    shrink = cli.run("compute", "create", "--type", "local", "--name", "local", "--cpus", "1")
    assert shrink.returncode == 2 and len(shrink.stderr.strip().splitlines()) == 1
    assert "--cpus 1: compute 'team' may hold 2" in shrink.stderr, shrink.stderr


# Says what its creator's shell gave it, then holds its one GPU until its gate exists.
MINE_AND_HOLD = """
command: >-
  echo "MINE=$MINE"; while [ ! -e "$RELEASE_DIR/$PHALANX_JOB_NAME" ]; do sleep 0.1; done
environment_variables: {{RELEASE_DIR: "{gates}"}}
resources: {{gpus_per_instance: 1}}
"""


def _processes_naming(name: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if name in (proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def test_a_queued_job_costs_no_process_and_runs_in_its_creators_environment(cli: Cli) -> None:
    """Its supervisor starts when its turn comes, in the environment of the command that
    made it, not that of the command that started the scheduler."""
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0",
            check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    gates.mkdir()
    spec = cli.write("mine.yml", MINE_AND_HOLD.format(gates=gates))
    names = []
    for mine in ("first", "second", "third"):
        cli.env["MINE"] = mine  # the first command starts the scheduler, with "first"
        names.append(cli.create(spec))
    _wait_status(cli, names[0], ("Running",))
    time.sleep(1.0)  # the scheduler looked at the queue again
    assert [_status(cli, n) for n in names[1:]] == ["Queued", "Queued"]
    assert _processes_naming(names[1]) == [] and _processes_naming(names[2]) == []
    for name in names:
        (gates / name).touch()
    for name, mine in zip(names, ("first", "second", "third"), strict=True):
        assert cli.wait(name, ("Completed", "Failed"))["status"] == "Completed"
        log = cli.home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
        assert log.read_text().splitlines()[0] == f"MINE={mine}"


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_a_server_bounds_the_jobs_one_user_has_waiting(cli: Cli) -> None:
    import httpx

    import servers

    assert cli.server is not None
    servers.kill_phalanx_server(cli.server)
    cli.server_args = (*cli.server_args, "--max-queued-per-user", "2")
    cli.server = servers.start_phalanx_server(
        cli.home, cli.env, *cli.server_args, port=cli.server.port
    )
    cli.run("compute", "create", "--type", "local", "--name", "local", "--gpus", "0",
            check=True)  # fmt: skip
    gates = cli.home.parent / "gates"
    spec = _hold_spec(cli, gates)
    names = [cli.create(spec)]
    _wait_status(cli, names[0], ("Running",))  # running: not waiting
    names += [cli.create(spec), cli.create(spec)]
    refused = cli.run("job", "create", "-f", str(spec))
    line = (
        "job create: this caller has 2 job(s) queued, the most this server takes from one "
        "user (--max-queued-per-user 2); wait for some to start, or cancel some"
    )
    assert refused.returncode == 2 and refused.stderr.strip() == f"error: {line}", refused.stderr
    answer = httpx.post(f"{cli.server.url}/api/v1/jobs", json={"spec": spec.read_text()},
                        timeout=60)  # fmt: skip
    assert answer.status_code == 429 and answer.json() == {"error": line}, answer.text
    cli.run("job", "cancel", names[2], check=True)
    names.append(cli.create(spec))  # room again
    for name in names:
        (gates / name).touch()
    for name in names[:2] + names[3:]:
        assert cli.wait(name, ("Completed", "Failed"))["status"] == "Completed"
