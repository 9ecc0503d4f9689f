"""phalanx.train.Checkpointer on an object store: a real Azurite, through a registered datastore.

The same guarantees as in a local folder (see test_checkpoint.py): round trips, pruning,
damaged and malicious checkpoints falling back, a half-uploaded checkpoint never taken for a
complete one, asynchronous saves, and one-line errors for a refused credential.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from adlfs import AzureBlobFileSystem
from azure.storage.blob import ContainerClient

from conftest import torchrun
from phalanx.errors import PhalanxError
from phalanx.launch.ports import free_port
from phalanx.storage.datastore_records import create_datastore
from phalanx.storage.datastores import AzureBlobDatastore
from phalanx.storage.secrets import SecretRef
from phalanx.train import Checkpointer
from phalanx.train.checkpoint import _fs
from phalanx.workspace import Workspace
from servers import AZURITE_ACCOUNT, AZURITE_KEY, Azurite
from test_checkpoint import (
    Payload,
    Run,
    _one_process_env,  # noqa: F401 (an autouse fixture, applied here too)
    assert_same,
    clone,
    commit_by_hand,
)

PREFIX = "run1/checkpoints"
URI = f"azureml://datastores/ck/paths/{PREFIX}"


def register(name: str, container: str, endpoint: str, key_env: str = "AZ_KEY") -> None:
    ws = Workspace()
    try:
        datastore = AzureBlobDatastore(
            name=name,
            account_name=AZURITE_ACCOUNT,
            container_name=container,
            endpoint=endpoint,
            credentials={"account_key": SecretRef(env=key_env)},
        )
        create_datastore(ws, datastore)
    finally:
        ws.close()


@pytest.fixture
def container(azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ContainerClient:
    """A fresh container behind datastore ``ck`` of a private workspace."""
    name = f"ck{secrets.token_hex(8)}"
    azurite.container(name)
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AZ_KEY", AZURITE_KEY)
    register("ck", name, azurite.endpoint)
    return ContainerClient.from_connection_string(azurite.connection_string, name)


def blobs(container: ContainerClient) -> dict[str, bytes]:
    """Every object under the checkpoint folder, by path relative to it."""
    return {
        b.name.removeprefix(f"{PREFIX}/"): container.download_blob(b.name).readall()
        for b in container.list_blobs(name_starts_with=f"{PREFIX}/")
    }


def put(container: ContainerClient, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        container.upload_blob(f"{PREFIX}/{name}", data, overwrite=True)


def test_round_trip_uploads_data_then_manifest_then_marker(
    container: ContainerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str] = []

    def recording(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = args[1] if method.__name__ == "put_file" else args[0]
            writes.append(target.rsplit("/", 1)[-1])
            return method(self, *args, **kwargs)

        return wrapper

    for name in ("put_file", "pipe_file"):
        monkeypatch.setattr(
            AzureBlobFileSystem, name, recording(getattr(AzureBlobFileSystem, name))
        )

    run = Run(seed=0)
    run.train(2)
    state = {"model": run.model.state_dict(), "optimizer": run.opt.state_dict(), "epoch": 3}
    expected = clone(state)
    with Checkpointer(URI, keep_last=2) as ckpt:
        assert ckpt.directory == URI and ckpt.list_steps() == [] and ckpt.load_latest() is None
        ckpt.save(state, step=3)
    assert writes == ["state.pt", "manifest.json", "COMMITTED"]

    loaded = Checkpointer(URI).load_latest()
    assert loaded is not None and loaded.step == 3 and loaded.path == f"{URI}/step_000000000003"
    assert_same(loaded.state, expected)
    resumed = Run(seed=1)
    resumed.model.load_state_dict(loaded.state["model"])
    resumed.opt.load_state_dict(loaded.state["optimizer"])
    assert_same(resumed.model.state_dict(), expected["model"])

    stored = blobs(container)
    folder = _fs.step_dirname(3)
    assert sorted(stored) == [f"{folder}/{n}" for n in ("COMMITTED", "manifest.json", "state.pt")]
    data = stored[f"{folder}/state.pt"]
    manifest = json.loads(stored[f"{folder}/manifest.json"])
    assert manifest["files"] == {
        "state.pt": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    }
    assert manifest["step"] == 3 and manifest["kind"] == "replicated"

    # A later attempt saving the same step replaces it, whole.
    with Checkpointer(URI) as next_attempt:
        next_attempt.save({"v": "again"}, 3)
    again = Checkpointer(URI).load_latest()
    assert again is not None and again.state == {"v": "again"}
    assert len(blobs(container)) == 3


def test_keep_last_prunes_the_store(container: ContainerClient) -> None:
    with Checkpointer(URI, keep_last=2) as ckpt:
        for step in (10, 20, 30, 40):
            ckpt.save({"step": step}, step)
        ckpt.wait()
        assert ckpt.list_steps() == [30, 40]
        folders = {name.split("/")[0] for name in blobs(container)}
        assert folders == {_fs.step_dirname(30), _fs.step_dirname(40)}
        loaded = ckpt.load_latest()
        assert loaded is not None and loaded.state == {"step": 40}


def _flip_byte(data: bytes) -> bytes:
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    return bytes(flipped)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [(_flip_byte, "state.pt does not match its sha256"), (lambda d: d[:100], "state.pt is 100")],
    ids=["flipped byte", "truncated"],
)
def test_a_damaged_checkpoint_falls_back_to_the_one_before(
    container: ContainerClient,
    warned: list[str],
    damage: Callable[[bytes], bytes],
    reason: str,
) -> None:
    with Checkpointer(URI) as ckpt:
        ckpt.save({"w": torch.arange(10_000.0), "v": 1}, 1)
        ckpt.save({"w": torch.arange(10_000.0) * 2, "v": 2}, 2)
    name = f"{_fs.step_dirname(2)}/state.pt"
    put(container, {name: damage(blobs(container)[name])})

    loaded = Checkpointer(URI).load_latest()
    assert loaded is not None and loaded.step == 1 and loaded.state["v"] == 1
    assert len(warned) == 1
    assert f"{URI}/{_fs.step_dirname(2)} is unusable" in warned[0] and reason in warned[0]

    name = f"{_fs.step_dirname(1)}/state.pt"
    put(container, {name: damage(blobs(container)[name])})
    assert Checkpointer(URI).load_latest() is None
    assert "no usable checkpoint among the 2" in warned[-1]


def test_a_half_uploaded_checkpoint_is_ignored_then_cleaned_up(
    container: ContainerClient, tmp_path: Path, warned: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with Checkpointer(URI, keep_last=2) as ckpt:
        ckpt.save({"v": 1}, 1)
    # A writer killed mid-upload: its data and manifest arrived, its marker never did.
    with Checkpointer(tmp_path / "local") as local:
        local.save({"v": 2}, 2)
    written = tmp_path / "local" / _fs.step_dirname(2)
    arrived = {n: (written / n).read_bytes() for n in ("state.pt", "manifest.json")}
    put(container, {f"{written.name}/{n}": data for n, data in arrived.items()})

    ckpt = Checkpointer(URI, keep_last=2)
    assert ckpt.list_steps() == [1]
    loaded = ckpt.load_latest()
    assert loaded is not None and loaded.step == 1 and warned == []

    ckpt.save({"v": 3}, 3)
    ckpt.wait()  # the leftover is fresh: maybe a live writer, so it stays
    assert {n.split("/")[0] for n in blobs(container)} == {_fs.step_dirname(s) for s in (1, 2, 3)}
    # Once stale (whole seconds on the store's clock), the next prune removes it.
    monkeypatch.setattr(_fs, "STALE_AFTER_S", -1.0)
    ckpt.save({"v": 4}, 4)
    ckpt.close()
    assert {n.split("/")[0] for n in blobs(container)} == {_fs.step_dirname(s) for s in (3, 4)}
    assert warned == []


def test_async_save_uploads_in_the_background_and_close_commits(
    container: ContainerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real_put = AzureBlobFileSystem.put_file

    def put_file(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_put(self, *args, **kwargs)

    monkeypatch.setattr(AzureBlobFileSystem, "put_file", put_file)
    weights = {"w": torch.randn(64, 64), "b": torch.zeros(64)}
    expected = clone(weights)
    ckpt = Checkpointer(URI, async_save=True)
    ckpt.save({"model": weights}, 7)
    weights["w"].add_(1.0)  # training goes on; the checkpoint holds the state at save()
    ckpt.close()

    assert threads and all(t.startswith("phalanx-checkpoint") for t in threads)
    assert f"{_fs.step_dirname(7)}/COMMITTED" in blobs(container)
    loaded = Checkpointer(URI).load_latest()
    assert loaded is not None and loaded.step == 7
    assert_same(loaded.state["model"], expected)


def test_a_malicious_pickle_is_refused_and_never_run(
    container: ContainerClient, tmp_path: Path, warned: list[str]
) -> None:
    marker = tmp_path / "pwned"
    with Checkpointer(URI) as ckpt:
        ckpt.save({"v": 1}, 1)
    evil = tmp_path / _fs.step_dirname(2)
    evil.mkdir()
    torch.save({"model": Payload(marker)}, evil / "state.pt")
    commit_by_hand(evil, 2, "replicated")  # its sha256 matches: only weights_only stands guard
    put(container, {f"{evil.name}/{p.name}": p.read_bytes() for p in evil.iterdir()})

    loaded = Checkpointer(URI).load_latest()
    assert loaded is not None and loaded.step == 1
    assert not marker.exists()
    assert warned == [
        f"checkpoint {URI}/{evil.name} is unusable (state.pt does not load: weights_only=True "
        "refused it: Trying to load unsupported GLOBAL posix.system whose module posix is "
        "blocked.); trying the one before it"
    ]


def test_store_errors_are_one_line(
    container: ContainerClient, azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WRONG_KEY", "A" * 8 + AZURITE_KEY[8:])
    register("wrong", container.container_name, azurite.endpoint, key_env="WRONG_KEY")
    wrong = Checkpointer("azureml://datastores/wrong/paths/run1/checkpoints")
    for attempt in (lambda: wrong.save({"v": 1}, 1), wrong.load_latest, wrong.list_steps):
        with pytest.raises(PhalanxError, match="access denied") as info:
            attempt()
        assert "\n" not in str(info.value) and "wrong/paths/run1" in str(info.value)
    asynchronous = Checkpointer("azureml://datastores/wrong/paths/x", async_save=True)
    asynchronous.save({"v": 1}, 1)
    with pytest.raises(PhalanxError, match="access denied"):
        asynchronous.close()
    assert blobs(container) == {}

    register("nowhere", container.container_name, f"http://127.0.0.1:{free_port()}/acct")
    with pytest.raises(PhalanxError, match="cannot reach"):
        Checkpointer("azureml://datastores/nowhere/paths/x")
    with pytest.raises(PhalanxError, match="datastore 'nope' not found"):
        Checkpointer("azureml://datastores/nope/paths/x")
    sharded = Checkpointer(URI)
    with pytest.raises(PhalanxError, match="sharded checkpoints need a local or shared folder"):
        sharded.save_sharded({"w": torch.zeros(2)}, 1)
    with pytest.raises(PhalanxError, match="sharded checkpoints need a local or shared folder"):
        sharded.load_sharded_latest({"w": torch.zeros(2)})


@pytest.mark.usefixtures("container")  # for its workspace
def test_a_local_datastore_is_a_local_folder(tmp_path: Path) -> None:
    ckpt = Checkpointer("azureml://datastores/default/paths/ck")
    assert ckpt.directory == tmp_path / "home" / "datastore" / "ck"
    ckpt.save({"v": 1}, 1)
    ckpt.close()
    assert (tmp_path / "home" / "datastore" / "ck" / _fs.step_dirname(1) / "COMMITTED").is_file()


WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    import torch.distributed as dist
    from phalanx.errors import PhalanxError
    from phalanx.train import Checkpointer, cleanup, init
    from phalanx.train.checkpoint import _remote
    from phalanx.train.checkpoint._manifest import InvalidCheckpoint

    out, uri = Path(sys.argv[1]), sys.argv[2]
    ctx = init()
    with Checkpointer(uri, keep_last=3) as ckpt:  # rank 0 writes, rank 1 returns at once
        for step in (1, 2):
            ckpt.save({"x": torch.tensor([float(step)])}, step)
    dist.barrier()
    ckpt = Checkpointer(uri)
    record = {"steps": ckpt.list_steps(), "latest": ckpt.load_latest().step}

    real = _remote.RemoteFolder.download
    def on_rank_1(error):
        def download(self, step, dest):
            if ctx.rank == 1 and step == 2:
                raise error
            return real(self, step, dest)
        return download

    # A checkpoint damaged for rank 1 only is skipped by both.
    _remote.RemoteFolder.download = on_rank_1(InvalidCheckpoint("simulated on rank 1"))
    agreed = ckpt.load_latest()
    record["agreed"] = [agreed.step, agreed.state["x"].item()]
    # A store failing for rank 1 only fails both: no fallback, and no rank left waiting.
    _remote.RemoteFolder.download = on_rank_1(PhalanxError("simulated store failure"))
    try:
        ckpt.load_latest()
        record["store"] = "loaded"
    except PhalanxError as e:
        record["store"] = str(e)
    cleanup()
    (out / str(ctx.rank)).write_text(json.dumps(record))
    """
)


def test_ranks_agree_on_the_checkpoint_they_load(
    container: ContainerClient, tmp_path: Path
) -> None:
    script, out = tmp_path / "worker.py", tmp_path / "out"
    script.write_text(WORKER)
    out.mkdir()
    proc = torchrun(script, str(out), URI)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    records = {int(p.name): json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(records) == [0, 1]
    for record in records.values():
        assert record["steps"] == [1, 2] and record["latest"] == 2
        assert record["agreed"] == [1, 1.0]
    assert records[1]["store"] == "simulated store failure"
    assert records[0]["store"] == (
        f"loading checkpoint {URI}/step_000000000002 failed on another rank; its log says why"
    )
