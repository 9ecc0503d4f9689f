"""The scheduling rule: which queued jobs start now, which running jobs make room.

:func:`decide` is one pass over a compute target's queue. It is a pure
function of the target's capacity, what runs, what waits and the time (and the
``retry.preemption_grace`` of each job it preempts, read from its spec), so the
same inputs always give the same decision.

The rule
--------
1. **Order.** Queued jobs are ordered by ``queue_settings.priority`` (high >
   medium > low), then ``job_tier`` (premium > standard > basic > spot), then
   submission time.
2. **Start in order.** Jobs start in that order while they fit on what is free.
3. **The first job that does not fit gets a reservation** (EASY backfilling,
   as Slurm's and Maui's backfill schedulers do). From the running jobs'
   ``limits.timeout`` the scheduler works out the earliest time it will fit
   (its *shadow time*) and what will be free then. A job further back may
   start now only if it fits now and either ends, by its own
   ``limits.timeout``, before the shadow time, or leaves the first job room
   at the shadow time. A job without ``limits.timeout`` is taken to run
   forever: it never ends "before" anything, and what it holds is never
   counted on. So a stream of small jobs can never push a big job back, and
   jobs with time limits still fill the gaps. Only the first blocked job
   holds a reservation; every job becomes the first in turn.
4. **Preemption.** When the first blocked job could fit by taking the place
   of running *preemptible* jobs (``job_tier: spot`` or ``priority: low``)
   that rank below it, the fewest such jobs are preempted, lowest priority
   and tier first, the most recently started first among equals (it lost the
   least work). They save through the preemption path and go back to the
   queue; the freed devices are held for the job they were preempted for.
   A job that is not preemptible is never preempted.
5. **Estimated start.** Every job that keeps waiting gets the time it should
   start by the queue order and the time limits, or *unknown*
   (:mod:`phalanx.scheduler.estimate`).
6. **Growth.** On an elastic cluster a job that does not fit today's nodes but
   fits what the cluster may still add waits for new nodes instead: no
   reservation, no preemption (:mod:`phalanx.scheduler.scaling`).
7. **A shared machine.** A local target's host is a share of this machine
   (``capacity.machine``), whose CPU slots, memory and launchers every local
   target's jobs draw from: a job fits only where both its target's share and
   what the machine has left have room. The other targets' jobs end by their
   time limits in the shadow time and the estimates, are never preempted from
   here, and a job they keep out is told which of them hold the machine. The
   first job in line of the other targets that only the machine keeps out
   (``machine.waiting``, first by the same order) is held for as the first
   blocked job is (rule 3): a job behind it here starts only where it does not
   delay it, so that no target's stream of small jobs starves another's big one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from phalanx.scheduler.estimate import estimate_starts
from phalanx.scheduler.model import (
    DEFAULT_GRACE_S,
    Capacity,
    Decision,
    Host,
    NodeGrant,
    QueuedJob,
    Request,
    RunningJob,
    gib,
    leaves_by,
)
from phalanx.scheduler.placement import Free, never_fits
from phalanx.scheduler.scaling import Grower, ceiling

# Above this many candidates, victims are chosen greedily instead of by trying every set.
_EXHAUSTIVE_VICTIMS = 12


@dataclass
class _Reservation:
    """The first blocked job and what it is promised."""

    job: QueuedJob
    shadow: float
    """When it will fit at the latest, as far as time limits tell (infinity: unknown)."""
    free_then: Free
    """What will be free at ``shadow``, less what later jobs were let take since."""

    def room_after(
        self, job: QueuedJob, grant: tuple[NodeGrant, ...], now: float, cap: Capacity
    ) -> Free | None:
        """What will be free at the shadow time if ``job`` starts now on ``grant``;
        ``None`` when that delays the reserved job."""
        ends = now + job.timeout if job.timeout is not None else math.inf
        if ends <= self.shadow < math.inf:
            return self.free_then
        after = self.free_then.copy()
        after.take(grant)
        return after if after.place(self.job.request, cap.spread) is not None else None

    def lets(self, job: QueuedJob, grant: tuple[NodeGrant, ...], now: float, cap: Capacity) -> bool:
        """Whether ``job`` may start now on ``grant`` without delaying the reserved job
        (counted as started if it may)."""
        after = self.room_after(job, grant, now, cap)
        if after is None:
            return False
        self.free_then = after
        return True


class _HeldMachine:
    """A shared machine held for a job of another of its targets (rule 7): the first in
    the common queue order of those that only the machine keeps out, or may
    (``Machine.waiting``). This target's jobs behind it start only where they do not
    delay it, by the rule a target's own first blocked job is held for; its GPUs are its
    own target's, so only the machine's CPU slots, memory and launchers count."""

    def __init__(self, capacity: Capacity) -> None:
        machine = capacity.machine
        assert machine is not None and machine.waiting
        self.job = min(machine.waiting, key=lambda j: j.key)
        self.named = f"job {self.job.name} on compute {self.job.target!r}"
        host = Host(machine.host, (), machine.cpus, machine.memory, launchers=machine.launchers)
        self._whole = Capacity(machine.host, (host,))
        self._elsewhere = machine.elsewhere
        self._reservation: _Reservation | None = None

    def room_after(
        self,
        job: QueuedJob,
        grant: tuple[NodeGrant, ...],
        holding: Sequence[RunningJob],
        now: float,
    ) -> Free | None:
        """:meth:`_Reservation.room_after` for the held job, on the machine as a whole."""
        if self._reservation is None:  # what runs now: every job ahead of it has started
            ending = [*holding, *self._elsewhere]
            request = replace(self.job.request, gpus=0)
            free = Free.of(self._whole, [r.nodes for r in ending])
            if free.place(request, False) is not None:
                shadow, then = now, free
            else:
                shadow, then = _shadow(self._whole, free, ending, request)
            self._reservation = _Reservation(replace(self.job, request=request), shadow, then)
        return self._reservation.room_after(job, grant, now, self._whole)

    def take(self, after: Free) -> None:
        """Count a job as started, with what :meth:`room_after` said is then free."""
        assert self._reservation is not None
        self._reservation.free_then = after


def decide(
    capacity: Capacity,
    running: Sequence[RunningJob],
    queued: Sequence[QueuedJob],
    now: float,
    *,
    grace: Callable[[str], float] = lambda name: DEFAULT_GRACE_S,
) -> Decision:
    """One scheduling pass over a target (see the module docstring for the rule).

    Args:
        capacity: What the target has.
        running: Jobs holding devices, those leaving after a preemption included.
        queued: Jobs waiting, in any order.
        now: The current time (``time.time()``), for time limits.
        grace: A running job's ``retry.preemption_grace``, asked of each job the pass
            preempts: its devices are back by the grace's end (``decision.leave_by``).

    Returns:
        The jobs to start with their nodes, the jobs to preempt, and for every
        job that keeps waiting its position and the reason.
    """
    decision = Decision()
    order = sorted(queued, key=lambda j: j.key)
    decision.position = {job.name: i + 1 for i, job in enumerate(order)}
    free = Free.of(capacity, [r.nodes for r in running])
    # Jobs started in this pass run too, for the shadow time of a later reservation.
    holding = list(running)
    reservation: _Reservation | None = None
    largest = ceiling(capacity)
    grower = Grower(capacity) if capacity.growth is not None else None
    growing: dict[str, int] = {}
    machine = capacity.machine
    held = _HeldMachine(capacity) if machine is not None and machine.waiting else None
    for job in order:
        never = never_fits(job.request, largest)
        if never is not None:
            decision.waiting[job.name] = f"cannot start: it {never}"
            continue
        grant = free.place(job.request, capacity.spread)
        if grant is None and reservation is None and grower is not None:
            waits_for = grower.claim(job, holding)
            if waits_for is not None:
                growing[job.name] = waits_for
                continue
        if grant is not None and grower is not None and not grower.leaves_room(holding, grant):
            # Today's nodes would go to it, and the cluster could not then grow enough for
            # the jobs ahead that wait for nodes: it waits its turn.
            ahead = decision.position[job.name] - 1
            decision.waiting[job.name] = grower.behind(job, ahead)
            continue
        if grant is not None and held is not None and job.key > held.job.key:
            machine_after = held.room_after(job, grant, holding, now)
            if machine_after is None:  # it would delay another target's job ahead of it
                ahead = decision.position[job.name] - 1
                decision.waiting[job.name] = _wait_reason(
                    capacity, job.request, free, ahead, held.named
                )
                continue
            if reservation is None or reservation.lets(job, grant, now, capacity):
                held.take(machine_after)
                _start(decision, free, holding, job, grant, now)
                continue
        elif reservation is None:
            if grant is not None:
                _start(decision, free, holding, job, grant, now)
                continue
            reservation = _reserve(decision, capacity, free, holding, job, now, grace)
            continue
        elif grant is not None and reservation.lets(job, grant, now, capacity):
            _start(decision, free, holding, job, grant, now)
            continue
        ahead = decision.position[job.name] - 1
        held_for = reservation.job.name if grant is not None and reservation is not None else None
        decision.waiting[job.name] = _wait_reason(capacity, job.request, free, ahead, held_for)
    if grower is not None:
        decision.wanted = grower.wanted(holding, reserved=reservation is not None)
        for name, waits_for in growing.items():
            job = next(j for j in order if j.name == name)
            expired = grower.expired(job, now)
            if expired is not None:
                decision.expired[name] = expired
            decision.waiting[name] = grower.reason(waits_for, decision.wanted, now)
    waits = [job for job in order if job.name in decision.waiting]
    if grower is None:
        decision.starts = estimate_starts(
            capacity,
            holding,
            waits,
            now,
            leaving=decision.leave_by,
            skip={j.name for j in waits if decision.waiting[j.name].startswith("cannot start")},
        )
    else:  # what an elastic target will have is its autoscaler's to say
        decision.starts = dict.fromkeys((j.name for j in waits), None)
    return decision


def _start(
    decision: Decision,
    free: Free,
    holding: list[RunningJob],
    job: QueuedJob,
    grant: tuple[NodeGrant, ...],
    now: float,
) -> None:
    decision.admit[job.name] = grant
    free.take(grant)
    ends = now + job.timeout if job.timeout is not None else math.inf
    holding.append(RunningJob(job.name, grant, job.priority, job.tier, ends, started=now))


def _reserve(
    decision: Decision,
    capacity: Capacity,
    free: Free,
    holding: list[RunningJob],
    job: QueuedJob,
    now: float,
    grace: Callable[[str], float],
) -> _Reservation:
    """Hold the future for the first job that does not fit, preempting for it if it may."""
    leaving = [r for r in holding if r.releasing]
    soon = free.copy()
    for r in leaving:
        soon.give(r.nodes, capacity)
    if leaving and soon.place(job.request, capacity.spread) is not None:
        names = ", ".join(sorted(r.name for r in leaving))
        decision.waiting[job.name] = f"waiting for preempted job(s) {names} to save and leave"
        return _Reservation(job, now, soon)
    victims = _victims(capacity, soon, holding, job)
    if victims:
        for victim in victims:
            decision.preempt[victim.name] = job.name
            decision.leave_by[victim.name] = leaves_by(now, grace(victim.name))
            soon.give(victim.nodes, capacity)
        names = ", ".join(v.name for v in victims)
        decision.waiting[job.name] = (
            f"preempting {names} (lower priority, preemptible) to make room; "
            f"needs {job.request.describe()}"
        )
        return _Reservation(job, now, soon)
    shadow, then = _shadow(capacity, free, holding, job.request)
    decision.waiting[job.name] = _wait_reason(capacity, job.request, free, 0, None)
    return _Reservation(job, shadow, then)


def _shadow(
    capacity: Capacity, free: Free, holding: Sequence[RunningJob], request: Request
) -> tuple[float, Free]:
    """The earliest time ``request`` fits as running jobs end by their time limits, and
    what is free then; infinity and what finite-limit jobs free, when no time limit tells.

    Jobs of the shared machine's other targets end too, giving back the machine's slots
    (they never give this target's own)."""
    then = free.copy()
    outside = capacity.machine.elsewhere if capacity.machine is not None else ()
    ending = sorted(
        [(job, False) for job in holding] + [(job, True) for job in outside],
        key=lambda pair: pair[0].ends_by,
    )
    for job, away in ending:
        if math.isinf(job.ends_by):
            break
        then.give(job.nodes, capacity, outside=away)
        if then.place(request, capacity.spread) is not None:
            # Jobs ending at the same moment free their share too.
            for other, other_away in ending:
                if other is not job and other.ends_by == job.ends_by:
                    then.give(other.nodes, capacity, outside=other_away)
            return job.ends_by, then
    return math.inf, then


def _victims(
    capacity: Capacity, free: Free, holding: Sequence[RunningJob], job: QueuedJob
) -> list[RunningJob]:
    """The fewest preemptible jobs ranked below ``job`` whose devices make it fit."""
    candidates = sorted(
        (
            r
            for r in holding
            if not r.releasing and r.preemptible and (r.priority, r.tier) < (job.priority, job.tier)
        ),
        key=lambda r: (r.priority, r.tier, -r.started, r.name),
    )
    if not candidates:
        return []
    everything = free.copy()
    for r in candidates:
        everything.give(r.nodes, capacity)
    if everything.place(job.request, capacity.spread) is None:
        return []  # even all of them would not make room
    if len(candidates) <= _EXHAUSTIVE_VICTIMS:
        for size in range(1, len(candidates) + 1):
            # Combinations come in candidate order: lowest-ranked sets first.
            for chosen in itertools.combinations(candidates, size):
                trial = free.copy()
                for r in chosen:
                    trial.give(r.nodes, capacity)
                if trial.place(job.request, capacity.spread) is not None:
                    return list(chosen)
    chosen_list: list[RunningJob] = []
    trial = free.copy()
    for r in candidates:
        chosen_list.append(r)
        trial.give(r.nodes, capacity)
        if trial.place(job.request, capacity.spread) is not None:
            # Drop any that turned out not to be needed, latest added kept.
            for extra in list(chosen_list[:-1]):
                without = free.copy()
                for keep in chosen_list:
                    if keep is not extra:
                        without.give(keep.nodes, capacity)
                if without.place(job.request, capacity.spread) is not None:
                    chosen_list.remove(extra)
            return chosen_list
    return []


def _wait_reason(
    capacity: Capacity, request: Request, free: Free, ahead: int, held_for: str | None
) -> str:
    """``needs 4 GPUs on 1 node; 2 GPUs free; 1 job ahead``, or where the machine's pool is
    what keeps the job out, ``needs 2 CPUs on 1 node; 0 of this machine's 2 CPU slots
    free, 2 held by job X on compute 'local'``."""
    machine = _machine_short(capacity, request, free)
    if machine is not None:
        have = machine
    elif request.gpus:
        have = f"{free.gpu_count()} GPU{'s' if free.gpu_count() != 1 else ''} free"
    else:
        have = f"{free.cpu_count():g} CPU{'s' if free.cpu_count() != 1 else ''} free"
    if machine is None and request.memory:
        have += f", {gib(free.memory_count())} memory free"
    counted = [free.launchers_left(h) for h in free.cpus]
    if machine is None and counted and None not in counted:
        launchers = sum(max(0, n or 0) for n in counted)
        if launchers < request.nodes:
            have += f", {launchers} launcher{'s' if launchers != 1 else ''} free"
    reason = f"needs {request.describe()}; {have}"
    if ahead:
        reason += f"; {ahead} job{'s' if ahead != 1 else ''} ahead"
    if held_for is not None:
        reason += f" (what is free is held for {held_for}, which is first in line)"
    return reason


def _machine_short(capacity: Capacity, request: Request, free: Free) -> str | None:
    """What of the shared machine ``request`` finds too little of, and which other targets'
    jobs hold it, when that (not the target's own share) keeps it out; else ``None``."""
    machine, left = capacity.machine, free.machine
    if machine is None or left is None or free.alone().place(request, capacity.spread) is None:
        return None
    if free.place(request, capacity.spread) is not None:  # it fits: held for a job ahead
        return None
    on_it = [
        (job, [node for node in job.nodes if node.host == machine.host])
        for job in machine.elsewhere
    ]
    if left.cpus + 1e-9 < request.cpus * request.nodes:
        have = f"{left.cpus:g} of this machine's {machine.cpus:g} CPU slots free"
        held = f"{sum(n.cpus for _, nodes in on_it for n in nodes):g}"
    elif left.memory < request.memory * request.nodes:
        have = f"{gib(max(0, left.memory))} of this machine's {gib(machine.memory)} memory free"
        held = gib(sum(n.memory for _, nodes in on_it for n in nodes))
    else:
        have = (
            f"{max(0, left.launchers)} of the {machine.launchers} launchers this machine "
            "runs at once free"
        )
        held = f"{sum(len(nodes) for _, nodes in on_it)}"
    by_target: dict[str, list[str]] = {}
    for job, nodes in on_it:
        if nodes:
            by_target.setdefault(job.target or "?", []).append(job.name)
    if not by_target:
        return have
    holders = []
    for target, names in sorted(by_target.items()):
        shown = ", ".join(sorted(names)[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else ""
        )
        holders.append(f"job{'s' if len(names) != 1 else ''} {shown} on compute {target!r}")
    return f"{have}, {held} held by {' and '.join(holders)}"
