"""The MLflow tracking API over a job's folder: the route table, the one-run store a
job's ranks see, and the endpoint process with the real MLflow client (no job)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from phalanx.tracking.jobrun import JobRun, JobRunStore
from phalanx.tracking.protocol import TrackingError, dispatch, experiment_id
from phalanx.tracking.runfiles import read_run_data
from phalanx.tracking.sidecar import Endpoint
from phalanx.workspace.metrics import read_metrics

RUN = JobRun("brave_owl_1", "resnet", "resnet-50 run", "alice", 1_700_000_000_000)


def _store(tmp_path: Path, rank: int = 0) -> JobRunStore:
    return JobRunStore(tmp_path, RUN, attempt=2, rank=rank)


def _batch(store: JobRunStore, **body: object) -> dict[str, object]:
    return dispatch("POST", "runs/log-batch", {}, {"run_id": RUN.name, **body}, store)


def test_a_batch_lands_in_the_jobs_metrics_and_reads_back_as_mlflow_shows_it(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    _batch(
        store,
        metrics=[
            {"key": "loss", "value": 0.5, "timestamp": 1_700_000_001_000, "step": 1},
            {"key": "loss", "value": 0.25, "timestamp": 1_700_000_002_000, "step": 2},
            {"key": "grad_norm", "value": "NaN", "timestamp": 1_700_000_002_000, "step": 2},
        ],
        params=[{"key": "lr", "value": "0.1"}],
        tags=[{"key": "team", "value": "vision"}],
    )
    # The same file and shape phalanx.train.log_metric writes: job metrics reads it.
    history = read_metrics(tmp_path)
    assert history["loss"] == [(1, 0.5), (2, 0.25)]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {x["source"] for x in lines} == {"mlflow"} and {x["attempt"] for x in lines} == {2}
    assert read_run_data(tmp_path).params == {"lr": "0.1"}

    run = dispatch("GET", "runs/get", {"run_id": RUN.name}, {}, store)["run"]
    assert run["info"]["experiment_id"] == experiment_id("resnet")
    assert run["info"]["run_name"] == "resnet-50 run"
    metrics = {m["key"]: m for m in run["data"]["metrics"]}
    assert metrics["loss"]["value"] == 0.25 and metrics["loss"]["step"] == 2
    assert metrics["grad_norm"]["value"] == "NaN"  # protobuf JSON's spelling, kept
    assert {"key": "team", "value": "vision"} in run["data"]["tags"]
    got = dispatch(
        "GET", "metrics/get-history", {"run_id": RUN.name, "metric_key": "loss"}, {}, store
    )
    assert [(m["step"], m["value"]) for m in got["metrics"]] == [(1, 0.5), (2, 0.25)]


def test_only_rank_zero_is_kept_and_a_changed_param_is_refused(tmp_path: Path) -> None:
    _batch(_store(tmp_path, rank=3), metrics=[{"key": "loss", "value": 1, "step": 0}],
           params=[{"key": "lr", "value": "9"}])  # fmt: skip
    assert not (tmp_path / "metrics.jsonl").exists()
    assert read_run_data(tmp_path).params == {}

    store = _store(tmp_path)
    _batch(store, params=[{"key": "lr", "value": "0.1"}])
    _batch(store, params=[{"key": "lr", "value": "0.1"}])  # the same again: fine
    with pytest.raises(TrackingError, match="Changing param values is not allowed"):
        _batch(store, params=[{"key": "lr", "value": "0.2"}])
    assert read_run_data(tmp_path).params == {"lr": "0.1"}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"metrics": [{"key": "x", "value": 1}] * 1001}, "at most 1000 metrics"),
        ({"params": [{"key": "../up", "value": "1"}]}, "Invalid param key"),
        ({"params": [{"key": "big", "value": "x" * 6001}]}, "at most 6000"),
        ({"metrics": [{"key": "x", "value": "high"}]}, "invalid value 'high'"),
        ({"metrics": [{"key": "x", "value": 1, "step": "one"}]}, "invalid step 'one'"),
    ],
)
def test_bad_input_is_refused_with_mlflows_code_and_nothing_kept(
    tmp_path: Path, body: dict[str, object], words: str
) -> None:
    with pytest.raises(TrackingError, match=words) as caught:
        _batch(_store(tmp_path), **body)
    assert caught.value.code == "INVALID_PARAMETER_VALUE" and caught.value.status == 400
    assert not (tmp_path / "metrics.jsonl").exists()


def test_inside_a_job_only_its_run_exists(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(TrackingError, match="only its own run") as caught:
        dispatch("GET", "runs/get", {"run_id": "someone_else"}, {}, store)
    assert caught.value.status == 404
    with pytest.raises(TrackingError, match="log to it, or run a job per trial"):
        dispatch("POST", "runs/create", {}, {"experiment_id": experiment_id("resnet")}, store)
    # The client's RUNNING at start and FINISHED at exit change nothing.
    info = dispatch("POST", "runs/update", {}, {"run_id": RUN.name, "status": "FINISHED"},
                    store)["run_info"]  # fmt: skip
    assert info["status"] == "RUNNING"
    found = dispatch("POST", "runs/search", {}, {"experiment_ids": [experiment_id("resnet")],
                     "filter": "params.lr = '0.1'"}, store)  # fmt: skip
    assert found == {"runs": []}
    _batch(store, params=[{"key": "lr", "value": "0.1"}])
    found = dispatch("POST", "runs/search", {}, {"experiment_ids": [experiment_id("resnet")],
                     "filter": "params.lr = '0.1'"}, store)  # fmt: skip
    assert [r["info"]["run_id"] for r in found["runs"]] == [RUN.name]
    with pytest.raises(TrackingError) as caught:
        dispatch("POST", "no/such-call", {}, {}, store)
    assert caught.value.code == "ENDPOINT_NOT_FOUND"


_CLIENT = """
import math, sys, mlflow
from mlflow import MlflowClient
for step in range(300):
    mlflow.log_metric("loss", 1 / (step + 1), step=step)
