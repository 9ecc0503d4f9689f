"""Turn a preemption notice (SIGTERM) into "save now, then leave on purpose".

Spot and low-priority nodes are told they will be taken away by a SIGTERM,
with a grace period (30 s on Azure) before the machine goes. phalanx forwards
the notice to every rank of the job. A script that wants to lose no work::

    from phalanx.train import Checkpointer, init, watch_preemption

    ctx = init()
    preemption = watch_preemption()
    for step in range(start, steps):
        train_step()
        if preemption.requested(ctx):      # every rank, same step: a collective
            checkpointer.save(state, step)
            checkpointer.wait()
            preemption.exit()              # exit code 143: "preempted", not "failed"

``requested()`` agrees across ranks (an all-reduce of each rank's flag), so
every rank stops at the same step even when the notice reached them at
different times, and no rank waits in a collective for one that already left.
The next attempt resumes from the checkpoint; preemptions have their own
budget (``retry.max_preemptions``) and do not use up ``retry.max_attempts``.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import NoReturn

import torch
import torch.distributed as dist

from phalanx.exitcodes import PREEMPTED_EXIT_CODE
from phalanx.train.dist import DistContext, cleanup
from phalanx.train.log import get_logger

__all__ = ["PREEMPTED_EXIT_CODE", "PreemptionWatcher", "watch_preemption"]

log = get_logger("phalanx.preemption")


class PreemptionWatcher:
    """Notes a preemption notice instead of dying of it.

    Args:
        signals: The notices to catch; SIGTERM is how spot evictions arrive.
        check_every: Make :meth:`requested` a real check (and a collective)
            only every this many calls, to keep its cost off most steps.
    """

    def __init__(
        self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,), check_every: int = 1
    ) -> None:
        if check_every < 1:
            raise ValueError(f"check_every must be at least 1; got {check_every}")
        self.check_every = check_every
        self._notified = False
        self._calls = 0
        for sig in signals:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self._notified:
            log.warning("received %s: will checkpoint and exit", signal.Signals(signum).name)
        self._notified = True

    @property
    def notified(self) -> bool:
        """Whether this process received the notice (no communication)."""
        return self._notified

    def requested(self, ctx: DistContext | None = None) -> bool:
        """Whether any rank received the notice. Call it on every rank at the same point.

        Args:
            ctx: The process group's context; without one (or in a one-process
                run) only this process's own flag counts.
        """
        self._calls += 1
        if self._calls % self.check_every:
            return False
        if ctx is None or not ctx.distributed:
            return self._notified
        flag = torch.tensor([1.0 if self._notified else 0.0], device=ctx.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def exit(self) -> NoReturn:
        """Leave the process group and exit with the preempted exit code."""
        log.warning("exiting after preemption notice (exit code %d)", PREEMPTED_EXIT_CODE)
        sys.stdout.flush()
        cleanup()
        sys.exit(PREEMPTED_EXIT_CODE)


_watcher: PreemptionWatcher | None = None


def watch_preemption(check_every: int = 1) -> PreemptionWatcher:
    """The process's preemption watcher, installed on first use."""
    global _watcher
    if _watcher is None:
        _watcher = PreemptionWatcher(check_every=check_every)
    return _watcher
