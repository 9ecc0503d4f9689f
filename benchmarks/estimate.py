"""The cost of estimated starts in a scheduling pass, over long queues.

One pass of the pure decision (:func:`phalanx.scheduler.policy.decide`) on a
box of 8 GPUs where 8 one-GPU jobs run with time limits and W jobs wait, each
asking 1 to 4 GPUs with a time limit: the pass as it was before estimates (the
estimate stubbed out), as the scheduler runs it now, and the estimate alone
(:func:`phalanx.scheduler.estimate.estimate_starts`).
Only the first 1,000 waiting jobs get an estimate, so the estimate's share stops
growing there.

    .venv/bin/python benchmarks/estimate.py [--waiting 1000 5000 20000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from phalanx.scheduler import policy
from phalanx.scheduler.estimate import estimate_starts
from phalanx.scheduler.model import Capacity, Host, NodeGrant, QueuedJob, Request, RunningJob
from phalanx.scheduler.policy import decide


def _median_s(run: object, times: int = 5) -> float:
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        run()  # type: ignore[operator]
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, nargs="+", default=[1000, 5000, 20000])
    args = parser.parse_args()
    rng = random.Random(7)
    box = Capacity("box", (Host("box", tuple(str(i) for i in range(8)), cpus=64),))
    now = 1_000_000.0
    running = [
        RunningJob(f"run{i}", (NodeGrant("box", (str(i),)),), ends_by=now + rng.uniform(60, 3600))
        for i in range(8)
    ]
    print("| waiting jobs | pass without estimates | pass with estimates | the estimate alone |")
    print("|---|---|---|---|")
    for count in args.waiting:
        queued = [
            QueuedJob(f"q{i}", Request(nodes=1, gpus=rng.randint(1, 4)), submitted=float(i),
                      timeout=rng.uniform(60, 7200))
            for i in range(count)
        ]  # fmt: skip
        order = sorted(queued, key=lambda j: j.key)
        whole = _median_s(lambda q=queued: decide(box, running, q, now))
        policy.estimate_starts = lambda *a, **k: {}  # the pass as it was before estimates
        bare = _median_s(lambda q=queued: decide(box, running, q, now))
        policy.estimate_starts = estimate_starts
        alone = _median_s(lambda o=order: estimate_starts(box, running, o, now))
        ms = [f"{t * 1000:.1f} ms" for t in (bare, whole, alone)]
        print(f"| {count} | {' | '.join(ms)} |")


if __name__ == "__main__":
    main()