mlflow.log_metric("diverged", math.inf, step=1)
mlflow.log_params({"lr": 0.1, "batch": 32})
mlflow.set_tag("phase", "warmup")
mlflow.log_artifact(sys.argv[1], artifact_path="notes")
mlflow.flush_async_logging()
client = MlflowClient()
run = client.get_run(mlflow.active_run().info.run_id)
print(len(client.get_metric_history(run.info.run_id, "loss")), run.data.params["batch"],
      run.data.metrics["diverged"], [f.path for f in client.list_artifacts(run.info.run_id,
      "notes")])
"""


def test_the_real_client_logs_through_the_endpoint_and_a_wrong_token_is_refused(
    tmp_path: Path,
) -> None:
    endpoint = Endpoint(tmp_path, RUN, 1).start()
    try:
        note = tmp_path / "note.txt"
        note.write_text("kept\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(endpoint.env())
        env["MLFLOW_TRACKING_URI"] = f"{endpoint.url}/ranks/0"  # as the rank's wrapper sets it
        proc = subprocess.run([sys.executable, "-c", _CLIENT, str(note)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["300", "32", "inf", "['notes/note.txt']"]
        assert (tmp_path / "outputs" / "notes" / "note.txt").read_text() == "kept\n"
        assert len(read_metrics(tmp_path)["loss"]) == 300
        # As log_metric keeps it: no number in the JSON, the text beside it.
        assert read_metrics(tmp_path)["diverged"] == [(1, None)]
        assert '"text": "inf"' in (tmp_path / "metrics.jsonl").read_text()

        for token in ("", "Bearer wrong", f"Bearer {endpoint.secret}x"):
            answer = httpx.post(
                f"{endpoint.url}/ranks/0/api/2.0/mlflow/runs/log-metric",
                json={"run_id": RUN.name, "key": "stolen", "value": 1},
                headers={"Authorization": token} if token else {},
            )
            assert answer.status_code == 401, answer.text
            assert endpoint.secret not in answer.text
        assert "stolen" not in read_metrics(tmp_path)
    finally:
        endpoint.stop()
    # Stopped, it wrote the TensorBoard events of what it kept (phalanx tensorboard's).
    events = list((tmp_path / "outputs" / "tensorboard" / "mlflow").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].read_bytes().count(b"loss") == 300


def test_an_endpoint_that_dies_is_started_again_on_its_port(tmp_path: Path) -> None:
    endpoint = Endpoint(tmp_path, RUN, 1).start()
    try:
        first = endpoint.pid
        assert first is not None
        assert not endpoint.ensure()  # alive: left be
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not endpoint.ensure():
            assert time.monotonic() < deadline, "the killed endpoint was not noticed"
            time.sleep(0.05)
        assert endpoint.pid != first and endpoint.restarts == 1
        deadline = time.monotonic() + 10
        while True:
            try:
                answer = httpx.get(f"{endpoint.url}/health", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the endpoint did not come back"
                time.sleep(0.05)
        assert answer.status_code == 200
    finally:
        endpoint.stop()
    assert endpoint.pid is not None and not _alive(endpoint.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text()


def test_a_garbled_length_gets_an_answer_and_leaves_no_traceback_in_the_jobs_log(
    tmp_path: Path,
) -> None:
    # Any process of the machine reaches 127.0.0.1: without the secret it must not be able
    # to write tracebacks into the node's log (the job's), nor crash a request thread.
    log = tmp_path / "node.log"
    endpoint = Endpoint(tmp_path, RUN, 1, log_path=log).start()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(f"{endpoint.url}/health", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the endpoint did not start"
                time.sleep(0.05)
        route = b"POST /ranks/0/api/2.0/mlflow/runs/log-batch HTTP/1.1\r\nHost: x\r\n"
        secret = f"Authorization: Bearer {endpoint.secret}\r\n".encode()
        for auth, status in ((b"", b"401"), (secret, b"400")):
            with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as sock:
                sock.sendall(route + auth + b"Content-Length: abc\r\n\r\n")
                answer = sock.recv(200)
            assert answer.startswith(b"HTTP/1.1 " + status), answer
    finally:
        endpoint.stop()
    assert "Traceback" not in log.read_text() and "ValueError" not in log.read_text()
    assert not (tmp_path / "metrics.jsonl").exists()


def test_what_a_job_writes_past_mlflows_limits_into_its_run_file_is_not_shown(
    tmp_path: Path,
) -> None:
    # The run file is the job's own to write: a search or `job show` of its run must not
    # carry megabytes of it to every reader.
    lines = [
        {"kind": "param", "key": "k" * 251, "value": "long key"},
        {"kind": "param", "key": "huge", "value": "v" * 6001},
        {"kind": "tag", "key": "huge", "value": "v" * 8001},
        {"kind": "param", "key": "lr", "value": "0.1"},
        *({"kind": "tag", "key": f"t{i}", "value": "x"} for i in range(1500)),
        {"kind": "tag", "key": "t0", "value": "changed"},  # a known key still changes
    ]
    (tmp_path / "mlflow_run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    run = dispatch("GET", "runs/get", {"run_id": RUN.name}, {}, _store(tmp_path))["run"]
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert params == {"lr": "0.1"}
    assert "huge" not in tags and tags["t0"] == "changed" and "t999" in tags
    assert "t1000" not in tags and len(tags) == 1000 + 2  # mlflow.runName, mlflow.user


def test_a_dataset_input_of_another_shape_is_refused_or_skipped(tmp_path: Path) -> None:
    # MLflow's client parses every run of a search strictly: one run holding an input of
    # another shape made the whole search fail for every reader of the experiment.
    store = _store(tmp_path)
    good = {"dataset": {"name": "tiny", "digest": "92a7ac9c"},
            "tags": [{"key": "mlflow.data.context", "value": "training"}]}  # fmt: skip
    for bad in ({**good, "tags": 5}, {**good, "dataset": {"name": "tiny", "digest": 5}},
                {"dataset": {"digest": "x"}}):  # fmt: skip
        with pytest.raises(TrackingError, match="datasets: each is") as caught:
            dispatch("POST", "runs/log-inputs", {}, {"run_id": RUN.name, "datasets": [bad]},
                     store)  # fmt: skip
        assert caught.value.status == 400
    assert not (tmp_path / "mlflow_run.jsonl").exists()
    dispatch("POST", "runs/log-inputs", {}, {"run_id": RUN.name, "datasets": [good]}, store)
    with open(tmp_path / "mlflow_run.jsonl", "a") as f:  # as the job itself may write
        f.write(json.dumps({"kind": "input", "dataset": {"name": "x"}, "tags": 5}) + "\n")
    run = dispatch("GET", "runs/get", {"run_id": RUN.name}, {}, store)["run"]
    assert run["inputs"]["dataset_inputs"] == [good]


def test_latest_metrics_follow_a_file_that_grows_and_one_replaced(tmp_path: Path) -> None:
    from phalanx.tracking.runfiles import latest_metrics

    store = _store(tmp_path)
    _batch(store, metrics=[{"key": "loss", "value": 0.5, "timestamp": 1, "step": 1}])
    assert latest_metrics(tmp_path)["loss"].value == 0.5
    assert latest_metrics(tmp_path)["loss"].value == 0.5  # kept, and the same
    _batch(store, metrics=[{"key": "loss", "value": 0.25, "timestamp": 2, "step": 2}])
    assert latest_metrics(tmp_path)["loss"].value == 0.25  # the file grew: read again
    metrics = tmp_path / "metrics.jsonl"
    replaced = tmp_path / "new.jsonl"
    replaced.write_text(json.dumps({"name": "acc", "value": 1, "step": 0, "rank": 0}) + "\n")
    os.replace(replaced, metrics)  # another inode
    assert set(latest_metrics(tmp_path)) == {"acc"}
