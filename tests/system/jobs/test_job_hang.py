"""A rank stuck outside a collective that the others wait in: found and named as a hang."""

from __future__ import annotations

import time

from conftest import Cli, job_processes_under

STUCK = """
import os, time
import torch
import torch.distributed as dist
from phalanx.train import heartbeat, init

ctx = init(timeout_s=600)  # far longer than the watchdog: it must not be what ends this
for step in range(1000):
    if step == 5 and ctx.rank == 1:
        time.sleep(3600)                     # stuck: the others wait in all_reduce
    t = torch.ones(1)
    dist.all_reduce(t)
    heartbeat(step)
    if ctx.rank == 0 and step % 2 == 0:
        print("step", step, flush=True)
    time.sleep(0.1)
"""


def test_hang_is_detected_classified_and_shows_the_stuck_stack(cli: Cli) -> None:
    cli.write("src/stuck.py", STUCK)
    spec = cli.write(
        "job.yml",
        """
        command: python stuck.py
        code: src
        distribution: {type: pytorch, process_count_per_instance: 2}
        limits: {stall_timeout: 4, timeout: 300}
        """,
    )
    started = time.monotonic()
    name = cli.create(spec)
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=120)
    elapsed = time.monotonic() - started
    assert job["status"] == "Failed"
    attempt = job["attempts"][0]
    assert attempt["cause"] == "hang"
    assert "limits.stall_timeout" in job["error"]["message"]
    # The stuck rank's stack, dumped on request, points at the sleep in stuck.py.
    assert job["error"]["rank"] == 1
    lines = STUCK.lstrip().splitlines()
    sleep_line = next(i for i, text in enumerate(lines, 1) if "sleep(3600)" in text)
    assert f'stuck.py", line {sleep_line} in <module>' in job["error"]["traceback"]
    assert elapsed < 60  # start-up + ~1 s of steps + 4 s of silence + the stop
    assert job_processes_under(cli.home) == []
