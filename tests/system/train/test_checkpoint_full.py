"""A checkpoint save on a full disk: a real, tiny tmpfs (the tests run as root, as `make
test` does), not a mock. The save raises one clear line, the unfinished checkpoint is gone
at once (its room is free again), the previous checkpoint still loads; for synchronous,
asynchronous, sharded (DCP) and object-store (staging in $TMPDIR) saves, and through a real
job, whose root cause `phalanx job show` displays as that line.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import Cli
from phalanx.errors import PhalanxError
from phalanx.storage.datastore_records import create_datastore
from phalanx.storage.datastores import S3Datastore
from phalanx.storage.secrets import SecretRef
from phalanx.train import CheckpointDiskFull, Checkpointer
from phalanx.train.checkpoint import _fs
from phalanx.train.checkpoint._full import disk_full_errno
from phalanx.workspace import Workspace
from servers import S3Server
from test_checkpoint import _one_process_env  # noqa: F401 (an autouse fixture, applied here too)

SMALL = 100_000  # float32 elements: 0.4 MB, fits twice on the 2 MB disk
BIG = 1_000_000  # 4 MB: never fits


def _mount(where: Path, options: str) -> None:
    """A tmpfs at ``where``; fails the test, naming why, when this machine cannot mount."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        # No fallback gives the same failure: RLIMIT_FSIZE raises EFBIG, not ENOSPC, and a
        # loop device needs the same privilege. Run the tests as root (`make test` does).
        pytest.fail(f"a full disk needs a real tmpfs: mount failed: {done.stderr.strip()}")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB file system, unmounted afterwards."""
    where = tmp_path / "disk"
    _mount(where, "size=2m")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def _used(disk: Path) -> int:
    usage = shutil.disk_usage(disk)
    return usage.total - usage.free


def _state(n: int, value: float) -> dict[str, Any]:
    return {"w": torch.full((n,), value), "step_note": f"{n}"}


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_save_that_does_not_fit_says_so_and_leaves_nothing(disk: Path, async_save: bool) -> None:
    directory = disk / "ck"
    ckpt = Checkpointer(directory, async_save=async_save)
    ckpt.save(_state(SMALL, 1.0), 1)
    ckpt.wait()
    after_first = _used(disk)

    with pytest.raises(CheckpointDiskFull) as caught:
        ckpt.save(_state(BIG, 2.0), 2)
        ckpt.wait()  # an asynchronous save's error comes with the next call
    error = caught.value
    assert str(error).startswith(
        f"no space left on device while saving checkpoint step 2 to {directory}; "
    )
    assert isinstance(error, OSError) and isinstance(error, PhalanxError)
    assert error.errno == errno.ENOSPC and error.step == 2
    # What torch raised is kept as the cause, for the traceback.
    assert "unexpected pos" in str(error.__cause__)
    # The unfinished checkpoint is gone at once, and its room with it.
    assert sorted(os.listdir(directory)) == [_fs.step_dirname(1)]
    assert _used(disk) <= after_first
    # The checkpoint before it still loads, and a save that fits works again.
    loaded = Checkpointer(directory).load_latest()
    assert loaded is not None and loaded.step == 1
    assert torch.equal(loaded.state["w"], torch.full((SMALL,), 1.0))
    ckpt.save(_state(SMALL, 3.0), 3)
    ckpt.close()
    assert ckpt.list_steps() == [1, 3]


def test_a_marker_that_does_not_fit_takes_the_checkpoint_out_at_once(tmp_path: Path) -> None:
    """The disk fills between the rename and the COMMITTED marker: the renamed folder is
    removed at once, not left uncommitted for the next sweep to find minutes later."""
    where = tmp_path / "inodes"
    # Room for the root, ck/, step 1 (folder, state, manifest, marker) and step 2 but for
    # its marker: nine inodes.
    _mount(where, "size=2m,nr_inodes=9")
    try:
        directory = where / "ck"
        with Checkpointer(directory) as ckpt:
            ckpt.save(_state(10, 1.0), 1)
            ckpt.wait()
            with pytest.raises(CheckpointDiskFull, match="while saving checkpoint step 2 to"):
                ckpt.save(_state(10, 2.0), 2)
        assert sorted(os.listdir(directory)) == [_fs.step_dirname(1)]
        loaded = Checkpointer(directory).load_latest()
        assert loaded is not None and loaded.step == 1
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_sharded_save_that_does_not_fit(disk: Path) -> None:
    directory = disk / "ck"
    with Checkpointer(directory) as ckpt:
        ckpt.save_sharded(_state(SMALL, 1.0), 1)
        with pytest.raises(CheckpointDiskFull) as caught:
            ckpt.save_sharded(_state(BIG, 2.0), 2)
        assert str(caught.value).startswith(
            f"no space left on device while saving checkpoint step 2 to {directory}; "
        )
        assert sorted(os.listdir(directory)) == [_fs.step_dirname(1)]
        target = {"w": torch.zeros(SMALL), "step_note": ""}
        loaded = ckpt.load_sharded_latest(target)
        assert loaded is not None and loaded.step == 1
        assert torch.equal(target["w"], torch.full((SMALL,), 1.0))


def test_torch_losing_the_errno_is_judged_by_the_free_space(disk: Path, tmp_path: Path) -> None:
    short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert disk_full_errno(short, tmp_path) is None  # plenty of room: some other failure
    with pytest.raises(OSError, match="No space left"):  # fill it up
        (disk / "filler").write_bytes(b"\0" * (3 << 20))
    assert shutil.disk_usage(disk).free < 64 << 10
    assert disk_full_errno(short, disk) == errno.ENOSPC
    assert disk_full_errno(RuntimeError("unexpected pos 1 vs 0"), None) is None
    quota = RuntimeError("writing")
    quota.__context__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert disk_full_errno(quota) == errno.EDQUOT
    assert disk_full_errno(ValueError("bad value"), disk) is None


def test_staging_for_an_object_store_that_does_not_fit(
    disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_server: S3Server
) -> None:
    """A save to an object store is staged in $TMPDIR first: a full $TMPDIR says so."""
    import s3fs

    bucket = f"ck{secrets.token_hex(6)}"
    s3_server.bucket(bucket)
    monkeypatch.setenv("PHALANX_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KEY_ID", s3_server.key)
    monkeypatch.setenv("KEY_SECRET", s3_server.secret)
    ws = Workspace()
    try:
        create_datastore(
            ws,
            S3Datastore(
                name="ck", bucket=bucket, endpoint_url=s3_server.endpoint,
                credentials={"key": SecretRef(env="KEY_ID"), "secret": SecretRef(env="KEY_SECRET")},
            ),
        )  # fmt: skip
    finally:
        ws.close()
    uri = "azureml://datastores/ck/paths/run1/checkpoints"
    with monkeypatch.context() as patch, Checkpointer(uri) as ckpt:
        patch.setattr(tempfile, "tempdir", str(disk))
        ckpt.save(_state(SMALL, 1.0), 1)
        with pytest.raises(CheckpointDiskFull) as caught:
            ckpt.save(_state(BIG, 2.0), 2)
        assert os.listdir(disk) == []  # the staging folder is gone
    message = str(caught.value)
    assert message.startswith(f"no space left on device while saving checkpoint step 2 to {uri}")
    assert f"staging it in {disk}/phalanx-checkpoint-" in message and "TMPDIR" in message
    fs = s3fs.S3FileSystem(
        key=s3_server.key, secret=s3_server.secret, endpoint_url=s3_server.endpoint
    )
    stored = [p.rpartition("/")[2] for p in fs.ls(f"{bucket}/run1/checkpoints", refresh=True)]
    assert stored == [_fs.step_dirname(1)]
    loaded = Checkpointer(uri).load_latest()
    assert loaded is not None and loaded.step == 1


SCRIPT = f"""
import sys
import torch
from phalanx.train import Checkpointer
ckpt = Checkpointer(sys.argv[1])
ckpt.save({{"w": torch.full(({SMALL},), 1.0)}}, 1)
ckpt.save({{"w": torch.full(({BIG},), 2.0)}}, 2)
"""

JOB = """
type: command
code: src
command: python save.py {directory}
limits: {{timeout: 120}}
"""


def test_a_job_whose_checkpoint_does_not_fit_shows_it_as_the_root_cause(
    cli: Cli, disk: Path
) -> None:
    directory = disk / "ck"
    cli.env["COLUMNS"] = "400"  # the root cause's line unwrapped
    cli.write("src/save.py", SCRIPT)
    name = cli.create(cli.write("job.yml", JOB.format(directory=directory)))
    job = cli.wait(name, ("Completed", "Failed", "Canceled"))
    assert job["status"] == "Failed", job
    message = job["error"]["message"]
    line = f"no space left on device while saving checkpoint step 2 to {directory}; "
    assert message.startswith(line) and "\n" not in message, job["error"]
    assert "No space left on device" in job["error"]["traceback"]  # the chain, kept below
    shown = cli.run("job", "show", name, check=True).stdout
    assert message in [row.strip("│ ") for row in shown.splitlines()], shown
    assert sorted(os.listdir(directory)) == [_fs.step_dirname(1)]
    loaded = Checkpointer(directory).load_latest()
    assert loaded is not None and loaded.step == 1
    assert job["error"]["rank"] == 0
