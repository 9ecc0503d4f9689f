"""Jobs reading datastore inputs and writing datastore outputs, against a real Azurite."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import LOCAL_AND_SERVER, Cli, blob_datastore
from servers import AZURITE_ACCOUNT, Azurite

# Each rank writes what it sees of the input: its value and every file's sha256.
READ_SCRIPT = """
import hashlib, json, os, sys
from pathlib import Path
value = os.environ["PHALANX_INPUT_DATA"]
seen = {"value": value, "files": {}}
if "://" in value:
    from phalanx.storage.uri import resolve
    from phalanx.workspace import Workspace
    loc = resolve(value, Workspace())
    for path in loc.fs.find(loc.path):
        rel = path[len(loc.path):].lstrip("/")
        seen["files"][rel] = hashlib.sha256(loc.fs.cat_file(path)).hexdigest()
else:
    root = Path(value)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            seen["files"][path.relative_to(root).as_posix()] = hashlib.sha256(
                path.read_bytes()).hexdigest()
out = Path(os.environ["PHALANX_OUTPUT_RESULT"])
(out / f"rank_{os.environ['RANK']}.json").write_text(json.dumps(seen))
"""

JOB = """
type: command
code: src
command: python read.py
inputs:
  data: {{type: uri_folder, path: "{path}", mode: {mode}}}
outputs:
  result: {{type: uri_folder{result}}}
resources: {{instance_count: 1}}
distribution: {{type: pytorch, process_count_per_instance: 2}}
limits: {{timeout: 120}}
"""

FILES = {
    "train/a.bin": b"alpha" * 100,
    "train/sub/b.bin": b"beta" * 1000,
    "val/c.bin": b"gamma",
}


def _setup(cli: Cli, azurite: Azurite) -> str:
    """A container with FILES and a datastore `blobs` on it; returns the container's name."""
    container = blob_datastore(cli, azurite, FILES)
    cli.write("src/read.py", READ_SCRIPT)
    return container


def _run(cli: Cli, path: str, mode: str, result: str = "") -> dict:
    spec = cli.write("job.yml", JOB.format(path=path, mode=mode, result=result))
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    log = (Path(job["job_dir"]) / "system_logs" / "supervisor.txt").read_text()
    assert job["status"] == "Completed", log
    job["supervisor_log"] = log
    return job


def _seen(job: dict, rank: int) -> dict:
    return json.loads((Path(job["outputs_dir"]) / "result" / f"rank_{rank}.json").read_text())


def _expected(prefix: str) -> dict[str, str]:
    return {
        k[len(prefix) :]: hashlib.sha256(v).hexdigest()
        for k, v in FILES.items()
        if k.startswith(prefix)
    }


@LOCAL_AND_SERVER
def test_download_input_every_rank_sees_the_files_and_a_second_job_skips_them(
    cli: Cli, azurite: Azurite
) -> None:
    _setup(cli, azurite)
    job = _run(cli, "azureml://datastores/blobs/paths/train", "download")
    # The copy in the node cache; a walled-off job (the server's) sees it read-only in its
    # own folder, the cache being the server's alone.
    where = Path(job["job_dir"]) / "inputs" if cli.server else cli.env["PHALANX_CACHE_DIR"]
    for rank in (0, 1):
        seen = _seen(job, rank)
        assert seen["files"] == _expected("train/")
        assert seen["value"].startswith(str(where))
    assert "2 file(s), 0 unchanged skipped" in job["supervisor_log"]
    again = _run(cli, "azureml://datastores/blobs/paths/train", "download")
    assert "0 file(s), 2 unchanged skipped" in again["supervisor_log"]
    assert _seen(again, 0)["files"] == _expected("train/")


def test_direct_input_passes_the_uri_and_the_script_reads_it(cli: Cli, azurite: Azurite) -> None:
    _setup(cli, azurite)
    uri = "azureml://datastores/blobs/paths/train"
    job = _run(cli, uri, "direct")
    seen = _seen(job, 1)
    assert seen["value"] == uri
    assert seen["files"] == _expected("train/")


