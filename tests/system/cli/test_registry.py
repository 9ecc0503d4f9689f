"""The model registry through the CLI: round trip, immutability, concurrent registration,
job outputs (by hand and from `outputs: … name:`), Azure Blob sources, and every way a
name or path could try to read or write outside the registry."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from conftest import LOCAL_AND_SERVER, Cli, blob_datastore
from phalanx.workspace import Workspace
from servers import Azurite


def _model_dir(tmp_path: Path) -> Path:
    src = tmp_path / "model"
    (src / "sub").mkdir(parents=True)
    (src / "weights.pt").write_bytes(os.urandom(300_000))
    (src / "sub" / "config.json").write_text('{"depth": 50}')
    return src


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _show(cli: Cli, name: str, version: str = "latest") -> dict:
    out = cli.run("model", "show", name, "--version", version, "--json", check=True).stdout
    return json.loads(out)


def _all_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@LOCAL_AND_SERVER
def test_round_trip_versions_and_immutability(cli: Cli, tmp_path: Path) -> None:
    src = _model_dir(tmp_path)
    cli.run("model", "create", "--name", "resnet50", "--path", str(src), "--tag", "arch=r50",
            check=True)  # fmt: skip
    cli.run("model", "create", "--name", "resnet50", "--path", str(src), "--description",
            "[/x] trained [red]fast", check=True)  # fmt: skip
    # A user's words are text in `model show`: markup neither breaks nor styles it.
    shown = cli.run("model", "show", "resnet50", "--version", "2", check=True).stdout
    assert "about    [/x] trained [red]fast" in shown
    cli.run("model", "create", "--name", "resnet50", "--path", str(src), "--version", "v1.5",
            check=True)  # fmt: skip
    versions = [m["version"] for m in json.loads(cli.run("model", "list", "--json").stdout)]
    assert versions == ["1", "2", "v1.5"]

    first = _show(cli, "resnet50", "1")
    assert first["tags"] == {"arch": "r50"} and first["job"] is None
    assert {f["path"]: f["sha256"] for f in first["files"]} == {
        "weights.pt": _sha(src / "weights.pt"),
        "sub/config.json": _sha(src / "sub" / "config.json"),
    }
    assert _show(cli, "resnet50")["version"] == "v1.5"  # latest = last registered

    # A version is immutable: not re-registered, and its files cannot be written.
    again = cli.run("model", "create", "--name", "resnet50", "--path", str(src), "--version", "2")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1
    kept = Path(first["folder"]) / "weights.pt"
    assert not kept.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    (src / "weights.pt").write_bytes(b"changed later")  # the source changing changes nothing
    assert _show(cli, "resnet50", "1")["files"] == first["files"]

    dest = tmp_path / "download"
    cli.run("model", "download", "resnet50", "--version", "1", "--dest", str(dest), check=True)
    assert _sha(dest / "weights.pt") == next(
        f["sha256"] for f in first["files"] if f["path"] == "weights.pt"
    )
    assert (dest / "sub" / "config.json").read_text() == '{"depth": 50}'
    # A file that differs at the destination is not replaced without --overwrite.
    (dest / "sub" / "config.json").write_text("mine")
    clash = cli.run("model", "download", "resnet50", "--version", "1", "--dest", str(dest))
    assert clash.returncode == 2 and "--overwrite" in clash.stderr
    assert (dest / "sub" / "config.json").read_text() == "mine"
    cli.run("model", "download", "resnet50", "--version", "1", "--dest", str(dest),
            "--overwrite", check=True)  # fmt: skip
    assert (dest / "sub" / "config.json").read_text() == '{"depth": 50}'

    missing = cli.run("model", "show", "resnet50", "--version", "9")
    assert missing.returncode == 2 and "versions: 1, 2, v1.5" in missing.stderr


@LOCAL_AND_SERVER
def test_a_changed_registry_copy_is_detected_on_download(cli: Cli, tmp_path: Path) -> None:
    src = _model_dir(tmp_path)
    cli.run("model", "create", "--name", "m", "--path", str(src), check=True)
    kept = Path(_show(cli, "m")["folder"]) / "weights.pt"
    kept.chmod(0o644)
    kept.write_bytes(b"tampered")
    proc = cli.run("model", "download", "m", "--dest", str(tmp_path / "out"))
    assert proc.returncode == 2 and "no longer matches its sha256" in proc.stderr
    assert not (tmp_path / "out" / "weights.pt").exists()


@LOCAL_AND_SERVER
def test_concurrent_registrations_get_distinct_versions_and_lose_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    sources = []
    for i in range(4):
        src = tmp_path / f"model{i}"
        src.mkdir()
        (src / "weights.pt").write_bytes(os.urandom(2_000_000) + bytes([i]))
        sources.append(src)
    procs = [
        cli.popen("model", "create", "--name", "shared", "--path", str(src)) for src in sources
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    models = json.loads(cli.run("model", "list", "--name", "shared", "--json").stdout)
    assert sorted(m["version"] for m in models) == ["1", "2", "3", "4"]
    registered = {m["files"][0]["sha256"] for m in models}
    assert registered == {_sha(s / "weights.pt") for s in sources}  # each one, once
    for m in models:  # and each version's folder holds its own bytes
        assert _sha(Path(m["folder"]) / "weights.pt") == m["files"][0]["sha256"]
    assert list((cli.home / "models" / ".staging").iterdir()) == []


JOB = """
command: >-
  python train.py --out ${{outputs.model}}
