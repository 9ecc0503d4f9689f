"""The hang watchdog: an attempt in which no rank makes progress is stopped.

A collective that never completes (a rank stuck in I/O, a deadlock, a peer
that died without closing its sockets) blocks every rank, silently, until the
process group's timeout, 30 minutes by default. With ``limits.stall_timeout``
set, the runner asks this watchdog every half second whether any rank has
shown a sign of life within that time: a heartbeat file written by
``phalanx.train.heartbeat()`` or a new line in its log. When none has, the
attempt is a hang: every rank is asked for its Python stacks (SIGUSR2, which
the worker hook turns into a faulthandler dump into the rank's log), then the
gang is stopped, and the root cause carries the stack of the rank that went
quiet first.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from phalanx.launch.rootcause import tail
from phalanx.workspace import JobPaths, RootCause

STACK_DUMP_WAIT_S = 1.0

__all__ = ["STACK_DUMP_WAIT_S", "Watchdog"]


class Watchdog:
    """Tracks the last sign of life of every rank of one attempt."""

    def __init__(self, paths: JobPaths, attempt: int, world_size: int, limit: float) -> None:
        self.paths = paths
        self.attempt = attempt
        self.world_size = world_size
        self.limit = limit
        self.started = time.time()

    def _last_activity(self, rank: int) -> float | None:
        """When the rank last showed life in this attempt; ``None`` if it has not yet."""
        times = []
        with contextlib.suppress(OSError):
            times.append(
                (self.paths.attempt_dir(self.attempt) / f"heartbeat_{rank}").stat().st_mtime
            )
        with contextlib.suppress(OSError):
            # The log is shared by attempts and created empty: only new lines count.
            stat = self.paths.rank_log(rank).stat()
            if stat.st_size > 0 and stat.st_mtime >= self.started:
                times.append(stat.st_mtime)
        return max(times, default=None)

    def stalled(self) -> bool:
        """Whether no rank has shown progress for ``limit`` seconds.

        The watchdog arms at the first sign of life of any rank: start-up
        (imports, rendezvous, building the model) can be long and silent, and
        ``limits.timeout`` and the process group's own timeout cover it.
        """
        seen = [t for t in map(self._last_activity, range(self.world_size)) if t is not None]
        return bool(seen) and time.time() - max(seen) > self.limit

    def quietest(self) -> int:
        """The rank whose last sign of life is oldest (ask before the stack dumps)."""
        return min(range(self.world_size), key=lambda r: self._last_activity(r) or 0.0)

    def root_cause(self, quietest: int) -> RootCause:
        """The hang, blamed on the rank that is not waiting in a collective.

        A hung collective shows as every rank but the culprit waiting inside
        ``torch.distributed``; the culprit's stack is elsewhere (I/O, a lock,
        a sleep). When the stacks cannot tell, the rank that went quiet first
        is blamed.
        """
        stacks = {rank: _main_stack(self.paths.rank_log(rank)) for rank in range(self.world_size)}
        outside = [rank for rank, stack in stacks.items() if stack and not _in_collective(stack)]
        # Telling only when the ranks outside are few: in a hang inside
        # backward (autograd) or behind a device sync, every stack is "outside".
        telling = bool(outside) and (len(outside) == 1 or 2 * len(outside) < self.world_size)
        culprit = outside[0] if telling else quietest
        why = "is not in a collective" if telling else "went quiet first (stacks undecided)"
        return RootCause(
            message=(
                f"hang: no rank made progress for {self.limit:.0f} s (limits.stall_timeout); "
                f"rank {culprit} {why}; each rank's stacks are at the end of its log"
            ),
            rank=culprit,
            traceback=stacks[culprit] or None,
            log_file=str(self.paths.rank_log(culprit)),
        )


def _main_stack(log_file: Path) -> str:
    """The stack faulthandler dumped last for the thread that took the signal (the main one)."""
    text = tail(log_file, lines=400)
    start = text.rfind("Current thread")
    if start < 0:
        return ""
    block = text[start:].split("\n\n", 1)[0]
    return "\n".join(
        line for line in block.splitlines() if line.startswith(("Current thread", "  File"))
    )


def _in_collective(stack: str) -> bool:
    """Whether the innermost frames are torch.distributed's (waiting for peers)."""
    frames = [line for line in stack.splitlines() if line.startswith("  File")]
    return any("torch/distributed/" in frame for frame in frames[:3])