@LOCAL_AND_SERVER
def test_data_asset_input(cli: Cli, azurite: Azurite) -> None:
    _setup(cli, azurite)
    cli.run("data", "create", "--name", "val", "--path",
            "azureml://datastores/blobs/paths/val", check=True)  # fmt: skip
    job = _run(cli, "azureml:val@latest", "download")
    assert _seen(job, 0)["files"] == _expected("val/")


def test_missing_input_fails_before_launch_naming_the_path(cli: Cli, azurite: Azurite) -> None:
    _setup(cli, azurite)
    spec = cli.write(
        "job.yml",
        JOB.format(path="azureml://datastores/blobs/paths/nope", mode="download", result=""),
    )
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2
    assert "inputs.data:" in proc.stderr and "/nope not found" in proc.stderr
    listed = json.loads(cli.run("job", "list", "--json", check=True).stdout)
    assert listed == []


def test_upload_output_reaches_the_datastore(cli: Cli, azurite: Azurite) -> None:
    container = _setup(cli, azurite)
    uri = "azureml://datastores/blobs/paths/runs/one"
    _run(cli, "azureml://datastores/blobs/paths/val", "download",
         result=f', path: "{uri}", mode: upload')  # fmt: skip
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    client = service.get_container_client(container)
    names = sorted(b.name for b in client.list_blobs(name_starts_with="runs/one/"))
    assert names == ["runs/one/rank_0.json", "runs/one/rank_1.json"]
    body = json.loads(client.download_blob("runs/one/rank_1.json").readall())
    assert body["files"] == _expected("val/")


def test_ro_mount_input_survives_a_retry_and_is_unmounted_at_the_end(
    cli: Cli, azurite: Azurite
) -> None:
    _setup(cli, azurite)
    # Attempt 1 reads the mount then fails; attempt 2 must find the mount still there.
    cli.write(
        "src/read_then_fail.py",
        "import os, runpy, sys\n"
        "runpy.run_path('read.py')\n"
        "if os.environ['PHALANX_ATTEMPT'] == '1':\n"
        "    sys.exit(7)\n",
    )
    text = JOB.format(path="azureml://datastores/blobs/paths/train", mode="ro_mount", result="")
    text = text.replace("python read.py", "python read_then_fail.py")
    text += "retry: {max_attempts: 2, retry_on_exit_codes: [7]}\n"
    name = cli.create(cli.write("job.yml", text))
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Completed", job
    assert len(job["attempts"]) == 2
    seen = _seen(job, 1)
    mountpoint = Path(job["job_dir"]) / "mounts" / "data"
    assert seen["value"] == str(mountpoint)
    assert seen["files"] == _expected("train/")
    assert not os.path.ismount(mountpoint)


def test_rw_mount_output_lands_on_the_datastore(cli: Cli, azurite: Azurite) -> None:
    container = _setup(cli, azurite)
    uri = "azureml://datastores/blobs/paths/runs/mounted"
    job = _run(cli, "azureml://datastores/blobs/paths/val", "download",
               result=f', path: "{uri}", mode: rw_mount')  # fmt: skip
    mountpoint = Path(job["job_dir"]) / "mounts" / "out_result"
    assert not os.path.ismount(mountpoint)
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite.connection_string)
    client = service.get_container_client(container)
    names = sorted(b.name for b in client.list_blobs(name_starts_with="runs/mounted/"))
    assert names == ["runs/mounted/rank_0.json", "runs/mounted/rank_1.json"]
    body = json.loads(client.download_blob("runs/mounted/rank_0.json").readall())
    assert body["files"] == _expected("val/")


def test_an_output_that_cannot_be_uploaded_fails_the_job(cli: Cli, azurite: Azurite) -> None:
    container = _setup(cli, azurite)
    cli.env["RO_SAS"] = azurite.sas(container, "rl")  # read and list, no write
    cli.run(
        "datastore", "create", "--name", "readonly", "--type", "azure_blob",
        "--account-name", AZURITE_ACCOUNT, "--container-name", container,
        "--endpoint", azurite.endpoint, "--auth", "sas_token", "--credential-env", "RO_SAS",
        check=True,
    )  # fmt: skip
    text = JOB.format(
        path="azureml://datastores/blobs/paths/val",
        mode="download",
        result=', path: "azureml://datastores/readonly/paths/out", mode: upload',
    )
    name = cli.create(cli.write("job.yml", text))
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Failed"
    assert [a["status"] for a in job["attempts"]] == ["Succeeded"]  # the ranks did their part
    message = job["error"]["message"]
    assert "outputs could not be saved" in message and "outputs.result" in message
    assert "access denied" in message and cli.env["RO_SAS"] not in message


