"""The scheduling rule on its own: order, devices, backfill, preemption, and a random run.

These call the pure decision function (no processes): the end-to-end tests of
the queue, with real jobs, are in test_scheduler_jobs.py.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from phalanx.scheduler.model import (
    LEAVE_MARGIN_S,
    PRIORITIES,
    TIERS,
    Capacity,
    Host,
    Machine,
    NodeGrant,
    QueuedJob,
    Request,
    RunningJob,
    launchers_for,
)
from phalanx.scheduler.placement import Free, never_fits
from phalanx.scheduler.policy import decide

EIGHT = Capacity("box", (Host("box", tuple(str(i) for i in range(8)), cpus=32),))


def gpus(n: int, nodes: int = 1) -> Request:
    return Request(nodes=nodes, gpus=n)


def queued(name: str, req: Request, at: float = 0.0, **kw: object) -> QueuedJob:
    return QueuedJob(name, req, submitted=at, **kw)  # type: ignore[arg-type]


def running(name: str, devices: str, **kw: object) -> RunningJob:
    node = NodeGrant("box", tuple(devices.split(",")) if devices else ())
    return RunningJob(name, (node,), **kw)  # type: ignore[arg-type]


def test_jobs_start_in_priority_then_tier_then_submission_order() -> None:
    box = Capacity("box", (Host("box", ("0",)),))
    jobs = [
        queued("low-early", gpus(1), 1, priority=PRIORITIES["low"]),
        queued("medium-spot", gpus(1), 2, tier=TIERS["spot"]),
        queued("medium-late", gpus(1), 4),
        queued("medium-early", gpus(1), 3),
        queued("medium-premium", gpus(1), 5, tier=TIERS["premium"]),
        queued("high", gpus(1), 6, priority=PRIORITIES["high"]),
    ]
    decision = decide(box, [], jobs, now=10)
    assert list(decision.admit) == ["high"]
    order = sorted(decision.position, key=decision.position.__getitem__)
    assert order == [
        "high", "medium-premium", "medium-early", "medium-late", "medium-spot", "low-early"
    ]  # fmt: skip


def test_every_node_gets_disjoint_devices_lowest_first() -> None:
    decision = decide(
        EIGHT,
        [running("a", "0,1")],
        [queued("two-nodes", gpus(2, nodes=2)), queued("one", gpus(1), 1)],
        now=0,
    )
    nodes = decision.admit["two-nodes"]
    assert [n.gpus for n in nodes] == [("2", "3"), ("4", "5")]
    assert decision.admit["one"][0].gpus == ("6",)


def test_a_job_too_big_for_the_target_names_both_numbers() -> None:
    reason = never_fits(gpus(9), EIGHT)
    assert reason is not None and "9 GPUs" in reason and "has 8" in reason
    spread = Capacity("ray", (Host("a", ("0",)), Host("b", ("0",))), spread=True)
    assert never_fits(gpus(1, nodes=2), spread) is None
    three = never_fits(gpus(1, nodes=3), spread)
    assert three is not None and "3 nodes" in three and "has 2" in three
    cpu = Capacity("cpu", (Host("h", cpus=2),))
    too_many = never_fits(Request(nodes=1, cpus=4), cpu)
    assert too_many is not None and "4 CPUs" in too_many and "has 2" in too_many


def test_a_big_job_at_the_head_is_not_starved_by_small_ones() -> None:
    # 6 of 8 GPUs busy with no time limit; the head needs 4: nothing may take the 2 free.
    busy = [running("a", "0,1,2,3"), running("b", "4,5")]
    jobs = [queued("big", gpus(4), 1)] + [queued(f"small{i}", gpus(1), 2 + i) for i in range(5)]
    decision = decide(EIGHT, busy, jobs, now=0)
    assert decision.admit == {}
    assert "needs 4 GPU" in decision.waiting["big"] and "2 GPUs free" in decision.waiting["big"]
    assert "held for big" in decision.waiting["small0"]
    assert "5 jobs ahead" in decision.waiting["small4"]


def test_backfill_takes_only_what_cannot_delay_the_head() -> None:
    # b ends at t=100 (its limits.timeout); then the head (4 GPUs) fits on 2 + 2.
    busy = [running("a", "0,1,2,3"), running("b", "4,5", ends_by=100.0)]
    jobs = [
        queued("big", gpus(4), 1),
        queued("endless", gpus(1), 2),  # no limit: would hold a GPU big needs at t=100
        queued("long", gpus(1), 3, timeout=500.0),  # ends after 100: the same
        queued("short", gpus(2), 4, timeout=50.0),  # ends at 50 < 100: may run now
    ]
    decision = decide(EIGHT, busy, jobs, now=0)
    assert set(decision.admit) == {"short"}
    assert "held for big" in decision.waiting["endless"]
    assert "held for big" in decision.waiting["long"]
    # With room to spare at the shadow time, a job with no limit may take the spare.
    roomy = [running("a", "0,1", ends_by=100.0), running("b", "2,3,4,5")]
    decision = decide(EIGHT, roomy, [queued("big", gpus(3), 1), queued("x", gpus(1), 2)], now=0)
    # At t=100: 0,1 + 6,7 free = 4; big needs 3; x takes one of 6,7 and big still fits.
    assert set(decision.admit) == {"x"}


def test_the_fewest_lowest_preemptible_jobs_are_preempted_for_a_higher_one() -> None:
    low, spot = PRIORITIES["low"], TIERS["spot"]
    busy = [
        running("steady", "0,1,2,3"),  # medium/standard: never preempted
        running("low-small", "4", priority=low, started=5),
        running("low-big", "5,6", priority=low, started=1),
        running("spot", "7", tier=spot, started=9),
    ]
    decision = decide(EIGHT, busy, [queued("urgent", gpus(2), 1, priority=3)], now=10)
    # One job frees two: low-big alone (fewest), not low-small + spot.
    assert decision.preempt == {"low-big": "urgent"}
    assert "preempting low-big" in decision.waiting["urgent"]
    # While it leaves, nothing more is preempted and nobody takes its devices.
    leaving = [*busy[:2], running("low-big", "5,6", priority=low, releasing=True), busy[3]]
    later = decide(
        EIGHT, leaving, [queued("urgent", gpus(2), 1, priority=3), queued("x", gpus(1), 2)], 11
    )
    assert later.preempt == {} and later.admit == {}
    assert "to save and leave" in later.waiting["urgent"]


def test_non_preemptible_and_equal_rank_jobs_are_never_preempted() -> None:
    busy = [running("a", "0,1,2,3,4,5,6,7")]
    decision = decide(EIGHT, busy, [queued("high", gpus(1), 1, priority=3)], now=0)
    assert decision.preempt == {}
    spot = TIERS["spot"]
    busy = [running("s", "0,1,2,3,4,5,6,7", tier=spot)]
    decision = decide(EIGHT, busy, [queued("s2", gpus(1), 1, tier=spot)], now=0)
    assert decision.preempt == {}  # same rank: waits
    decision = decide(EIGHT, busy, [queued("std", gpus(1), 1)], now=0)
    assert decision.preempt == {"s": "std"}  # standard tier ranks above spot


def test_free_gives_devices_back_in_host_order() -> None:
    free = Free.of(EIGHT, [[NodeGrant("box", ("2", "5"))]])
    assert free.gpus["box"] == ["0", "1", "3", "4", "6", "7"]
    free.give([NodeGrant("box", ("5", "2"))], EIGHT)
    assert free.gpus["box"] == [str(i) for i in range(8)]


# A random run: submissions, completions, cancels and lost supervisors, with the
# scheduler's decisions carried out as the supervisors would (a preempted job
# leaves a few ticks later and goes back to the queue).


@dataclass
class _Sim:
    capacity: Capacity
    rng: random.Random
    now: float = 0.0
    queue: dict[str, QueuedJob] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    leave_at: dict[str, float] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    submitted_as: dict[str, QueuedJob] = field(default_factory=dict)
    submitted: int = 0

    def submit(self) -> None:
        self.submitted += 1
        name = f"j{self.submitted}"
        nodes = self.rng.choice([1, 1, 1, 2])
        request = Request(nodes=nodes, gpus=self.rng.choice([1, 1, 2, 4]))
        timeout = self.rng.choice([None, 20.0, 60.0])
        priority = self.rng.choice([1, 2, 2, 3])
        tier = self.rng.choice([1, 2, 3, 3, 4])
        self.queue[name] = self.submitted_as[name] = QueuedJob(
            name, request, self.now, priority, tier, timeout
        )

    def step(self) -> None:
        decision = decide(
            self.capacity, list(self.running.values()), list(self.queue.values()), self.now
        )
        for name, nodes in decision.admit.items():
            job = self.queue.pop(name)
            ends = self.now + job.timeout if job.timeout else math.inf
            self.running[name] = RunningJob(
                name, nodes, job.priority, job.tier, ends, started=self.now
            )
        for name in decision.preempt:
            job = self.running[name]
            assert job.preemptible and not job.releasing
            self.running[name] = RunningJob(
                name, job.nodes, job.priority, job.tier, self.now + 3, True, job.started
            )
            self.leave_at[name] = self.now + self.rng.choice([1, 2, 3])
        self.check(decision.preempt)

    def requeue(self, name: str) -> None:
        # As the real queue does: the job keeps its submission time and time limit.
        self.running.pop(name)
        self.leave_at.pop(name, None)
        self.queue[name] = self.submitted_as[name]

    def end(self, name: str) -> None:
        self.running.pop(name, None)
        self.queue.pop(name, None)
        self.leave_at.pop(name, None)
        self.ended.add(name)

    def tick(self) -> None:
        self.now += 1
        for name, at in list(self.leave_at.items()):
            if at <= self.now:
                self.requeue(name)
        for name, job in list(self.running.items()):
            if job.ends_by <= self.now and not job.releasing:
                self.end(name)  # its time limit
        event = self.rng.random()
        if event < 0.45:
            self.submit()
        elif event < 0.7 and self.running:
            self.end(self.rng.choice(sorted(self.running)))  # completed
        elif event < 0.8 and self.queue:
            self.end(self.rng.choice(sorted(self.queue)))  # canceled while queued
        elif event < 0.9 and self.running:
            # Its supervisor was killed: the job goes back to the queue.
            name = self.rng.choice(sorted(self.running))
            self.requeue(name)
        self.step()

    def check(self, preempting: dict[str, str]) -> None:
        held: dict[tuple[str, str], str] = {}
        for job in self.running.values():
            for node in job.nodes:
                for device in node.gpus:
                    key = (node.host, device)
                    assert key not in held, f"{key} held by {held[key]} and {job.name}"
                    held[key] = job.name
        assert len(held) <= self.capacity.gpus
        if not self.queue:
            return
        head = min(self.queue.values(), key=lambda j: j.key)
        if Free.of(self.capacity, [r.nodes for r in self.running.values()]).place(
            head.request, self.capacity.spread
        ):
            return  # it was not blocked by anything (e.g. waits for a higher job's room)
        # A blocked head that could preempt lower preemptible jobs is never left waiting.
        lower = [
            r
            for r in self.running.values()
            if r.preemptible and (r.priority, r.tier) < (head.priority, head.tier)
        ]
        free = Free.of(
            self.capacity,
            [r.nodes for r in self.running.values() if r not in lower and not r.releasing],
        )
        if free.place(head.request, self.capacity.spread) is None:
            return
        leaving = [r for r in self.running.values() if r.releasing]
        assert preempting or leaving, f"{head.name} waits behind lower jobs it could preempt"


def test_a_random_run_keeps_devices_disjoint_and_ends_every_job() -> None:
    for seed, capacity in itertools.product(
        range(4),
        [
            EIGHT,
            Capacity(
                "ray", tuple(Host(f"n{i}", ("0", "1", "2", "3")) for i in range(3)), spread=True
            ),
        ],
    ):
        sim = _Sim(capacity, random.Random(seed))
        for _ in range(300):
            sim.tick()
        # Stop submitting: every job still there ends.
        for _ in range(2000):
            if not sim.queue and not sim.running:
                break
            sim.now += 1
            for name, at in list(sim.leave_at.items()):
                if at <= sim.now:
                    sim.requeue(name)
            for name in sorted(sim.running):
                if not sim.running[name].releasing:
                    sim.end(name)
                    break
            sim.step()
        assert not sim.queue and not sim.running, (seed, capacity.target)
        assert len(sim.ended) == sim.submitted


def test_memory_is_counted_per_host_when_a_job_asks_for_it() -> None:
    gib = 2**30
    box = Capacity("box", (Host("box", ("0", "1"), cpus=8, memory=16 * gib),))
    busy = [RunningJob("a", (NodeGrant("box", ("0",), memory=12 * gib),))]
    wants = QueuedJob("b", Request(nodes=1, gpus=1, memory=8 * gib), submitted=0)
    decision = decide(box, busy, [wants], now=0)
    assert decision.admit == {}  # a GPU is free, the memory is not
    assert "8 GiB" in decision.waiting["b"] and "4 GiB memory free" in decision.waiting["b"]
    small = QueuedJob("c", Request(nodes=1, gpus=1, memory=4 * gib), submitted=0)
    assert decide(box, busy, [small], now=0).admit["c"][0].memory == 4 * gib
    too_big = never_fits(Request(nodes=1, memory=32 * gib), box)
    assert too_big is not None and "32 GiB" in too_big and "16 GiB" in too_big


def _elastic(live: int, max_nodes: int = 4, min_nodes: int = 0, **kw: object) -> Capacity:
    """A Ray cluster of ``live`` 1-GPU workers that its autoscaler may grow to ``max_nodes``."""
    from phalanx.scheduler.model import Growth

    node = Host("node", ("0",), cpus=8)
    hosts = tuple(Host(f"w{i}", ("0",), cpus=8) for i in range(live))
    growth = Growth(max_nodes, min_nodes, node, live=live, **kw)  # type: ignore[arg-type]
    return Capacity("gpu", hosts, spread=True, growth=growth)


def _on(name: str, *hosts: str, **kw: object) -> RunningJob:
    return RunningJob(name, tuple(NodeGrant(h, ("0",), 1.0) for h in hosts), **kw)  # type: ignore[arg-type]


def test_an_elastic_cluster_grows_for_waiting_jobs_in_order_within_its_max() -> None:
    """Jobs that fit what the cluster may add wait for nodes (no reservation), in queue
    order, until the max; the wanted count is what runs plus what they claimed."""
    jobs = [queued("a", gpus(1, nodes=2), 1), queued("b", gpus(1, nodes=1), 2),
            queued("c", gpus(1, nodes=2), 3)]  # fmt: skip
    decision = decide(_elastic(live=0, max_nodes=4), [], jobs, now=10)
    assert decision.admit == {}
    # a and b claim 3 new nodes; c would take the cluster past 4, so it waits as on a
    # fixed cluster (for a or b to end), and the whole cluster is wanted meanwhile.
    assert decision.wanted == 4
    assert decision.waiting["a"] == (
        "waiting for 2 nodes: cluster 0 → 4 of max 4, asking the cluster's autoscaler"
    )
    assert decision.waiting["b"].startswith("waiting for 1 node: cluster 0 → 4 of max 4")
    assert not decision.waiting["c"].startswith("waiting for")
    assert decide(_elastic(live=0, max_nodes=4), [], jobs[:2], now=10).wanted == 3
    # Asked of the autoscaler 40 s ago, with its reason for not coming.
    later = _elastic(live=0, max_nodes=4, requested=4, requested_at=0.0, trouble="quota")
    decision = decide(later, [], jobs, now=40)
    assert decision.waiting["a"] == (
        "waiting for 2 nodes: cluster 0 → 4 of max 4, requested 40 s ago; Ray's autoscaler: quota"
    )
    # Never fewer than min_nodes, never more than max_nodes.
    assert decide(_elastic(live=0, min_nodes=1), [], [], now=0).wanted == 1
    assert decide(_elastic(live=4), [_on("x", "w0", "w1", "w2", "w3")], jobs, 0).wanted == 4


def test_growth_comes_before_preemption_and_a_job_too_big_for_the_max_cannot_start() -> None:
    spot = _on("spot", "w0", tier=TIERS["spot"], started=1.0)
    urgent = queued("urgent", gpus(1, nodes=2), 5, priority=PRIORITIES["high"])
    decision = decide(_elastic(live=1, max_nodes=4), [spot], [urgent], now=10)
    assert decision.preempt == {} and decision.wanted == 3
    assert decision.waiting["urgent"].startswith("waiting for 2 nodes: cluster 1 → 3 of max 4")
    # At its max, the cluster cannot grow: the spot job is preempted as on a fixed one.
    decision = decide(_elastic(live=2, max_nodes=2), [spot], [urgent], now=10)
    assert decision.preempt == {"spot": "urgent"} and decision.wanted == 2
    huge = queued("huge", gpus(1, nodes=5), 1)
    decision = decide(_elastic(live=0, max_nodes=4), [], [huge], now=10)
    assert decision.waiting["huge"] == (
        "cannot start: it asks for 5 nodes on different machines but compute 'gpu' has 4"
    )


def test_todays_nodes_are_not_taken_from_a_job_that_waits_for_growth() -> None:
    """A 2-node job waits for the cluster (1 node live, max 2); a 1-node job behind it
    fits the live node, but taking it would leave the cluster no room to grow for the
    first: it waits its turn. With room to grow (max 3) it may start."""
    jobs = [queued("first", gpus(1, nodes=2), 1), queued("second", gpus(1, nodes=1), 2)]
    decision = decide(_elastic(live=1, max_nodes=2), [], jobs, now=10)
    assert decision.admit == {} and decision.wanted == 2
    assert decision.waiting["second"] == (
        "needs 1 GPU on 1 node; 1 job ahead waits for the cluster to grow, to at most 2 nodes"
    )
    decision = decide(_elastic(live=1, max_nodes=3), [], jobs, now=10)
    assert list(decision.admit) == ["second"] and decision.wanted == 3


def test_a_job_that_waited_its_whole_timeout_for_nodes_fails_with_the_reason() -> None:
    """Counted from when it began to wait for nodes (the scheduler keeps that), not from
    its time queued: a job not yet seen waiting never expires."""
    job = queued("slow", gpus(1, nodes=2), at=0.0, timeout=60.0)
    capacity = _elastic(live=0, requested=2, requested_at=100.0, trouble="no quota")
    assert decide(capacity, [], [job], now=1000).expired == {}
    job = queued("slow", gpus(1, nodes=2), at=0.0, timeout=60.0, waiting_since=100.0)
    assert decide(capacity, [], [job], now=150).expired == {}
    expired = decide(capacity, [], [job], now=161).expired["slow"]
    assert expired.startswith("waited its whole limits.timeout (60 s) for nodes")
    assert expired.endswith("(cluster 0 of max 4); Ray's autoscaler: no quota")
    # A job waiting for other jobs (not for nodes) is not failed for it.
    busy = _elastic(live=2, max_nodes=2)
    holder = _on("holder", "w0", "w1")
    assert decide(busy, [holder], [job], now=1000).expired == {}


def test_a_packed_job_needs_machines_that_hold_its_nodes_whole() -> None:
    """3 nodes of 5 CPUs on 8-CPU machines need 3 machines (not 15/8 → 2)."""
    from phalanx.scheduler.model import Growth
    from phalanx.scheduler.scaling import nodes_for

    node = Host("node", (), cpus=8)
    assert nodes_for(Request(nodes=3, cpus=5), node, spread=False) == 3
    assert nodes_for(Request(nodes=4, cpus=4), node, spread=False) == 2
    four = Host("node", ("0", "1", "2", "3"), cpus=32)
    assert nodes_for(Request(nodes=4, gpus=3, cpus=1), four, spread=False) == 4
    packed = Capacity("gpu", (), spread=False, growth=Growth(4, 0, node, live=0))
    job = queued("packed", Request(nodes=3, cpus=5))
    assert decide(packed, [], [job], now=0).wanted == 3


def test_a_low_priority_target_counts_only_the_nodes_that_carry_its_marker() -> None:
    """A probe's reading has dedicated nodes, low-priority ones (with the marker
    resource) and a head: each tier's target sees only its own, and asks Ray for the
    marker with every bundle."""
    import pytest
    from pydantic import ValidationError

    from phalanx.kinds.ray.scaling import count_nodes, of_tier
    from phalanx.kinds.ray.settings import LOW_PRIORITY_RESOURCE, RayTarget

    reading = [
        {"host": "a", "cpus": 1.0, "gpus": 0},
        {"host": "b", "cpus": 1.0, "gpus": 0, "low_priority": True},
        {"host": "c", "cpus": 1.0, "gpus": 0, "low_priority": True},
        {"host": "head", "cpus": 0.0, "gpus": 0, "low_priority": False},
    ]
    spot = RayTarget(name="s", address="ray://h:1", max_nodes=2, node_cpus=1, tier="LowPriority")
    dedicated = RayTarget(name="d", address="ray://h:1", max_nodes=2, node_cpus=1)
    assert (spot.tier, dedicated.tier) == ("low_priority", "dedicated")
    assert list(spot.marker()) == [LOW_PRIORITY_RESOURCE] and dedicated.marker() == {}
    assert [h["host"] for h in of_tier(reading, spot)] == ["b", "c"]
    assert [h["host"] for h in of_tier(reading, dedicated)] == ["a", "head"]
    assert (count_nodes(reading, spot), count_nodes(reading, dedicated)) == (2, 1)
    with pytest.raises(ValidationError, match="tier"):
        RayTarget(name="x", address="ray://h:1", tier="gold")


def test_every_waiting_job_gets_a_start_from_the_time_limits_ahead_or_unknown() -> None:
    holding = [
        running("limited", "0,1,2,3", ends_by=160.0),  # started at 100 with timeout 60
        running("forever", "4,5,6,7"),  # no time limit: holds its GPUs for good
    ]
    jobs = [
        queued("four", gpus(4), 1, timeout=30.0),  # gets limited's GPUs at 160
        queued("two", gpus(2), 2, timeout=30.0),  # after four (in order), when four ends
        queued("eight", gpus(8), 3),  # needs forever's GPUs: unknown
        queued("one", gpus(1), 4),  # behind an unknown: unknown too
        queued("huge", gpus(9), 0),  # never fits: skipped, no estimate
    ]
    decision = decide(EIGHT, holding, jobs, now=120.0)
    assert decision.starts == {
        "four": 160.0, "two": 190.0, "eight": None, "one": None, "huge": None,
    }  # fmt: skip


def test_a_preempted_job_frees_its_devices_for_the_estimate_by_its_graces_end() -> None:
    holding = [running("spot", "0,1,2,3,4,5,6,7", tier=TIERS["spot"])]
    jobs = [
        queued("urgent", gpus(8), 1, priority=PRIORITIES["high"], timeout=100.0),
        queued("next", gpus(8), 2),
    ]
    asked: list[str] = []

    def grace(name: str) -> float:
        asked.append(name)
        return 120.0

    decision = decide(EIGHT, holding, jobs, now=50.0, grace=grace)
    assert decision.preempt == {"spot": "urgent"} and asked == ["spot"]
    # Its devices are back by its grace's end (and the margin to give them back), not now.
    back = 50.0 + 120.0 + LEAVE_MARGIN_S
    assert decision.leave_by == {"spot": back}
    assert decision.starts == {"urgent": back, "next": back + 100.0}
    # The next pass reads it back as leaving by then (ledger.holding): the same estimate,
    # so urgent's start does not jump from one pass to the next.
    leaving = [running("spot", "0,1,2,3,4,5,6,7", tier=TIERS["spot"], releasing=True,
                       ends_by=back)]  # fmt: skip
    later = decide(EIGHT, leaving, jobs, now=51.0, grace=grace)
    assert later.preempt == {} and asked == ["spot"]
    assert later.starts == decision.starts
    # A job whose own time limit ends before its grace would leaves by its limit.
    short = [running("spot", "0,1,2,3,4,5,6,7", tier=TIERS["spot"], ends_by=60.0)]
    assert decide(EIGHT, short, jobs, now=50.0, grace=grace).starts["urgent"] == 60.0


# Local targets of one machine: each is a queue, the machine's CPU slots one pool.


def _machine_target(name: str, share: float, *elsewhere: RunningJob, slots: float = 2) -> Capacity:
    """Target ``name`` of a machine of ``slots`` CPU slots, holding at most ``share`` of
    them, while ``elsewhere`` (jobs of its other targets) hold what they hold."""
    machine = Machine("m", slots, 0, launchers_for(slots), elsewhere)
    return Capacity(name, (Host("m", (), share, 0, launchers_for(share)),), machine=machine)


def test_a_machine_s_slots_are_one_pool_whichever_target_a_job_names() -> None:
    whole = queued("whole", Request(nodes=1, cpus=2))
    on_local = RunningJob("first", (NodeGrant("m", cpus=2.0),), ends_by=50.0, target="local")
    decision = decide(_machine_target("cpu-cluster", 2, on_local), [], [whole], now=0)
    assert decision.admit == {}  # its own share is free; the machine's is not
    assert decision.waiting["whole"] == (
        "needs 2 CPUs on 1 node; 0 of this machine's 2 CPU slots free, 2 held by job first "
        "on compute 'local'"
    )
    assert decision.starts["whole"] == 50.0  # when the other target's job ends by its limit
    assert never_fits(whole.request, _machine_target("cpu-cluster", 2, on_local)) is None
    alone = decide(_machine_target("cpu-cluster", 2), [], [whole], now=0)
    assert alone.admit["whole"] == (NodeGrant("m", cpus=2.0),)
    # A share caps the target's own jobs whatever the machine has free.
    one = [queued("a", Request(nodes=1, cpus=1)), queued("b", Request(nodes=1, cpus=1), 1)]
    capped = decide(_machine_target("team", 1, slots=4), [], one, now=0)
    assert list(capped.admit) == ["a"]
    assert capped.waiting["b"] == "needs 1 CPU on 1 node; 0 CPUs free, 0 launchers free"
    # Launchers are the machine's too: a GPU job counts no slot but runs a launcher.
    gpu_jobs = tuple(
        RunningJob(f"g{i}", (NodeGrant("m", ("0",)),), target="gpubox") for i in range(2)
    )
    light = queued("light", Request(nodes=1, cpus=0.5))
    waits = decide(_machine_target("local", 2, *gpu_jobs), [], [light], now=0)
    assert waits.waiting["light"] == (
        "needs 0.5 CPUs on 1 node; 0 of the 2 launchers this machine runs at once free, "
        "2 held by jobs g0, g1 on compute 'gpubox'"
    )


def test_targets_sharing_a_machine_at_random_never_hold_more_than_it_has() -> None:
    """Two targets of a 4-slot machine (one may hold at most 2), scheduled one after the
    other as the scheduler's rounds do, with random 1-3-slot jobs: the machine's slots
    and launchers are never over-given, a share never exceeded, and every job ends."""
    rng = random.Random(5)
    slots, shares = 4.0, {"local": 4.0, "team": 2.0}
    queues: dict[str, dict[str, QueuedJob]] = {t: {} for t in shares}
    running: dict[str, dict[str, RunningJob]] = {t: {} for t in shares}
    ended = 0
    for tick in range(3000):
        now = float(tick)
        if tick >= 300 and not any(queues.values()) and not any(running.values()):
            break  # every job ended
        for jobs in running.values():
            for name, job in list(jobs.items()):
                if job.ends_by <= now or rng.random() < 0.1:
                    del jobs[name]
                    ended += 1
        if tick < 300 and rng.random() < 0.4:
            target = rng.choice(sorted(shares))
            cpus = float(rng.randint(1, int(shares[target])))
            name = f"j{tick}"
            queues[target][name] = queued(name, Request(nodes=1, cpus=cpus), now,
                                          timeout=rng.choice([None, 5.0, 20.0]))  # fmt: skip
        for target, share in shares.items():
            elsewhere = [j for t, jobs in running.items() if t != target for j in jobs.values()]
            capacity = _machine_target(target, share, *elsewhere, slots=slots)
            decision = decide(capacity, list(running[target].values()),
                              list(queues[target].values()), now)  # fmt: skip
            for name, nodes in decision.admit.items():
                started = queues[target].pop(name)
                ends = now + (started.timeout or rng.randint(1, 30))
                running[target][name] = RunningJob(name, nodes, ends_by=ends, target=target)
            held = [n for jobs in running.values() for j in jobs.values() for n in j.nodes]
            assert sum(n.cpus for n in held) <= slots, (tick, running)
            assert len(held) <= launchers_for(slots)
            for t, jobs in running.items():
                assert sum(n.cpus for j in jobs.values() for n in j.nodes) <= shares[t]
    assert not any(queues.values()) and not any(running.values())
    assert ended > 100


def test_a_stream_of_small_jobs_on_one_target_never_starves_another_s_big_one() -> None:
    """`local` runs 1-slot jobs one after another on a 2-slot machine; a 2-slot job of
    `team` waits: the slot one of them frees is held for it (as the first blocked job
    of a target is), not taken by the next small job queued after it. A small job
    queued before it, or one that ends before the machine is free for it, still runs."""
    big = queued("big", Request(nodes=1, cpus=2), 5.0, target="team")
    small = RunningJob("s1", (NodeGrant("m", cpus=1.0),), ends_by=30.0, target="local")

    def local(*waiting: QueuedJob) -> Capacity:
        machine = Machine("m", 2, 0, launchers_for(2), (), waiting)
        return Capacity("local", (Host("m", (), 2, 0, launchers_for(2)),), machine=machine)

    later = queued("s2", Request(nodes=1, cpus=1), 6.0)
    held = decide(local(big), [small], [later], now=10)
    assert held.admit == {}
    assert held.waiting["s2"] == (
        "needs 1 CPU on 1 node; 1 CPU free (what is free is held for job big on compute "
        "'team', which is first in line)"
    )
    assert list(decide(local(), [small], [later], now=10).admit) == ["s2"]  # none waits
    earlier = queued("s0", Request(nodes=1, cpus=1), 4.0)
    assert list(decide(local(big), [small], [earlier, later], now=10).admit) == ["s0"]
    brief = queued("s3", Request(nodes=1, cpus=1), 7.0, timeout=15.0)  # ends by 25 < 30
    assert list(decide(local(big), [small], [later, brief], now=10).admit) == ["s3"]
    # Played out as the scheduler's rounds go (`local` before `team`), with a new small
    # job always queued on `local`: the big one starts once the machine is free for it.
    running: dict[str, RunningJob] = {"s1": small}
    queue: dict[str, QueuedJob] = {}
    started = None
    for tick in range(10, 60):
        now = float(tick)
        running = {n: r for n, r in running.items() if r.ends_by > now}
        name = f"t{tick}"
        queue[name] = queued(name, Request(nodes=1, cpus=1), now, timeout=20.0)
        mine = [r for r in running.values() if r.target == "local"]
        decision = decide(local(big), mine, list(queue.values()), now)
        for name, nodes in decision.admit.items():
            queue.pop(name)
            running[name] = RunningJob(name, nodes, ends_by=now + 20.0, target="local")
        machine = Machine("m", 2, 0, launchers_for(2), tuple(running.values()))
        team = Capacity("team", (Host("m", (), 2, 0, launchers_for(2)),), machine=machine)
        if decide(team, [], [big], now).admit:
            started = now
            break
    assert started == 30.0  # when s1 ended: no small job queued after it took its slot
