"""Helpers for training scripts; every one of them is optional.

An unmodified torchrun script runs under phalanx. A script that wants less
boilerplate uses::

    from phalanx.train import cleanup, get_logger, init

    ctx = init()                   # process group from the launcher's environment
    log = get_logger("train")      # "[rank R/W] ..." lines; INFO on rank 0 only
    try:
        ...                        # build, wrap in DDP if ctx.distributed, train
    finally:
        cleanup()

This package imports torch and nothing heavier.
"""

from phalanx.train.dist import DistContext, all_reduce_sum, cleanup, init
from phalanx.train.heartbeat import heartbeat
from phalanx.train.log import ALL_RANKS_ENV, get_logger
from phalanx.train.metrics import flush_metrics, log_metric, log_metrics
from phalanx.train.preemption import PREEMPTED_EXIT_CODE, PreemptionWatcher, watch_preemption
from phalanx.train.uploads import request_upload

__all__ = [
    "ALL_RANKS_ENV",
    "PREEMPTED_EXIT_CODE",
    "DistContext",
    "PreemptionWatcher",
    "all_reduce_sum",
    "cleanup",
    "flush_metrics",
    "get_logger",
    "heartbeat",
    "init",
    "log_metric",
    "log_metrics",
    "request_upload",
    "watch_preemption",
]

# Checkpoints (phalanx.train.checkpoint).
from phalanx.train.checkpoint import (
    CheckpointDiskFull,
    Checkpointer,
    LoadedCheckpoint,
    rng_state,
    set_rng_state,
)

__all__ += ["CheckpointDiskFull", "Checkpointer", "LoadedCheckpoint", "rng_state", "set_rng_state"]
