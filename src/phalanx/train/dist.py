"""Process-group set-up from the launcher's environment.

A script calls :func:`init` once at the start and :func:`cleanup` at the end.
:func:`init` reads the variables torchrun sets (phalanx's launcher sets the
same ones, see :mod:`phalanx.launch`):

=====================  ==========================================================
``RANK``               global rank, default 0
``WORLD_SIZE``         number of processes, default 1
``LOCAL_RANK``         rank within the node, default 0; the CUDA device used
``LOCAL_WORLD_SIZE``   processes on this node, default 1
``NODE_RANK``          node index; falls back to torchrun's ``GROUP_RANK``, then 0
``MASTER_ADDR/PORT``   rendezvous address, required when ``WORLD_SIZE`` > 1
=====================  ==========================================================

With none of them set (a plain ``python train.py``) the run is one process and
no process group is created, so the same script runs anywhere.

With the ``nccl`` backend each rank prints one line, ``phalanx: NCCL <version> ·
network IB (mlx5_0:1) · peers P2P``, read from NCCL's own INFO output
(:mod:`phalanx.train.nccl`; untested on a GPU so far).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from phalanx.errors import PhalanxError
from phalanx.train.nccl import describe, finish_capture, start_capture

__all__ = ["DistContext", "all_reduce_sum", "cleanup", "init"]


@dataclass(frozen=True, kw_only=True)
class DistContext:
    """Where this process stands in the job.

    Attributes:
        rank: Global rank, ``0 … world_size-1``.
        world_size: Number of processes in the job.
        local_rank: Rank within this node.
        local_world_size: Processes on this node.
        node_rank: This node's index.
        device: The device this process computes on (``cuda:<local_rank>`` or ``cpu``).
        backend: The process-group backend (``nccl`` or ``gloo``), chosen even
            when no group is created.
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        """Whether this is global rank 0, the process that writes shared outputs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether there is more than one process (and so a process group)."""
        return self.world_size > 1


def _env_int(env: Mapping[str, str], *names: str, default: int) -> int:
    """The first of ``names`` set in ``env``, as an int, else ``default``."""
    for name in names:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            return int(raw)
        except ValueError:
            raise PhalanxError(
                f"environment variable {name}={raw!r} is not an integer; "
                "launch with torchrun or `phalanx run`, which set it"
            ) from None
    return default


def _read_env(env: Mapping[str, str]) -> tuple[int, int, int, int, int]:
    rank = _env_int(env, "RANK", default=0)
    world_size = _env_int(env, "WORLD_SIZE", default=1)
    local_rank = _env_int(env, "LOCAL_RANK", default=0)
    local_world_size = _env_int(env, "LOCAL_WORLD_SIZE", default=1)
    node_rank = _env_int(env, "NODE_RANK", "GROUP_RANK", default=0)
    if world_size < 1 or not 0 <= rank < world_size:
        raise PhalanxError(
            f"RANK={rank} and WORLD_SIZE={world_size} are inconsistent: "
            "need WORLD_SIZE >= 1 and 0 <= RANK < WORLD_SIZE"
        )
    if local_world_size < 1 or not 0 <= local_rank < local_world_size:
        raise PhalanxError(
            f"LOCAL_RANK={local_rank} and LOCAL_WORLD_SIZE={local_world_size} are inconsistent: "
            "need 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE"
        )
    if world_size > 1:
        missing = [n for n in ("MASTER_ADDR", "MASTER_PORT") if not env.get(n)]
        if missing:
            raise PhalanxError(
                f"WORLD_SIZE={world_size} but {' and '.join(missing)} not set; "
                "launch with torchrun or `phalanx run`, which set the rendezvous address"
            )
    return rank, world_size, local_rank, local_world_size, node_rank


def init(backend: str | None = None, timeout_s: float = 1800) -> DistContext:
    """Join the job: read the launcher's environment and create the process group.

    Args:
        backend: ``"nccl"``, ``"gloo"``, or ``None`` for ``nccl`` when CUDA is
            available and ``gloo`` otherwise.
        timeout_s: How long a collective may wait for the other ranks before
            failing, in seconds. The default (30 minutes) matches PyTorch's and
            leaves room for a slow first epoch; a hang then surfaces as an error.

    Returns:
        The process's :class:`DistContext`. On CUDA the current device is set to
        ``LOCAL_RANK`` before the group is created, so NCCL binds the right GPU.

    Raises:
        PhalanxError: The environment is malformed or inconsistent, or ``nccl``
            was asked for without CUDA.
    """
    rank, world_size, local_rank, local_world_size, node_rank = _read_env(os.environ)
    cuda = torch.cuda.is_available()
    if backend is None:
        backend = "nccl" if cuda else "gloo"
    if backend == "nccl" and not cuda:
        raise PhalanxError("backend 'nccl' needs CUDA, which is not available; use 'gloo'")

    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise PhalanxError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} "
                "CUDA device(s); use at most one process per GPU"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    if world_size > 1 and not dist.is_initialized():
        nccl = backend == "nccl"
        capture = start_capture(os.environ) if nccl else None
        try:
            dist.init_process_group(
                backend=backend,
                init_method="env://",
                timeout=timedelta(seconds=timeout_s),
                # Binding NCCL to the device up front lets it connect eagerly and
                # spares the "guessing device" warning on the first barrier.
                device_id=device if nccl else None,
            )
        finally:
            path = finish_capture(os.environ, capture)  # its variables gone even on failure
        if nccl:
            # One line per rank, in its own log: which NCCL, over which network.
            # Untested on a GPU so far (see phalanx.train.nccl).
            print(describe(nccl_version(), path), flush=True)
    return DistContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        device=device,
        backend=backend,
    )


def nccl_version() -> str:
    """The NCCL torch was built with, as ``2.27.3`` (a tuple in torch >= 1.12)."""
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def cleanup() -> None:
    """Destroy the default process group if there is one; safe to call again.

    Collects garbage first: a DDP model caught in a reference cycle holds the
    process group, whose gloo threads would otherwise outlive the destroy and
    can abort the interpreter at exit (see phalanx.launch._hook).
    """
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def all_reduce_sum(value: float, ctx: DistContext) -> float:
    """Sum ``value`` over every rank and return the total to each of them.

    A collective: every rank must call it, in the same order, or the others
    wait until the process group's timeout. In a one-process run it returns
    ``value`` unchanged.
    """
    if not ctx.distributed:
        return float(value)
    # On the process's own device because NCCL reduces only CUDA tensors;
    # float64 so that sums of large counts stay exact.
    t = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())
