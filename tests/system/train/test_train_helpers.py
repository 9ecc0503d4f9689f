"""phalanx.train: init() from the launcher's environment, all_reduce_sum, rank-aware logging.

The distributed case runs real processes under torchrun with gloo on loopback.
"""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from conftest import LAUNCH_VARS, torchrun
from phalanx.errors import PhalanxError
from phalanx.train import DistContext, all_reduce_sum, cleanup, get_logger, init


@pytest.fixture
def no_launch_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_init_without_env_is_one_process_without_group(no_launch_env: pytest.MonkeyPatch) -> None:
    ctx = init()
    assert ctx == DistContext(
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        device=ctx.device,
        backend="nccl" if torch.cuda.is_available() else "gloo",
    )
    assert ctx.is_main and not ctx.distributed
    assert not dist.is_initialized()
    assert all_reduce_sum(2.5, ctx) == 2.5
    cleanup()
    cleanup()  # safe twice, and with no group at all


def test_node_rank_falls_back_to_group_rank(no_launch_env: pytest.MonkeyPatch) -> None:
    no_launch_env.setenv("GROUP_RANK", "3")
    assert init().node_rank == 3
    no_launch_env.setenv("NODE_RANK", "1")
    assert init().node_rank == 1


def test_init_rejects_a_malformed_environment(no_launch_env: pytest.MonkeyPatch) -> None:
    no_launch_env.setenv("WORLD_SIZE", "two")
    with pytest.raises(PhalanxError, match="WORLD_SIZE='two' is not an integer"):
        init()
    no_launch_env.setenv("WORLD_SIZE", "2")
    no_launch_env.setenv("RANK", "2")
    with pytest.raises(PhalanxError, match="RANK=2 and WORLD_SIZE=2"):
        init()
    no_launch_env.setenv("RANK", "1")
    with pytest.raises(PhalanxError, match="MASTER_ADDR and MASTER_PORT not set"):
        init()
    assert not dist.is_initialized()


def test_logger_prefix_and_rank_rules(
    no_launch_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = get_logger("phalanx-test")
    assert get_logger("phalanx-test") is log
    assert len(log.handlers) == 1  # idempotent

    no_launch_env.setenv("RANK", "1")
    no_launch_env.setenv("WORLD_SIZE", "2")
    log.info("info on rank one")
    log.warning("warning on rank one")
    out = capsys.readouterr().out
    assert "info on rank one" not in out
    assert "[rank 1/2]" in out and "WARNING phalanx-test: warning on rank one" in out

    no_launch_env.setenv("PHALANX_LOG_ALL_RANKS", "1")
    log.info("info everywhere")
    assert "[rank 1/2]" in capsys.readouterr().out

    no_launch_env.delenv("PHALANX_LOG_ALL_RANKS")
    no_launch_env.setenv("RANK", "0")
    log.info("info on rank zero")
    line = capsys.readouterr().out.strip()
    assert line.startswith("[rank 0/2] ") and line.endswith("INFO phalanx-test: info on rank zero")
    assert line.count("\n") == 0  # not propagated to the root logger too
    assert log.level == logging.INFO


WORKER = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import torch.distributed as dist
    from phalanx.train import all_reduce_sum, cleanup, get_logger, init

    out = Path(sys.argv[1])
    ctx = init()
    log = get_logger("worker")
    total = all_reduce_sum(float(ctx.rank + 1), ctx)
    log.info("info from %d", ctx.rank)
    log.warning("warning from %d", ctx.rank)
    record = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "is_main": ctx.is_main,
        "distributed": ctx.distributed,
        "group": dist.is_initialized() and dist.get_world_size(),
        "total": total,
        # The NCCL line's set-up is for nccl only: gloo leaves NCCL's variables alone.
        "nccl_env": sorted(k for k in os.environ if k.startswith("NCCL_DEBUG")),
    }
    cleanup()
    cleanup()
    (out / str(ctx.rank)).write_text(json.dumps(record))
    """
)


@pytest.mark.slow
def test_two_process_gloo_run(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "out"
    out.mkdir()
    proc = torchrun(script, str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    records = {int(p.name): json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(records) == [0, 1]
    for rank, rec in records.items():
        assert rec == {
            "rank": rank,
            "world_size": 2,
            "local_rank": rank,
            "local_world_size": 2,
            "node_rank": 0,
            "backend": "gloo",
            "device": "cpu",
            "is_main": rank == 0,
            "distributed": True,
            "group": 2,
            "total": 3.0,
            "nccl_env": [],
        }

    lines = proc.stdout.splitlines()
    assert not any("phalanx: NCCL" in ln for ln in lines)  # no NCCL line without nccl
    assert any(ln.startswith("[rank 0/2]") and "INFO worker: info from 0" in ln for ln in lines)
    assert not any("info from 1" in ln for ln in lines)
    for rank in (0, 1):
        assert any(
            ln.startswith(f"[rank {rank}/2]") and f"WARNING worker: warning from {rank}" in ln
            for ln in lines
        )