code: src
outputs:
  model: {type: custom_model, name: tiny-net}
  stats: {name: tiny-stats}
limits: {timeout: 120}
"""

TRAIN = """
import argparse, os
from phalanx.train import log_metric
p = argparse.ArgumentParser(); p.add_argument("--out"); a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
open(os.path.join(a.out, "model.pt"), "wb").write(b"weights" * 1000)
open(os.path.join(os.environ["PHALANX_OUTPUTS_DIR"], "stats", "s.txt"), "w").write("1")
ckpt = os.path.join(os.environ["PHALANX_CHECKPOINT_DIR"], "step_3")
os.makedirs(ckpt, exist_ok=True)
open(os.path.join(ckpt, "state.pt"), "wb").write(b"state")
for step in range(1, 4):
    log_metric("val/top1", 0.5 + step / 10, step)
"""


@LOCAL_AND_SERVER
def test_job_outputs_register_on_success_and_by_uri(cli: Cli, tmp_path: Path) -> None:
    cli.write("src/train.py", TRAIN)
    name = cli.create(cli.write("job.yml", JOB))
    job = cli.wait(name, ("Completed", "Failed"))
    assert job["status"] == "Completed", job

    model = _show(cli, "tiny-net")
    assert model["version"] == "1" and model["job"] == name
    assert model["source"] == f"azureml://jobs/{name}/outputs/model"
    assert model["metrics"] == {"val/top1": pytest.approx(0.8)}
    assert [f["path"] for f in model["files"]] == ["model.pt"]
    asset = json.loads(cli.run("data", "show", "tiny-stats", "--json", check=True).stdout)
    assert Path(asset["path"]) == Path(job["job_dir"]) / "outputs" / "stats"

    # By hand: a job output, and a path inside the built-in checkpoints output.
    cli.run("model", "create", "--name", "tiny-net", "--path",
            f"azureml://jobs/{name}/outputs/model", check=True)  # fmt: skip
    assert _show(cli, "tiny-net")["version"] == "2"
    cli.run("model", "create", "--name", "tiny-ckpt", "--path",
            f"azureml://jobs/{name}/outputs/checkpoints/paths/step_3", check=True)  # fmt: skip
    assert [f["path"] for f in _show(cli, "tiny-ckpt")["files"]] == ["state.pt"]

    # A job asking for a version that exists is refused before it runs.
    taken = cli.run("job", "create", "-f", str(cli.workdir / "job.yml"),
                    "--set", "outputs.model.version=1")  # fmt: skip
    assert taken.returncode == 2 and "tiny-net:1 already exists" in taken.stderr
    unknown = cli.run("model", "create", "--name", "x", "--path",
                      f"azureml://jobs/{name}/outputs/nope")  # fmt: skip
    assert unknown.returncode == 2 and "has no output 'nope'" in unknown.stderr


@LOCAL_AND_SERVER
def test_register_from_azure_blob(cli: Cli, azurite: Azurite) -> None:
    files = {"exported/model.onnx": b"onnx" * 500, "exported/a/b.txt": b"b"}
    blob_datastore(cli, azurite, files)
    uri = "azureml://datastores/blobs/paths/exported"
    cli.run("model", "create", "--name", "onnx", "--path", uri, check=True)
    model = _show(cli, "onnx")
    assert model["source"] == uri
    assert {f["path"]: f["size"] for f in model["files"]} == {"model.onnx": 2000, "a/b.txt": 1}
    assert (Path(model["folder"]) / "a" / "b.txt").read_bytes() == b"b"


BAD_NAMES = ["../evil", "a/b", "..", "%2e%2e", "%2e%2e%2fevil", "/abs", "a\\b", ".hidden", "",
             "trailing\n"]  # fmt: skip
BAD_VERSIONS = ["../1", "..", "1/2", "%2e%2e", "/1", "latest", "..%2f", "1\n"]


@LOCAL_AND_SERVER
def test_every_traversal_attempt_is_refused(cli: Cli, tmp_path: Path) -> None:
    src = _model_dir(tmp_path)
    cli.run("model", "list", check=True)  # the workspace exists
    before = _all_files(tmp_path)
    attempts = [["--name", n, "--path", str(src)] for n in BAD_NAMES]
    attempts += [["--name", "ok", "--version", v, "--path", str(src)] for v in BAD_VERSIONS]
    attempts += [
        ["--name", "ok", "--path", "azureml://datastores/default/paths/../../etc"],
        ["--name", "ok", "--path", "azureml://jobs/../outputs/x"],
    ]
    for args in attempts:
        proc = cli.run("model", "create", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, args
    for show in (["show", "../x"], ["show", "ok", "--version", "../../x"], ["download", "%2e%2e"]):
        proc = cli.run("model", *show)
        assert proc.returncode == 2 and "invalid" in proc.stderr, show

    # A symbolic link in the source, to a file or to a folder, is refused.
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    (src / "leak").symlink_to(secret)
    linked = cli.run("model", "create", "--name", "ok", "--path", str(src))
    assert linked.returncode == 2 and "symbolic link" in linked.stderr
    (src / "leak").unlink()
    (src / "leakdir").symlink_to(tmp_path, target_is_directory=True)
    linked = cli.run("model", "create", "--name", "ok", "--path", str(src))
    assert linked.returncode == 2 and "symbolic link" in linked.stderr
    (src / "leakdir").unlink()

    assert json.loads(cli.run("model", "list", "--json").stdout) == []
    assert _all_files(tmp_path) == before | {secret}  # nothing written anywhere else
    registry = cli.home / "models"
    assert not registry.exists() or {p.name for p in registry.iterdir()} <= {".staging"}


@LOCAL_AND_SERVER
def test_traversal_through_job_outputs_and_downloads_is_refused(cli: Cli, tmp_path: Path) -> None:
    cli.write("src/train.py", TRAIN)
    name = cli.create(cli.write("job.yml", JOB), "outputs.model.name=", "outputs.stats.name=")
    assert cli.wait(name, ("Completed", "Failed"))["status"] == "Completed"
    for sub in ("../../..", "%2e%2e/%2e%2e", "%252e%252e/x", "/etc", "a/../../b", "."):
        uri = f"azureml://jobs/{name}/outputs/model/paths/{sub}"
        proc = cli.run("model", "create", "--name", "ok", "--path", uri)
        assert proc.returncode == 2, (sub, proc.stderr)
        assert "inside" in proc.stderr or "'..'" in proc.stderr, (sub, proc.stderr)
    # A link the job left in its output that points out of it.
    out = Path(cli.show(name)["job_dir"]) / "outputs" / "model"
    (out / "escape").symlink_to("/etc", target_is_directory=True)
    proc = cli.run("model", "create", "--name", "ok", "--path",
                   f"azureml://jobs/{name}/outputs/model/paths/escape")  # fmt: skip
    assert proc.returncode == 2 and "outside" in proc.stderr
    (out / "escape").unlink()

    cli.run("model", "create", "--name", "ok", "--path", f"azureml://jobs/{name}/outputs/model",
            check=True)  # fmt: skip
    # A record altered to name a file outside the destination is refused on download.
    _set_files(cli, [{"path": "../escaped.pt", "size": 1, "sha256": "0" * 64}])
    dest = tmp_path / "dl" / "inner"
    proc = cli.run("model", "download", "ok", "--dest", str(dest))
    assert proc.returncode == 2 and "inside its folder" in proc.stderr
    assert not (tmp_path / "dl" / "escaped.pt").exists()

    # A destination whose sub-folder is a link out of it is refused too.
    _set_files(cli, [{"path": "sub/model.pt", "size": 7000,
                      "sha256": hashlib.sha256(b"weights" * 1000).hexdigest()}])  # fmt: skip
    outside = tmp_path / "outside"
    outside.mkdir()
    dest2 = tmp_path / "dl2"
    dest2.mkdir()
    (dest2 / "sub").symlink_to(outside, target_is_directory=True)
    proc = cli.run("model", "download", "ok", "--dest", str(dest2))
    assert proc.returncode == 2 and "outside" in proc.stderr
    assert list(outside.iterdir()) == []


@LOCAL_AND_SERVER
def test_download_refuses_links_and_folders_in_the_way_and_writes_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    src = _model_dir(tmp_path)
    cli.run("model", "create", "--name", "m", "--path", str(src), check=True)
    outside = tmp_path / "outside"
    outside.mkdir()

    dest = tmp_path / "dl"
    dest.mkdir()
    (dest / "sub").symlink_to(tmp_path / "nowhere")  # dangling: mkdir would follow it
    proc = cli.run("model", "download", "m", "--dest", str(dest))
    assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["sub"]  # weights.pt not written
    assert not (tmp_path / "nowhere").exists()

    dest2 = tmp_path / "dl2"
    (dest2 / "weights.pt").mkdir(parents=True)  # a folder where the model has a file
    proc = cli.run("model", "download", "m", "--dest", str(dest2), "--overwrite")
    assert proc.returncode == 2 and "is a folder" in proc.stderr
    assert "Traceback" not in proc.stderr and not (dest2 / "sub").exists()


@LOCAL_AND_SERVER
def test_outputs_registering_one_version_twice_are_refused_at_create(cli: Cli) -> None:
    cli.write("src/train.py", TRAIN)
    spec = cli.write(
        "job.yml",
        """
        command: python train.py --out ${{outputs.a}}
        code: src
        outputs:
          a: {type: custom_model, name: dup, version: "1"}
          b: {type: custom_model, name: dup, version: "1"}
        """,
    )
    proc = cli.run("job", "create", "-f", str(spec))
    assert proc.returncode == 2 and "both register dup:1" in proc.stderr


@LOCAL_AND_SERVER
def test_a_job_folder_output_behind_a_link_is_refused(cli: Cli, tmp_path: Path) -> None:
    cli.write("src/train.py", TRAIN)
    name = cli.create(cli.write("job.yml", JOB), "outputs.model.name=", "outputs.stats.name=")
    job = cli.wait(name, ("Completed", "Failed"))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "model").mkdir(parents=True)
    (elsewhere / "model" / "id_rsa").write_text("secret")
    outputs = Path(job["job_dir"]) / "outputs"
    outputs.rename(tmp_path / "moved")
    outputs.symlink_to(elsewhere, target_is_directory=True)
    proc = cli.run("model", "create", "--name", "x", "--path",
                   f"azureml://jobs/{name}/outputs/model")  # fmt: skip
    assert proc.returncode == 2 and "outside the job's folder" in proc.stderr


@LOCAL_AND_SERVER
def test_list_and_show_print_what_json_holds(cli: Cli, tmp_path: Path) -> None:
    src = _model_dir(tmp_path)
    cli.run("model", "create", "--name", "r50", "--path", str(src), "--description", "first",
            "--tag", "arch=r50", check=True)  # fmt: skip
    shown = _show(cli, "r50")
    listing = cli.run("model", "list", check=True).stdout
    assert "r50" in listing and "2" in listing.split("r50", 1)[1]  # version 1, 2 files
    text = cli.run("model", "show", "r50", check=True).stdout
    assert "r50:1" in text and "about    first" in text and "tag      arch=r50" in text
    for f in shown["files"]:
        assert f["path"] in text and f["sha256"] in text  # the whole hash, not cut
    empty = cli.run("model", "list", "--name", "nothing", check=True).stdout
    assert "no models registered" in empty


def _set_files(cli: Cli, files: list[dict[str, object]]) -> None:
    """Alter the record of model ``ok`` behind phalanx's back."""
    ws = Workspace(cli.home)
    with ws.transaction() as tx:
        tx.execute(
            "UPDATE models SET files_json = :files WHERE name = 'ok'", {"files": json.dumps(files)}
        )
    ws.close()
