"""MLflow as Azure ML users use it: jobs log with ``mlflow`` and no set-up, the plain
MLflow client reads runs back from a phalanx server with a token, a notebook makes runs
of its own. Real jobs, a real server, the real ``mlflow`` client in subprocesses."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

import servers
from conftest import PHALANX, Cli
from phalanx.launch.ports import free_port
from phalanx.tracking.runfiles import metric_history

# The server answers in seconds beside the other suites on 2 cores, past httpx's 5 s.
_get = functools.partial(httpx.get, timeout=60)
_post = functools.partial(httpx.post, timeout=60)

pytestmark = pytest.mark.slow

STEPS = 60

TRAIN = f"""
import os, time, mlflow
from phalanx.train import log_metric
rank = int(os.environ["RANK"])
mlflow.log_params({{"lr": 0.1 if rank == 0 else 99, "batch": 32}})
mlflow.set_tag("team", "vision")
for step in range({STEPS}):
    mlflow.log_metric("loss", 1 / (step + 1), step=step)
    mlflow.log_metric("only_rank", rank, step=step)
    log_metric("phx_loss", 2 / (step + 1), step)  # phalanx's own door, the same store
with open(f"weights_{{rank}}.txt", "w") as f:
    f.write(f"weights of rank {{rank}}")
mlflow.log_artifact(f"weights_{{rank}}.txt", artifact_path="model")
"""

READ = """
import json, os, sys, mlflow
from mlflow import MlflowClient
name, dest = sys.argv[1], sys.argv[2]
client = MlflowClient()
frame = mlflow.search_runs(experiment_names=["mlflow-e2e"],
                           filter_string="params.lr = '0.1' and metrics.loss < 0.05")
run = client.get_run(name)
history = client.get_metric_history(name, "loss")
listed = [f.path for f in client.list_artifacts(name, "model")]
local = mlflow.artifacts.download_artifacts(run_id=name, artifact_path="model", dst_path=dest)
print(json.dumps({
    "found": frame["run_id"].tolist(), "status": frame["status"].tolist(),
    "params": run.data.params, "tags": run.data.tags, "metrics": run.data.metrics,
    "history": [[m.step, m.value] for m in history], "listed": listed,
    "downloaded": sorted(os.listdir(local)), "user": run.info.user_id,
    "experiment": client.get_experiment(run.info.experiment_id).name,
}))
"""

TAG = """
import sys
from mlflow import MlflowClient
MlflowClient().set_tag(sys.argv[1], "reviewed", sys.argv[2])
"""

DELETE = """
import json, sys, mlflow
from mlflow import MlflowClient
from mlflow.entities import ViewType

name, client = sys.argv[1], MlflowClient()
def found(view):
    runs = client.search_runs(["0", client.get_run(name).info.experiment_id], run_view_type=view)
    return [r.info.run_id for r in runs]
client.delete_run(name)
seen = {"active": found(ViewType.ACTIVE_ONLY), "all": found(ViewType.ALL)}
client.restore_run(name)
print(json.dumps({**seen, "restored": found(ViewType.ACTIVE_ONLY)}))
"""

NOTEBOOK = """
import json, sys, mlflow
mlflow.set_experiment("notebook")
with mlflow.start_run(run_name="from a notebook") as run:
    mlflow.log_param("alpha", 0.5)
    for i in range(5):
        mlflow.log_metric("score", i / 10, step=i)
    mlflow.log_artifact(sys.argv[1])
