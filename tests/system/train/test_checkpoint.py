"""phalanx.train.Checkpointer: round trips, pruning, async saves, crash safety, damaged and
malicious checkpoints, and sharded (DCP) checkpoints with two real gloo processes.

The crash test forks writers and SIGKILLs them at random instants during their saves;
whatever instant the kill hits, the newest valid checkpoint must be exactly one of the
states that were saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
import torch
from torch import nn

from conftest import LAUNCH_VARS, torchrun
from phalanx.train import Checkpointer, LoadedCheckpoint, rng_state, set_rng_state
from phalanx.train.checkpoint import _fs


@pytest.fixture(autouse=True)
def _one_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LAUNCH_VARS, "PHALANX_CHECKPOINT_DIR"):
        monkeypatch.delenv(name, raising=False)


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Deep equality, tensors compared exactly (dtype, shape and values)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return type(value)((k, clone(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value


class Run:
    """A tiny training run: model, optimizer, scheduler, grad scaler."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(
            nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.scaler = torch.amp.GradScaler("cpu")

    def train(self, steps: int) -> list[float]:
        losses = []
        for _ in range(steps):
            # Draws from every generator that rng_state() covers.
            x = torch.randn(8, 8) * random.uniform(0.5, 1.5) * float(np.random.uniform(0.5, 1.5))
            loss = self.model(x).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sched.step()
            losses.append(loss.item())
        return losses

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng_state(),
            "loader": {"epoch": 2, "offset": 1234, "order": [3, 1, 2]},
            "note": "tiny",
            "best_loss": 0.25,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])


