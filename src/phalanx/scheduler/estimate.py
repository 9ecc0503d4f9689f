"""When each waiting job should start, as far as time limits tell (Slurm's ``squeue --start``).

After a pass has decided (:func:`phalanx.scheduler.policy.decide`), the rest of
the queue is played forward in queue order: running jobs end by their
``limits.timeout`` (a job preempted in this pass, or leaving after a preemption,
by its grace's end if sooner: :func:`phalanx.scheduler.model.leaves_by`; the jobs
of a shared machine's other targets too, giving back only the machine's), and
each waiting job in turn starts at the first moment it fits, no earlier than
the job ahead of it, and then holds its nodes for its own ``limits.timeout``.
A job that holds nodes without a time limit holds them for good: a job that
needs them can never be promised a time, and neither can any job behind it
(their estimates are *unknown*, never invented).
A job that can never fit the target is skipped, as the pass skips it.

The estimate ignores backfilling (a job further back that starts sooner in a
gap): it is what the queue order alone promises, so a job may start before
its estimate, and later only when a job ahead asks for more time than it said
or a job of higher priority arrives.

An elastic target's estimates are all unknown: what it will have depends on its
autoscaler, not on time limits.

Cost: every end (of a running job, or of a waiting job played forward) is taken
from a heap once and followed by at most one placement, and each waiting job is
placed once more; so for R running and W waiting jobs a pass makes at most
R + 2W placements (each linear in the target's hosts) and O((R + W) log(R + W))
heap work: linear, never a pair of jobs against each other. Only the first
:data:`ESTIMATED` waiting jobs get an estimate (the rest are unknown).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping, Sequence

from phalanx.scheduler.model import Capacity, NodeGrant, QueuedJob, RunningJob
from phalanx.scheduler.placement import Free

ESTIMATED = 1000


def estimate_starts(
    capacity: Capacity,
    holding: Sequence[RunningJob],
    order: Sequence[QueuedJob],
    now: float,
    *,
    leaving: Mapping[str, float] | None = None,
    skip: Collection[str] = (),
) -> dict[str, float | None]:
    """Each job of ``order`` (the waiting jobs, in queue order) → when it should start
    (Unix seconds, whole), or ``None`` when the time limits cannot tell.

    Args:
        capacity: What the target has.
        holding: Jobs holding nodes now, those the pass just started included.
        order: The jobs that keep waiting, in queue order.
        now: The pass's time.
        leaving: Running jobs the pass preempts → when their devices are back (their
            grace's end; a job preempted by an earlier pass has it as ``ends_by``).
        skip: Jobs that never start here (they can never fit): unknown, and no turn.
    """
    free = Free.of(capacity, [job.nodes for job in holding])
    leaving = leaving or {}
    # (end, tie-break, nodes, whether another target of a shared machine holds them)
    ends: list[tuple[float, int, tuple[NodeGrant, ...], bool]] = []
    outside = capacity.machine.elsewhere if capacity.machine is not None else ()
    for i, held in enumerate([*holding, *outside]):
        end = min(leaving.get(held.name, math.inf), held.ends_by)
        if math.isfinite(end):
            heapq.heappush(ends, (end, i, held.nodes, i >= len(holding)))
    out: dict[str, float | None] = {}
    at = now
    known = True
    for count, job in enumerate(order):
        if job.name in skip or not known or count >= ESTIMATED:
            out[job.name] = None
            continue
        grant = free.place(job.request, capacity.spread)
        while grant is None and ends:
            end, _, nodes, away = heapq.heappop(ends)
            free.give(nodes, capacity, outside=away)
            at = max(at, end)
            while ends and ends[0][0] <= at:  # jobs ending at the same moment free theirs too
                _, _, nodes, away = heapq.heappop(ends)
                free.give(nodes, capacity, outside=away)
            grant = free.place(job.request, capacity.spread)
        if grant is None:  # it waits on nodes held without a time limit
            known = False
            out[job.name] = None
            continue
        out[job.name] = float(math.ceil(at))
        free.take(grant)
        if job.timeout is not None:
            heapq.heappush(ends, (at + job.timeout, len(holding) + len(outside) + count, grant,
                                  False))  # fmt: skip
    return out
