"""A two-rank job whose ranks take turns printing, in a known order: rank 0 prints
turn 0, then rank 1 turn 1 once it sees that rank 0's line is in rank 0's log, and so
on. A rank waits for its own line to reach its log (its wrapper has read it, and so
timed it) before handing the turn on, so the order is the order the lines were
timed: what an interleaved history must show."""

from __future__ import annotations

TURNS = 6

SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
log = os.path.join(os.environ["PHALANX_JOB_DIR"], "user_logs", f"std_log_process_{rank}.txt")
deadline = time.monotonic() + 120

def wait_for(what):
    while not what():
        if time.monotonic() > deadline:
            sys.exit("turns: gave up waiting")
        time.sleep(0.02)

for turn in range(TURNS):
    if turn % 2 != rank:
        continue
    if turn:
        wait_for(lambda: os.path.exists(f"turn_{turn - 1}"))
    line = f"turn {turn} of rank {rank}"
    print(line, flush=True)
    wait_for(lambda: line in open(log).read())
    open(f"turn_{turn}", "w").close()
""".replace("TURNS", str(TURNS))

SPEC = """
command: python turns.py
code: src
distribution: {type: pytorch, process_count_per_instance: 2}
"""

EXPECTED = [f"turn {t} of rank {t % 2}" for t in range(TURNS)]