print(json.dumps({"run": run.info.run_id}))
"""


def _mlflow(
    script: str, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The real MLflow client in a process of its own, as a notebook or a tool runs it."""
    clean = {k: v for k, v in env.items() if not k.startswith(("MLFLOW_", "PHALANX_"))}
    clean.update(
        MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",  # a refusal is the answer, not a reason to wait
        MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT="true",
    )
    return subprocess.run([sys.executable, "-c", script, *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _tokens(cli: Cli, **roles: str) -> dict[str, str]:
    made = {}
    for user, role in roles.items():
        proc = cli.run("server", "token", "create", "--user", user, "--role", role, check=True)
        made[user] = proc.stdout.strip()
    return made


@pytest.fixture
def team(cli: Cli) -> Iterator[tuple[servers.PhalanxServer, dict[str, str]]]:
    """A server asking for tokens, alice and bob members, carol a viewer; the CLI is
    alice's."""
    tokens = _tokens(cli, alice="member", bob="member", carol="viewer")
    server = servers.start_phalanx_server(cli.home, cli.env, "--auth")
    cli.env.update(PHALANX_SERVER=server.url, PHALANX_TOKEN=tokens["alice"],
                   PHALANX_HOME=str(cli.home.parent / "laptop"))  # fmt: skip
    yield server, tokens
    servers.kill_phalanx_server(server)


@pytest.mark.parametrize("where", ["local", "server"])
def test_a_two_node_job_logs_with_mlflow_and_the_client_reads_it_back(
    cli: Cli, where: str, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        tokens: dict[str, str] = {}
        if where == "server":  # alice submits through a server asking for tokens
            tokens = _tokens(cli, alice="member", bob="member", carol="viewer")
            server = servers.start_phalanx_server(cli.home, cli.env, "--auth")
            stack.callback(servers.kill_phalanx_server, server)
            cli.env.update(PHALANX_SERVER=server.url, PHALANX_TOKEN=tokens["alice"],
                           PHALANX_HOME=str(cli.home.parent / "laptop"))  # fmt: skip
            reader = {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_TRACKING_TOKEN": tokens["alice"]}
        else:  # this machine's workspace, read through `phalanx studio`
            reader = {"MLFLOW_TRACKING_URI": _studio(cli, stack)}
        _two_node_job_read_back(cli, reader, tmp_path, "alice" if tokens else "local")
        if tokens:
            _refusals(cli, server, tokens)


def _studio(cli: Cli, stack: contextlib.ExitStack) -> str:
    port = free_port()
    proc = subprocess.Popen([PHALANX, "studio", "--port", str(port)], env=cli.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    stack.callback(lambda: (os.killpg(proc.pid, signal.SIGKILL), proc.wait(10)))
    servers._wait_port(port, proc, "phalanx studio")  # type: ignore[arg-type]
    return f"http://127.0.0.1:{port}"


def _two_node_job_read_back(cli: Cli, reader: dict[str, str], tmp_path: Path, user: str) -> None:
    cli.write("src/train.py", TRAIN)
    spec = cli.write(
        "job.yml",
        """
        command: python train.py
        code: src
        experiment_name: mlflow-e2e
        display_name: resnet-e2e
        resources: {instance_count: 2}
        distribution: {type: pytorch, process_count_per_instance: 1}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job

    # The plain client, pointed at the workspace (with alice's token through a server).
    proc = _mlflow(READ, reader, name, str(tmp_path / "download"))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["found"] == [name] and got["status"] == ["FINISHED"]
    assert got["experiment"] == "mlflow-e2e" and got["user"] == user
    # Rank 0's calls are the run's: rank 1's lr=99 and only_rank=1 were not kept.
    assert got["params"] == {"lr": "0.1", "batch": "32"}
    assert got["metrics"]["only_rank"] == 0.0
    assert got["tags"]["team"] == "vision" and got["tags"]["mlflow.runName"] == "resnet-e2e"
    assert got["history"] == [[s, 1 / (s + 1)] for s in range(STEPS)]
    assert got["listed"] == ["model/weights_0.txt"] and got["downloaded"] == ["weights_0.txt"]

    # One store: phalanx's own commands see MLflow's points beside log_metric's.
    history = json.loads(cli.run("job", "metrics", name, "--json", check=True).stdout)
    assert len(history["loss"]) == STEPS and len(history["phx_loss"]) == STEPS
    shown = cli.run("job", "show", name, check=True).stdout
    assert "lr=0.1" in shown and "team=vision" in shown
    assert cli.show(name)["params"] == {"lr": "0.1", "batch": "32"}


def _refusals(cli: Cli, server: servers.PhalanxServer, tokens: dict[str, str]) -> None:
    name = json.loads(cli.run("job", "list", "--json", check=True).stdout)[0]["name"]
    as_alice = {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_TRACKING_TOKEN": tokens["alice"]}
    # A wrong token reads nothing, through the client or the raw API.
    proc = _mlflow(READ, {**as_alice, "MLFLOW_TRACKING_TOKEN": "phx_wrong"}, name, "/tmp/x")
    assert proc.returncode != 0 and "UNAUTHENTICATED: a valid API token" in proc.stderr
    assert "vision" not in proc.stdout + proc.stderr and "0.1" not in proc.stdout
    for headers in ({}, {"Authorization": "Bearer phx_wrong"}):
        answer = _post(f"{server.url}/api/2.0/mlflow/runs/search",
                            json={"experiment_ids": ["0"]}, headers=headers)  # fmt: skip
        assert answer.status_code == 401 and name not in answer.text

    # Tags after the end: the owner may; a viewer and another member may not.
    for who in ("carol", "bob"):
        proc = _mlflow(TAG, {**as_alice, "MLFLOW_TRACKING_TOKEN": tokens[who]}, name, who)
        assert proc.returncode != 0 and "PERMISSION_DENIED" in proc.stderr, proc.stderr
    proc = _mlflow(TAG, as_alice, name, "alice")
    assert proc.returncode == 0, proc.stderr
    assert cli.show(name)["run_tags"]["reviewed"] == "alice"

    # MLflow's soft delete: gone from searches, kept, restorable; the job stays a job.
    proc = _mlflow(DELETE, as_alice, name)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"active": [], "all": [name], "restored": [name]}
    assert cli.show(name)["status"] == "Completed"


def test_a_notebook_makes_a_run_of_its_own_and_only_its_maker_logs_to_it(
    cli: Cli, team: tuple[servers.PhalanxServer, dict[str, str]], tmp_path: Path
) -> None:
    server, tokens = team
    artifact = tmp_path / "confusion.csv"
    artifact.write_text("a,b\n1,2\n")
    as_bob = {"MLFLOW_TRACKING_URI": server.url, "MLFLOW_TRACKING_TOKEN": tokens["bob"]}
    proc = _mlflow(NOTEBOOK, as_bob, str(artifact))
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)["run"]

    # It is a job of the workspace, bob's, ended by the client, made by nothing that runs.
    job = cli.show(run)
    assert job["status"] == "Completed" and job["created_by"] == "bob"
    assert job["experiment_name"] == "notebook" and job["display_name"] == "from a notebook"
    assert job["params"] == {"alpha": "0.5"} and not job["attempts"]
    shown = cli.run("job", "show", run, check=True).stdout
    assert "an MLflow run logged from outside a job" in shown
    listed = cli.run("job", "list", check=True).stdout
    assert run in listed
    files = _get(f"{server.url}/api/v1/jobs/{run}/files/outputs/confusion.csv",
                      params={"raw": "true"},
                      headers={"Authorization": f"Bearer {tokens['alice']}"})  # fmt: skip
    assert files.status_code == 200 and files.text == "a,b\n1,2\n"

    # alice (a member, not its maker) may read it, never write to it.
    as_alice = {**as_bob, "MLFLOW_TRACKING_TOKEN": tokens["alice"]}
    write = f"from mlflow import MlflowClient; MlflowClient().log_metric({run!r}, 'score', 9)"
    proc = _mlflow(write, as_alice)
    assert proc.returncode != 0 and "PERMISSION_DENIED" in proc.stderr
    read = f"from mlflow import MlflowClient; print(MlflowClient().get_run({run!r}).data.metrics)"
    proc = _mlflow(read, as_alice)
    assert proc.returncode == 0 and "'score': 0.4" in proc.stdout, proc.stderr
    # A viewer makes no run.
    notebook = _mlflow(NOTEBOOK, {**as_bob, "MLFLOW_TRACKING_TOKEN": tokens["carol"]},
                       str(artifact))  # fmt: skip
    assert notebook.returncode != 0 and "PERMISSION_DENIED" in notebook.stderr
    jobs = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    assert [j["name"] for j in jobs] == [run]


KEEP_LOGGING = """
import os, time, mlflow
for step in range({steps}):
    mlflow.log_metric("loss", step, step=step)
    time.sleep(0.02)
"""


def test_an_endpoint_killed_mid_job_loses_no_point_and_fails_nothing(cli: Cli) -> None:
    steps = 300
    cli.write("src/train.py", KEEP_LOGGING.format(steps=steps))
    spec = cli.write("job.yml", "command: python train.py\ncode: src\n")
    name = cli.create(spec)
    job = cli.wait(name, ("Running", "Completed", "Failed"), timeout=120)
    job_dir = Path(job["job_dir"])
    metrics = job_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not metrics.exists() or len(metrics.read_text().splitlines()) < 30:
        assert time.monotonic() < deadline, "no point reached the job's metrics"
        time.sleep(0.05)
    endpoint = _endpoint_of(job_dir)
    endpoint.send_signal(signal.SIGKILL)
    assert len(metrics.read_text().splitlines()) < steps, "the job ended before the kill"

    job = cli.wait(name, ("Completed", "Failed"), timeout=180)
    assert job["status"] == "Completed", job
    # Every point is there; a batch the client sent again (the endpoint died after writing
    # it, before answering) is there twice in the file, and once in every reader's view.
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert {(x["step"], x["value"]) for x in lines} == {(s, s) for s in range(steps)}
    history = json.loads(cli.run("job", "metrics", name, "--json", check=True).stdout)
    assert [(p["step"], p["value"]) for p in history["loss"]] == [(s, s) for s in range(steps)]
    assert [(m.step, m.value) for m in metric_history(job_dir, "loss")] == [
        (s, s) for s in range(steps)
    ]
    log = (job_dir / "user_logs" / "std_log_process_0.txt").read_text()
    assert "Traceback" not in log


def test_points_still_queued_when_the_script_ends_are_sent(cli: Cli) -> None:
    # No end_run(), as most scripts: MLflow's own exit handler comes too late for its
    # async queue; phalanx's worker hook sends what is left first.
    cli.write("src/burst.py", "import mlflow\nfor s in range(2000):\n"
              "    mlflow.log_metric('burst', s, step=s)\n")  # fmt: skip
    name = cli.create(cli.write("job.yml", "command: python burst.py\ncode: src\n"))
    job = cli.wait(name, ("Completed", "Failed"), timeout=120)
    assert job["status"] == "Completed", job
    history = json.loads(cli.run("job", "metrics", name, "--json", check=True).stdout)
    assert [p["step"] for p in history["burst"]] == list(range(2000))
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt").read_text()
    assert "ERROR" not in log, log


def _endpoint_of(job_dir: Path) -> psutil.Process:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if "phalanx.tracking.sidecar" in " ".join(proc.info["cmdline"] or ()) and (
                    proc.environ().get("PHALANX_JOB_DIR") == str(job_dir)
                ):
                    return proc
            except psutil.Error:
                continue
        time.sleep(0.1)
    raise AssertionError(f"no MLflow endpoint runs for {job_dir}")


def test_the_sdk_gives_the_tracking_uri_the_way_azure_ml_does(
    cli: Cli, team: tuple[servers.PhalanxServer, dict[str, str]]
) -> None:
    server, tokens = team
    script = (
        "import os; from phalanx.ml import MLClient; "
        "ws = MLClient().workspaces.get('any'); "
        "print(ws.mlflow_tracking_uri, os.environ.get('MLFLOW_TRACKING_TOKEN'))"
    )

    def uri_and_token(env: dict[str, str]) -> list[str]:
        env = {k: v for k, v in env.items() if not k.startswith("MLFLOW_")}
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    # Through a server: its URL, and the client's token brought along for MLflow.
    assert uri_and_token(cli.env) == [server.url, tokens["alice"]]
    # This machine's workspace: where `phalanx studio` serves it.
    local = {k: v for k, v in cli.env.items() if k not in ("PHALANX_SERVER", "PHALANX_TOKEN")}
    assert uri_and_token(local) == ["http://127.0.0.1:8766", "None"]


def test_bad_calls_are_refused_with_a_clear_4xx_and_nothing_kept(
    cli: Cli, team: tuple[servers.PhalanxServer, dict[str, str]]
) -> None:
    # Each once answered a bare 500, which the MLflow client retries for minutes.
    server, tokens = team
    bob = {"Authorization": f"Bearer {tokens['bob']}", "content-type": "application/json"}
    api = f"{server.url}/api/2.0/mlflow"
    made = _post(f"{api}/runs/create", json={"experiment_id": "0"}, headers=bob)
    assert made.status_code == 200, made.text
    run = made.json()["run"]["info"]["run_id"]
    search = {"experiment_ids": ["0"]}
    refused = [
        ("runs/search", {**search, "filter": "metrics.loss <"}),
        ("runs/search", {**search, "filter": "nonsense"}),
        ("runs/search", {**search, "order_by": ["nonsense.x DESC"]}),
        ("runs/search", {**search, "filter": 7}),
        ("runs/search", {**search, "page_token": "²"}),
        ("experiments/search", {"filter": "name <<< 'x'"}),
        ("runs/log-metric", {"run_id": run, "key": "k", "value": 10**400, "timestamp": 1}),
        ("runs/log-metric", {"run_id": run, "key": "k", "value": 1, "timestamp": 10**400}),
        ("runs/log-metric", {"run_id": run, "key": "k", "value": 1, "step": 2**70}),
    ]
    for route, body in refused:
        answer = _post(f"{api}/{route}", content=json.dumps(body), headers=bob)
        assert answer.status_code == 400, (route, body, answer.text)
        assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE", answer.text
    unreadable = [
        ("runs/search", '{"experiment_ids": ["0"], "max_results": Infinity}'),
        ("runs/search", "[" * 100_000),
    ]
    for route, text in unreadable:
        answer = _post(f"{api}/{route}", content=text, headers=bob)
        assert answer.status_code == 400, (route, text[:40], answer.text)
        assert answer.json()["error_code"] in ("INVALID_PARAMETER_VALUE", "MALFORMED_REQUEST")
    got = _get(f"{api}/runs/get", params={"run_id": run}, headers=bob).json()
    assert got["run"]["data"]["metrics"] == [], got

    # An artifact over a file's path, or onto a folder: refused, what is there kept.
    files = f"{server.url}/api/2.0/mlflow-artifacts/artifacts/jobs/{run}"
    put = {"Authorization": bob["Authorization"]}
    for path in ("a.txt", "dir/b.txt"):
        assert httpx.put(f"{files}/{path}", content=b"kept", headers=put).status_code == 200
    for path in ("a.txt/c.txt", "dir"):
        answer = httpx.put(f"{files}/{path}", content=b"new", headers=put)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    for path in ("a.txt", "dir/b.txt"):
        assert _get(f"{files}/{path}", headers=put).content == b"kept"


WILD_LINES = """
import os
big = "1" + "0" * 400  # a whole number no float holds
wild = [
    '{"name": "nan_time", "value": 1, "step": 0, "time": NaN}',
    '{"name": "inf_time", "value": 1, "step": 0, "time": 1e999}',
    '{"name": "far_time", "value": 1, "step": 0, "time": 1e306}',
    '{"name": "long_time", "value": 1, "step": 0, "time": ' + big + '}',
    '{"name": "long_value", "value": ' + big + ', "step": 0, "time": 1}',
    '{"name": "long_step", "value": 1, "step": ' + big + ', "time": 1}',
    '{"name": "fine", "value": 0.5, "step": 3, "time": 1}',
]
with open(os.path.join(os.environ["PHALANX_JOB_DIR"], "metrics.jsonl"), "a") as f:
    f.write("".join(line + "\\n" for line in wild))
"""


def test_a_jobs_wild_metrics_lines_break_no_reader_of_its_run(
    cli: Cli, team: tuple[servers.PhalanxServer, dict[str, str]]
) -> None:
    # The file is the job's own to write: what it holds must not turn every search of
    # its experiment into a 500 for everyone.
    server, tokens = team
    cli.write("src/wild.py", WILD_LINES)
    spec = cli.write("job.yml", "command: python wild.py\ncode: src\nexperiment_name: wild\n")
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=120)
    assert job["status"] == "Completed", job

    carol = {"Authorization": f"Bearer {tokens['carol']}"}  # a viewer reads every run
    api = f"{server.url}/api/2.0/mlflow"
    experiment = _get(f"{api}/experiments/get-by-name", params={"experiment_name": "wild"},
                           headers=carol).json()["experiment"]["experiment_id"]  # fmt: skip
    for body in ({}, {"filter": "metrics.fine > 0.1", "order_by": ["metrics.fine DESC"]}):
        found = _post(f"{api}/runs/search", json={"experiment_ids": [experiment], **body},
                           headers=carol)  # fmt: skip
        assert found.status_code == 200, found.text
        assert [r["info"]["run_id"] for r in found.json()["runs"]] == [name]
    got = _get(f"{api}/runs/get", params={"run_id": name}, headers=carol)
    assert got.status_code == 200, got.text
    metrics = {m["key"]: m for m in got.json()["run"]["data"]["metrics"]}
    assert metrics["fine"]["value"] == 0.5 and metrics["fine"]["step"] == 3
    assert "long_step" not in metrics  # no int64 step: no reader could take it
    for key in ("nan_time", "inf_time", "far_time", "long_time", "long_value"):
        history = _get(f"{api}/metrics/get-history", params={"run_id": name,
                            "metric_key": key}, headers=carol)  # fmt: skip
        assert history.status_code == 200, (key, history.text)
        assert all(abs(m["timestamp"]) < 2**63 for m in history.json()["metrics"])
    assert cli.run("job", "metrics", name, "--json").returncode == 0
    assert cli.run("job", "show", name).returncode == 0


def test_no_compute_target_takes_the_name_that_marks_notebook_runs(cli: Cli) -> None:
    # Jobs on a target named "mlflow" would be taken for runs made outside any job, which
    # their owners write from outside (artifacts into the running job's outputs).
    proc = cli.run("compute", "create", "--name", "mlflow", "--type", "local", "--gpus", "none")
    assert proc.returncode == 2 and "reserved" in proc.stderr, proc.stdout + proc.stderr
    assert "mlflow" not in cli.run("compute", "list", check=True).stdout


def test_a_spec_naming_its_own_mlflow_server_gets_no_run_id_or_secret_of_phalanx(
    cli: Cli,
) -> None:
    # The client would resume run <job name> on that server (which never had it) and
    # send it the node's endpoint secret as its bearer token.
    cli.write("src/env.py", "import json, os\nprint('ENV', json.dumps({k: v for k, v in "
              "os.environ.items() if k.startswith('MLFLOW_')}))\n")  # fmt: skip
    spec = cli.write(
        "job.yml",
        """
        command: python env.py
        code: src
        environment_variables: {MLFLOW_TRACKING_URI: "http://mlflow.example:5000"}
        """,
    )
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed"), timeout=120)
    assert job["status"] == "Completed", job
    log = (Path(job["job_dir"]) / "user_logs" / "std_log_process_0.txt").read_text()
    seen = json.loads(log.split("ENV ", 1)[1].splitlines()[0])
    assert seen["MLFLOW_TRACKING_URI"] == "http://mlflow.example:5000"
    assert not {"MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_TOKEN"} & set(seen)


def test_a_run_name_that_looks_like_markup_breaks_no_listing(
    cli: Cli, team: tuple[servers.PhalanxServer, dict[str, str]]
) -> None:
    # Every user lists every job: one member's run named "[/x]" made rich raise
    # MarkupError in `job list` and `job show` for the whole team.
    server, tokens = team
    name = "[/x] [red]not red"
    made = _post(f"{server.url}/api/2.0/mlflow/runs/create",
                      json={"experiment_id": "0", "run_name": name},
                      headers={"Authorization": f"Bearer {tokens['bob']}"})  # fmt: skip
    assert made.status_code == 200, made.text
    run = made.json()["run"]["info"]["run_id"]
    listed = cli.run("job", "list")
    assert listed.returncode == 0 and "[/x] [red]not red" in listed.stdout, listed.stderr
    shown = cli.run("job", "show", run)
    assert shown.returncode == 0 and name in shown.stdout, shown.stderr