def test_a_killed_supervisor_leaves_no_mount_behind(cli: Cli, azurite: Azurite) -> None:
    import signal
    import time

    import psutil

    _setup(cli, azurite)
    cli.write(
        "src/read_then_wait.py", "import runpy, time\nrunpy.run_path('read.py')\ntime.sleep(120)\n"
    )
    text = JOB.format(path="azureml://datastores/blobs/paths/train", mode="ro_mount", result="")
    name = cli.create(
        cli.write("job.yml", text.replace("python read.py", "python read_then_wait.py"))
    )
    job_dir = cli.home / "jobs" / name
    mountpoint = job_dir / "mounts" / "data"
    deadline = time.monotonic() + 60
    while not (job_dir / "outputs" / "result" / "rank_1.json").exists():
        assert time.monotonic() < deadline, cli.show(name)
        time.sleep(0.2)
    assert os.path.ismount(mountpoint)
    running = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "phalanx.jobs.supervisor" in (p.info["cmdline"] or []) and name in p.info["cmdline"]
    ]
    # The supervisor and its forked mount server carry the same command line.
    children = {c.pid for p in running for c in p.children()}
    supervisor = next(p for p in running if p.pid not in children)
    servers = [p for p in running if p.pid != supervisor.pid]
    assert servers, "the mount's server is a child of the supervisor"
    supervisor.send_signal(signal.SIGKILL)
    job = cli.wait(name, ("Failed",), timeout=60)  # `job show` notices the dead supervisor
    assert "supervisor process ended unexpectedly" in job["error"]["message"]
    assert not os.path.ismount(mountpoint)
    _, alive = psutil.wait_procs(servers, timeout=10)
    assert not alive, f"mount servers left running: {[p.pid for p in alive]}"


def test_a_cancel_stops_a_download_between_files(
    cli: Cli, azurite: Azurite, tmp_path: Path
) -> None:
    """In process (the supervisor's code path): a cancel noticed mid-download ends it."""
    from unittest import mock

    from phalanx.compute.inputs import make_ready
    from phalanx.errors import PreparationCanceled
    from phalanx.jobs.inputs import check_inputs
    from phalanx.spec import load_spec
    from phalanx.storage.cache import NodeCache
    from phalanx.workspace import Workspace

    _setup(cli, azurite)
    text = JOB.format(path="azureml://datastores/blobs/paths/train", mode="download", result="")
    spec = load_spec(cli.write("job.yml", text))
    answers = iter([False, True])  # not before the first input; yes once files are listed
    with mock.patch.dict(os.environ, cli.env, clear=True):
        ws = Workspace(cli.home)
        cache = NodeCache(tmp_path / "cache")
        try:
            try:
                make_ready(
                    spec.data_inputs(),
                    check_inputs(spec, ws),
                    tmp_path / "mounts",
                    cache,
                    canceled=lambda: next(answers),
                )
            except PreparationCanceled as exc:
                assert "inputs.data: canceled after 0 of 2 files" in str(exc)
            else:
                raise AssertionError("the download was not canceled")
        finally:
            ws.close()
    assert not list((cache.root / "downloads").rglob("*.bin"))


def test_an_output_on_the_default_datastore_is_written_in_place(cli: Cli, azurite: Azurite) -> None:
    _setup(cli, azurite)
    uri = "azureml://datastores/default/paths/results/run1"
    job = _run(cli, "azureml://datastores/blobs/paths/val", "download",
               result=f', path: "{uri}", mode: rw_mount')  # fmt: skip
    written = cli.home / "datastore" / "results" / "run1"
    assert sorted(p.name for p in written.iterdir()) == ["rank_0.json", "rank_1.json"]
    assert json.loads((written / "rank_0.json").read_text())["files"] == _expected("val/")
    assert not (Path(job["job_dir"]) / "mounts").exists()  # no FUSE needed for a local folder