def test_round_trip_resumes_training_exactly(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    run = Run(seed=0)
    run.train(3)
    with Checkpointer(tmp_path, keep_last=2) as ckpt:
        ckpt.save(run.state(), step=3)
    expected_losses = run.train(2)  # the future the checkpoint must reproduce
    expected_params = clone(run.model.state_dict())

    resumed = Run(seed=99)
    random.seed(99)
    np.random.seed(99)
    loaded = Checkpointer(tmp_path).load_latest()
    assert isinstance(loaded, LoadedCheckpoint)
    assert loaded.step == 3 and loaded.path == tmp_path / "step_000000000003"
    assert loaded.state["loader"] == {"epoch": 2, "offset": 1234, "order": [3, 1, 2]}
    assert loaded.state["note"] == "tiny" and loaded.state["best_loss"] == 0.25
    resumed.restore(loaded.state)
    assert resumed.train(2) == expected_losses
    assert_same(resumed.model.state_dict(), expected_params)
    assert sorted(os.listdir(loaded.path)) == ["COMMITTED", "manifest.json", "state.pt"]
    manifest = json.loads((loaded.path / "manifest.json").read_text())
    digest = hashlib.sha256((loaded.path / "state.pt").read_bytes()).hexdigest()
    assert manifest["files"] == {
        "state.pt": {"size": (loaded.path / "state.pt").stat().st_size, "sha256": digest}
    }
    assert manifest["step"] == 3 and manifest["kind"] == "replicated"
    assert manifest["torch_version"] == torch.__version__


def test_keep_last_prunes_to_the_newest_and_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "ck"
    with Checkpointer(directory, keep_last=3) as ckpt:
        assert ckpt.list_steps() == [] and ckpt.load_latest() is None
        for step in (10, 20, 30, 40, 50):
            ckpt.save({"step": step}, step)
        ckpt.wait()
        assert ckpt.list_steps() == [30, 40, 50]
        assert sorted(os.listdir(directory)) == [_fs.step_dirname(s) for s in (30, 40, 50)]
        loaded = ckpt.load_latest()
        assert loaded is not None and loaded.state == {"step": 50}

    for bad in (1, 0, -1, 2.5, True):
        with pytest.raises(ValueError, match="keep_last"):
            Checkpointer(directory, keep_last=bad)  # type: ignore[arg-type]
    monkeypatch.setenv("PHALANX_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    assert Checkpointer().directory == tmp_path / "from-env"
    monkeypatch.delenv("PHALANX_CHECKPOINT_DIR")
    monkeypatch.chdir(tmp_path)
    assert Checkpointer().directory == tmp_path / "checkpoints"
    monkeypatch.setenv("RANK", "3")
    assert Checkpointer().rank == 3


def test_async_save_equals_sync_and_ignores_later_mutation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(seed=0)
    run.train(2)
    state = run.state()
    state["tied"] = [state["model"]["0.weight"], state["model"]["0.weight"]]
    before = clone(state)
    with Checkpointer(tmp_path / "sync") as sync:
        sync.save(state, 7)

    # Hold the background writer until training has changed everything in place,
    # so the test does not depend on which thread wins.
    release = threading.Event()
    real_sweep = _fs.sweep

    def held_sweep(*args: Any) -> None:
        assert release.wait(30)
        real_sweep(*args)

    monkeypatch.setattr(_fs, "sweep", held_sweep)
    with Checkpointer(tmp_path / "async", async_save=True) as asynchronous:
        asynchronous.save(state, 7)
        run.train(1)
        with torch.no_grad():
            for tensor in run.model.state_dict().values():
                tensor.add_(100)
        release.set()
        asynchronous.wait()
        first = asynchronous.load_latest()
        # The next save reuses the staging buffers; the first checkpoint is untouched.
        asynchronous.save(run.state(), 8)
    async_loaded = Checkpointer(tmp_path / "async").load_latest(map_location="cpu")
    sync_loaded = Checkpointer(tmp_path / "sync").load_latest()
    assert first is not None and sync_loaded is not None and async_loaded is not None
    assert_same(first.state, before)
    assert_same(sync_loaded.state, before)
    assert async_loaded.step == 8 and not torch.equal(
        async_loaded.state["model"]["0.weight"], before["model"]["0.weight"]
    )
    tied = first.state["tied"]
    assert tied[0].untyped_storage().data_ptr() == tied[1].untyped_storage().data_ptr()


def test_errors_surface_and_unloadable_state_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        Checkpointer(blocker / "ck").save({"x": 1}, 1)

    ckpt = Checkpointer(blocker / "ck", async_save=True)
    ckpt.save({"x": 1}, 1)  # returns; the failure is the background thread's
    with pytest.raises(OSError):
        ckpt.wait()
    ckpt.wait()  # raised once
    ckpt.save({"x": 1}, 2)
    with pytest.raises(OSError):
        ckpt.save({"x": 1}, 3)  # the previous save's error, before this one starts
    ckpt.close()
    with pytest.raises(RuntimeError, match="closed"):
        ckpt.save({"x": 1}, 4)

    good = Checkpointer(tmp_path / "ck")
    refused: list[tuple[dict[str, Any], str]] = [
        ({"loss": np.float64(0.5)}, "state['loss']"),
        ({"opt": {"fn": lambda: 0}}, "state['opt']['fn']"),
        ({"items": [1, {2: object()}]}, "state['items'][1][2]"),
    ]
    for state, where in refused:
        with pytest.raises(TypeError, match=re.escape(where) + ".*weights_only"):
            good.save(state, 1)
    with pytest.raises(ValueError):
        good.save({}, -1)
    assert not (tmp_path / "ck").exists()

    other_rank = Checkpointer(tmp_path / "rank1", rank=1, async_save=True)
    other_rank.save({"x": 1}, 1)
    other_rank.close()
    assert not (tmp_path / "rank1").exists()


def test_same_step_twice(tmp_path: Path) -> None:
    def value() -> Any:
        loaded = Checkpointer(tmp_path).load_latest()
        assert loaded is not None
        return loaded.step, loaded.state["v"]

    first = Checkpointer(tmp_path)
    first.save({"v": "a"}, 5)
    first.save({"v": "emergency"}, 5)  # this Checkpointer saved step 5 already: skipped
    first.close()
    assert value() == (5, "a")
    with Checkpointer(tmp_path) as next_attempt:  # a new attempt replaces its step 5
        next_attempt.save({"v": "b"}, 5)
    assert value() == (5, "b")

    # A writer killed between its rename and its COMMITTED marker left step 6 behind.
    half = tmp_path / _fs.step_dirname(6)
    half.mkdir()
    (half / "state.pt").write_bytes(b"half")
    assert Checkpointer(tmp_path).list_steps() == [5]
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save({"v": "c"}, 6)
    assert value() == (6, "c")
    assert sorted(os.listdir(tmp_path)) == [_fs.step_dirname(5), _fs.step_dirname(6)]


def _fork(child: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            child()
        finally:
            os._exit(0)
    return pid


def test_leftovers_of_dead_writers_are_swept(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path)
    ckpt.save({"v": 1}, 1)
    ckpt.wait()
    hour_ago = time.time() - 3600

    # A writer on this host that died mid-save: its pid is gone.
    dead_pid = _fork(lambda: os.mkdir(tmp_path / _fs.tmp_dirname(2)))
    os.waitpid(dead_pid, 0)
    # A live writer (maybe the previous attempt, still finishing): kept while fresh.
    read_fd, write_fd = os.pipe()

    def live_writer() -> None:
        for _ in range(2):
            os.mkdir(tmp_path / _fs.tmp_dirname(3))
        os.write(write_fd, b"x")
        time.sleep(60)

    live_pid = _fork(live_writer)
    try:
        os.read(read_fd, 1)
        live = sorted(n for n in os.listdir(tmp_path) if f".{live_pid}-" in n)
        assert len(live) == 2
        os.utime(tmp_path / live[1], (hour_ago, hour_ago))  # but not when it is stale
        (tmp_path / ".trash-step_000000000000-1234abcd").mkdir()
        old_half, fresh_half = tmp_path / _fs.step_dirname(7), tmp_path / _fs.step_dirname(8)
        for folder in (old_half, fresh_half):
            folder.mkdir()
            (folder / "state.pt").write_bytes(b"")
        for path in (old_half / "state.pt", old_half):
            os.utime(path, (hour_ago, hour_ago))

        ckpt.save({"v": 4}, 4)
        ckpt.close()
        assert sorted(os.listdir(tmp_path)) == sorted(
            [live[0], _fs.step_dirname(1), _fs.step_dirname(4), fresh_half.name]
        )
    finally:
        os.kill(live_pid, signal.SIGKILL)
        os.waitpid(live_pid, 0)


def test_a_failed_deletion_does_not_stop_pruning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warned: list[str]
) -> None:
    real_retire = _fs.retire
    failures = iter([True])

    def flaky_retire(path: Path) -> Path:
        if path.name == _fs.step_dirname(1) and next(failures, False):
            raise PermissionError(13, "Permission denied", str(path))
        return real_retire(path)

    monkeypatch.setattr(_fs, "retire", flaky_retire)
    with Checkpointer(tmp_path, keep_last=2) as ckpt:
        for step in (1, 2, 3):
            ckpt.save({"v": step}, step)
            ckpt.wait()
        assert ckpt.list_steps() == [1, 2, 3]
        assert any("could not delete old checkpoint" in line for line in warned)
        ckpt.save({"v": 4}, 4)
        ckpt.wait()
        assert ckpt.list_steps() == [3, 4]


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGES: dict[str, Callable[[Path], object]] = {
    "flipped byte": lambda f: _flip_byte(f / "state.pt"),
    "truncated": lambda f: os.truncate(f / "state.pt", 100),
    "missing file": lambda f: os.unlink(f / "state.pt"),
    "garbage manifest": lambda f: (f / "manifest.json").write_text("{not json"),
}
REASONS = {
    "flipped byte": "state.pt does not match its sha256",
    "truncated": "state.pt is 100 bytes",
    "missing file": "state.pt is missing",
    "garbage manifest": "manifest.json is unreadable",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_newest_checkpoint_falls_back(
    damage: str, tmp_path: Path, warned: list[str]
) -> None:
    with Checkpointer(tmp_path) as ckpt:
        ckpt.save({"w": torch.arange(100_000.0), "v": 1}, 1)
        ckpt.save({"w": torch.arange(100_000.0) * 2, "v": 2}, 2)
    DAMAGES[damage](tmp_path / _fs.step_dirname(2))

    loaded = Checkpointer(tmp_path).load_latest()
    assert loaded is not None and loaded.step == 1 and loaded.state["v"] == 1
    assert len(warned) == 1
    assert str(tmp_path / _fs.step_dirname(2)) in warned[0] and REASONS[damage] in warned[0]

    DAMAGES[damage](tmp_path / _fs.step_dirname(1))
    assert Checkpointer(tmp_path).load_latest() is None
    assert "no usable checkpoint among the 2" in warned[-1]


class Payload:
    """Unpickling it runs a shell command, as a crafted checkpoint would."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def commit_by_hand(folder: Path, step: int, kind: str) -> None:
    """Give ``folder`` a manifest that matches its files (as the documented format), and commit."""
    files = {
        p.name: {"size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in sorted(folder.iterdir())
        if p.name not in ("manifest.json", "COMMITTED")
    }
    manifest = {
        "format": "phalanx-checkpoint",
        "format_version": 1,
        "kind": kind,
        "step": step,
        "files": files,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "COMMITTED").touch()


def test_a_malicious_pickle_is_refused_and_never_run(tmp_path: Path, warned: list[str]) -> None:
    directory, marker = tmp_path / "ck", tmp_path / "pwned"
    with Checkpointer(directory) as ckpt:
        ckpt.save({"v": 1}, 1)
    evil = directory / _fs.step_dirname(2)
    evil.mkdir()
    torch.save({"model": Payload(marker)}, evil / "state.pt")
    commit_by_hand(evil, 2, "replicated")  # its sha256 matches: only weights_only stands guard

    loaded = Checkpointer(directory).load_latest()
    assert loaded is not None and loaded.step == 1
    assert not marker.exists()
    assert warned[0] == (
        f"checkpoint {evil} is unusable (state.pt does not load: weights_only=True refused "
        "it: Trying to load unsupported GLOBAL posix.system whose module posix is blocked.); "
        "trying the one before it"
    )

    shutil.rmtree(directory / _fs.step_dirname(1))
    assert Checkpointer(directory).load_latest() is None
    assert not marker.exists()

    # The payload is armed: a plain torch.load would have run it.
    armed = tmp_path / "armed"
    torch.save({"model": Payload(armed)}, tmp_path / "armed.pt")
    torch.load(tmp_path / "armed.pt", weights_only=False)
    assert armed.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_sharded_checkpoints_in_one_process(tmp_path: Path, warned: list[str]) -> None:
    import torch.distributed.checkpoint as dcp

    directory, marker = tmp_path / "ck", tmp_path / "pwned"

    def state(step: int) -> dict[str, Any]:
        return {"w": torch.arange(12.0).reshape(3, 4) * step, "epoch": step, "note": f"s{step}"}

    def blank() -> dict[str, Any]:
        return {"w": torch.zeros(3, 4), "epoch": 0, "note": ""}

    with Checkpointer(directory, keep_last=2) as ckpt:
        for step in (1, 2, 3):
            ckpt.save_sharded(state(step), step)
        ckpt.wait()
        assert ckpt.list_steps() == [2, 3]
        target = blank()
        loaded = ckpt.load_sharded_latest(target)
        assert loaded is not None and loaded.step == 3 and loaded.state is target
        assert_same(target, state(3))
        files = json.loads((loaded.path / "manifest.json").read_text())["files"]
        assert ".metadata" in files and any(n.endswith(".distcp") for n in files)
        with pytest.raises(RuntimeError, match=re.escape("rank 0: state['loss'] is a numpy")):
            ckpt.save_sharded({"loss": np.float64(1.0)}, 9)
        assert ckpt.list_steps() == [2, 3]

    # Crafted .metadata (DCP reads it with plain pickle) with a matching manifest.
    bad_metadata = directory / _fs.step_dirname(4)
    shutil.copytree(directory / _fs.step_dirname(3), bad_metadata)
    (bad_metadata / "COMMITTED").unlink()
    (bad_metadata / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    commit_by_hand(bad_metadata, 4, "sharded")
    # A crafted non-tensor value (DCP unpickles those with weights_only=False).
    bad_value = directory / _fs.step_dirname(5)
    evil_state = {**state(5), "note": Payload(marker)}
    dcp.save(evil_state, checkpoint_id=bad_value, no_dist=True)
    commit_by_hand(bad_value, 5, "sharded")

    target = blank()
    loaded = Checkpointer(directory).load_sharded_latest(target)
    assert loaded is not None and loaded.step == 3
    assert_same(target, state(3))
    assert not marker.exists()
    out = "\n".join(warned)
    assert f"{bad_value} is unusable" in out and f"{bad_metadata} is unusable" in out
    assert "posix.system is not allowed" in out


def _crash_state(bases: list[torch.Tensor], step: int) -> dict[str, Any]:
    return {
        "model": {"w": bases[step % len(bases)], "b": torch.full((4,), float(step))},
        "step": step,
        "tag": f"state-{step}",
    }


def _keep_saving(
    directory: Path, start: int, async_save: bool, bases: list[torch.Tensor], errors: Path
) -> NoReturn:
    """A forked writer: save step after step until killed."""
    try:
        torch.set_num_threads(1)  # no OpenMP pool in a forked child
        ckpt = Checkpointer(directory, keep_last=3, async_save=async_save, rank=0)
        step = start
        while True:
            ckpt.save(_crash_state(bases, step), step)
            step += 1
    except BaseException:
        errors.write_text(traceback.format_exc())
    finally:
        os._exit(1)


@pytest.mark.slow
def test_a_writer_killed_at_any_instant_leaves_only_whole_checkpoints(
    tmp_path: Path, warned: list[str]
) -> None:
    directory, errors = tmp_path / "ck", tmp_path / "child-error.txt"
    generator = torch.Generator().manual_seed(0)
    bases = [torch.randn(1_500_000, generator=generator) for _ in range(4)]  # 6 MB each
    with Checkpointer(tmp_path / "calibrate") as ckpt:
        times = []
        for step in range(3):
            start = time.perf_counter()
            ckpt.save(_crash_state(bases, step), step)
            times.append(time.perf_counter() - start)
    # A save into the page cache can take a few ms; a forked writer on a busy
    # machine needs longer to get going, so the window has a floor, or every
    # kill would land before the first commit and nothing would be exercised.
    duration = max(sorted(times)[1], 0.1)

    rng = random.Random(1)
    kills, killed_mid_write, newest = 100, 0, -1
    seen_steps: set[int] = set()
    for trial in range(kills):
        steps = Checkpointer(directory).list_steps()
        # Mostly new steps; every third writer re-saves the newest (the replace path).
        start = steps[-1] + (0 if trial % 3 == 0 else 1) if steps else 0
        pid = os.fork()
        if pid == 0:
            _keep_saving(directory, start, trial % 2 == 1, bases, errors)
        # Up to 1.5 saves: the kill lands anywhere in the first save, its commit,
        # its background pruning, or the second save.
        time.sleep(rng.uniform(0, 1.5 * duration))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), errors.read_text() if errors.exists() else status
        if directory.exists() and any(f".{pid}-" in n for n in os.listdir(directory)):
            killed_mid_write += 1  # its own .tmp- folder is there: killed while writing

        loaded = Checkpointer(directory).load_latest()
        if loaded is None:
            assert Checkpointer(directory).list_steps() == []
            continue
        expected = _crash_state(bases, loaded.step)
        assert_same(loaded.state, expected, f"trial {trial}, step {loaded.step}")
        newest = max(newest, loaded.step)
        seen_steps.add(loaded.step)

    assert warned == []  # not one damaged checkpoint seen
    assert killed_mid_write >= 20, (killed_mid_write, duration)
    assert len(seen_steps) >= 5, (seen_steps, duration)

    # The next save clears what the killed writers left behind.
    final = newest + 1
    with Checkpointer(directory, keep_last=3) as ckpt:
        ckpt.save(_crash_state(bases, final), final)
        ckpt.wait()
        assert ckpt.list_steps()[-1] == final and len(ckpt.list_steps()) == 3
    left = [n for n in os.listdir(directory) if not n.startswith("step_")]
    assert left == []


WORKER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from phalanx.train import Checkpointer, cleanup, init

    out, directory = Path(sys.argv[1]), Path(sys.argv[2])
    ctx = init()
    mesh = init_device_mesh("cpu", (ctx.world_size,))

    def full(step):
        return torch.arange(32.0).reshape(8, 4) * step

    def state(step):
        w = distribute_tensor(full(step), mesh, [Shard(0)])
        return {"w": w, "b": torch.full((3,), float(step)), "epoch": step, "note": f"s{step}"}

    ckpt = Checkpointer(directory, keep_last=2)
    for step in (1, 2, 3):
        ckpt.save_sharded(state(step), step)
    ckpt.wait()
    dist.barrier()
    record = {"steps": ckpt.list_steps(), "local_rows": state(1)["w"].to_local().shape[0]}

    target = state(0)
    loaded = ckpt.load_sharded_latest(target)
    record["loaded"] = loaded.step
    record["w_ok"] = torch.equal(target["w"].full_tensor(), full(3))
    record["rest"] = [target["b"].tolist(), target["epoch"], target["note"]]
    record["files"] = sorted(json.loads((loaded.path / "manifest.json").read_text())["files"])

    # Rank 0 damages a file rank 1 wrote; both ranks must fall back to the same step.
    dist.barrier()
    if ctx.rank == 0:
        shard = sorted((directory / "step_000000000003").glob("__1_*.distcp"))[0]
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    dist.barrier()
    target = state(0)
    loaded = ckpt.load_sharded_latest(target)
    record["fallback"] = loaded.step
    record["fallback_ok"] = torch.equal(target["w"].full_tensor(), full(2))
    ckpt.close()

    # Replicated checkpoints: a step that fails on one rank only is skipped by all.
    from phalanx.train.checkpoint.checkpointer import InvalidCheckpoint
    rep = Checkpointer(directory / "replicated", keep_last=3)
    for step in (1, 2):
        rep.save({"x": torch.tensor([float(step)])}, step)
    rep.close()
    dist.barrier()
    if ctx.rank == 1:
        original = Checkpointer._load
        def read_error_on_step_2(folder, step, map_location):
            if step == 2:
                raise InvalidCheckpoint("simulated read error on rank 1")
            return original(folder, step, map_location)
        Checkpointer._load = staticmethod(read_error_on_step_2)
    agreed = rep.load_latest()
    record["agreed"] = [agreed.step, agreed.state["x"].item()]
    del target, loaded, mesh
    cleanup()
    (out / str(ctx.rank)).write_text(json.dumps(record))
    """
)


@pytest.mark.slow
def test_sharded_save_and_load_with_two_gloo_processes(tmp_path: Path) -> None:
    script, out, directory = tmp_path / "worker.py", tmp_path / "out", tmp_path / "ck"
    script.write_text(WORKER)
    out.mkdir()
    proc = torchrun(script, str(out), str(directory))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    records = {int(p.name): json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(records) == [0, 1]
    for record in records.values():
        assert record["steps"] == [2, 3]
        assert record["local_rows"] == 4  # each rank held, and wrote, half of w
        assert record["loaded"] == 3 and record["w_ok"]
        assert record["rest"] == [[3.0, 3.0, 3.0], 3, "s3"]
        assert record["fallback"] == 2 and record["fallback_ok"]
        assert record["agreed"] == [1, 1.0]  # rank 0 could read step 2; rank 1 could not
    files = records[0]["files"]
    assert ".metadata" in files
    assert any(f.startswith("__0_") for f in files) and any(f.startswith("__1_") for f in files)
    assert "step_000000000003 is unusable" in proc.stdout and "sha256" in proc.stdout
