"""`phalanx job download`, on this machine and through a real server: the files arrive
with the bytes the job wrote (each checked by its sha256), a link the job planted is not
followed, bad input is one line and exit 2; through a server no command prints a path
of the server's disk; the studio link is printed only where something serves it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest

import servers
from conftest import LOCAL_AND_SERVER, PHALANX, Cli
from phalanx.launch.ports import free_port

pytestmark = pytest.mark.slow

JOB = """
command: python write.py --out ${{outputs.model}}
code: src
outputs:
  model: {type: uri_folder}
  extra: {type: uri_folder}
limits: {timeout: 120}
"""

WRITE = """
import argparse, os
p = argparse.ArgumentParser(); p.add_argument("--out"); a = p.parse_args()
os.makedirs(os.path.join(a.out, "sub"), exist_ok=True)
open(os.path.join(a.out, "weights.bin"), "wb").write(bytes(range(256)) * 4096)
open(os.path.join(a.out, "sub", "note.txt"), "w").write("trained")
outputs = os.environ["PHALANX_OUTPUTS_DIR"]
open(os.path.join(outputs, "summary.json"), "w").write('{"top1": 0.9}')
ckpt = os.path.join(os.environ["PHALANX_CHECKPOINT_DIR"], "step_3")
os.makedirs(ckpt, exist_ok=True)
open(os.path.join(ckpt, "state.pt"), "wb").write(b"state" * 100)
print("wrote everything")
"""


def _files(folder: Path) -> dict[str, str]:
    """Every plain file under ``folder`` (links too, to show none arrived): its sha256."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            found[rel] = "link"
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _completed(cli: Cli) -> tuple[str, Path]:
    cli.write("src/write.py", WRITE)
    name = cli.create(cli.write("job.yml", JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job
    return name, cli.home / "jobs" / name


def _one_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


@LOCAL_AND_SERVER
def test_download_brings_the_bytes_the_job_wrote_and_follows_no_link(
    cli: Cli, tmp_path: Path
) -> None:
    name, job_dir = _completed(cli)
    # What the job could plant: links out of its folder, to a file and to a folder.
    secret_dir = tmp_path / "elsewhere"
    secret_dir.mkdir()
    (secret_dir / "secret.txt").write_text("never-downloaded-bytes")
    (job_dir / "outputs" / "model" / "leak").symlink_to(secret_dir / "secret.txt")
    (job_dir / "outputs" / "outdir").symlink_to(secret_dir, target_is_directory=True)

    got = cli.run("job", "download", name, "--dest", "all", check=True)
    wrote = _files(job_dir / "outputs")
    arrived = _files(cli.workdir / "all" / "outputs")
    assert arrived == {k: v for k, v in wrote.items() if v != "link"}
    assert {"model/weights.bin", "model/sub/note.txt", "summary.json"} <= set(arrived)
    assert "leak" not in str(arrived) and "secret" not in str(arrived)
    size = sum((job_dir / "outputs" / rel).stat().st_size for rel in arrived)
    assert f"downloaded {len(arrived)} file(s)" in got.stdout
    assert f"({size} bytes)" in got.stdout and str(cli.workdir / "all" / "outputs") in got.stdout
    assert not list((cli.workdir / "all").glob(".phalanx-download-*"))  # staging removed

    # One output, and the checkpoints; the default folder is ./NAME.
    cli.run("job", "download", name, "--output", "model", check=True)
    assert _files(cli.workdir / name / "model") == {
        k.removeprefix("model/"): v for k, v in arrived.items() if k.startswith("model/")
    }
    cli.run("job", "download", name, "--output", "checkpoints", "--dest", "ck", check=True)
    assert (cli.workdir / "ck/checkpoints/step_3/state.pt").read_bytes() == b"state" * 100

    # Bad input: one line, exit 2, nothing written.
    _one_error(cli.run("job", "download", name, "--output", "weights"),
               "no output 'weights'", "extra, model (and checkpoints)")  # fmt: skip
    _one_error(cli.run("job", "download", "no_such_job"), "no_such_job")
    (cli.workdir / "afile").write_text("x")
    _one_error(cli.run("job", "download", name, "--dest", "afile"), "--dest", "is a file")
    _one_error(cli.run("job", "download", name, "--dest", "all"), "exists already")
    # Declared, never written: its folder, empty.
    empty = cli.run("job", "download", name, "--output", "extra", "--dest", "e", check=True)
    assert empty.stdout.startswith("downloaded 0 file(s), 0 bytes")
    assert list((cli.workdir / "e" / "extra").iterdir()) == []
    # An output replaced by a link out of the job's folder is refused, not followed.
    os.rename(job_dir / "outputs" / "model", tmp_path / "moved")
    (job_dir / "outputs" / "model").symlink_to(tmp_path / "moved", target_is_directory=True)
    _one_error(cli.run("job", "download", name, "--output", "model", "--dest", "l"),
               "symbolic link")  # fmt: skip
    assert not (cli.workdir / "l" / "model").exists()


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_through_a_server_no_path_of_its_disk_reaches_the_terminal(cli: Cli) -> None:
    name, _ = _completed(cli)
    home = str(cli.home)
    assert cli.server is not None
    shown = cli.run("job", "show", name, check=True).stdout
    as_json = cli.run("job", "show", name, "--json", check=True).stdout
    listed = cli.run("job", "list", "--json", check=True).stdout
    streamed = cli.run("job", "stream", name, check=True).stdout
    for out in (shown, as_json, listed, streamed):
        assert home not in out, out
    # Instead: the outputs' URIs and the commands that copy them here.
    assert f"azureml://jobs/{name}/outputs/model" in shown
    assert f"phalanx job download {name} --output model" in shown
    assert f"phalanx job download {name}" in streamed and "wrote everything" in streamed
    data = json.loads(as_json)
    assert data["job_dir"] is None and data["outputs_dir"] is None
    assert data["outputs"]["checkpoints"] == f"azureml://jobs/{name}/outputs/checkpoints"
    assert data["user_logs"] == ["user_logs/std_log_process_0.txt"]
    # The logs' time indexes are phalanx's, not the job's: in neither listing nor tar.
    listed_logs = httpx.get(f"{cli.server.url}/api/v1/jobs/{name}/tree",
                            params={"path": "user_logs"}, timeout=30).json()  # fmt: skip
    assert [f["path"] for f in listed_logs["files"]] == ["user_logs/std_log_process_0.txt"]
    packed = httpx.get(f"{cli.server.url}/api/v1/jobs/{name}/files/user_logs", timeout=30)
    with tarfile.open(fileobj=io.BytesIO(packed.content)) as tar:
        assert [m.name for m in tar.getmembers() if m.isfile()] == [
            "user_logs/std_log_process_0.txt"
        ]
    assert (Path(home) / "jobs" / name / "user_logs" / ".std_log_process_0.times").is_file()
    assert data["download"] == f"phalanx job download {name}"
    # The server serves the studio: its link is the job's page there.
    assert data["studio_url"] == f"{cli.server.url}/jobs/{name}"
    assert f"studio: {cli.server.url}/jobs/{name}" in shown


def test_the_studio_link_is_printed_only_while_a_studio_serves_it(cli: Cli) -> None:
    name, job_dir = _completed(cli)
    # On this machine the paths are the user's own: they stay.
    shown = cli.run("job", "show", name, check=True).stdout
    assert f"{job_dir / 'outputs'}" in shown and "job download" not in shown
    assert "studio: not running; `phalanx studio` serves this page" in shown
    assert cli.show(name)["studio_url"] is None
    port = free_port()
    proc = subprocess.Popen(
        [PHALANX, "studio", "--port", str(port)], env=cli.env, stdout=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        servers._wait_port(port, proc, "phalanx studio")  # type: ignore[arg-type]
        shown = cli.run("job", "show", name, check=True).stdout
        assert f"studio: http://127.0.0.1:{port}/jobs/{name}" in shown
        assert cli.show(name)["studio_url"] == f"http://127.0.0.1:{port}/jobs/{name}"
    finally:
        os.killpg(proc.pid, 9)  # no chance to remove its file: the link must still go
        proc.wait(timeout=10)
    assert (cli.home / "studio.json").exists()
    shown = cli.run("job", "show", name, check=True).stdout
    assert "studio: not running" in shown and f":{port}/" not in shown
