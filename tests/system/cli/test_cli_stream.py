"""Streaming logs: rank 0 by default, every rank prefixed, Ctrl-C leaves the job running,
bounded memory whatever a rank writes."""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import turns
from conftest import LOCAL_AND_SERVER, PHALANX, Cli
from phalanx.launch.logtimes import ENTRY, times_path
from phalanx.server.logread import MAX_RANKS_AT_ONCE

TALK = """
import os, time
rank = os.environ["RANK"]
for i in range(3):
    print(f"line {i} of rank {rank}")
    time.sleep(0.1)
"""

TWO_RANKS = """
command: python talk.py
code: src
distribution: {type: pytorch, process_count_per_instance: 2}
"""


@LOCAL_AND_SERVER
def test_run_streams_rank_zero_and_exits_with_the_job_result(cli: Cli) -> None:
    cli.write("src/talk.py", TALK)
    spec = cli.write("job.yml", TWO_RANKS)
    proc = cli.run("run", str(spec))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert [line for line in out.splitlines() if line.startswith("line ")] == [
        "line 0 of rank 0",
        "line 1 of rank 0",
        "line 2 of rank 0",
    ]
    assert "Completed" in out
    assert "outputs:" in out


@LOCAL_AND_SERVER
def test_stream_all_ranks_prefixes_every_line(cli: Cli) -> None:
    cli.write("src/talk.py", TALK)
    name = cli.create(cli.write("job.yml", TWO_RANKS))
    proc = cli.run("job", "stream", name, "--all-ranks")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[rank")]
    for rank in (0, 1):
        assert [ln for ln in lines if ln.startswith(f"[rank {rank}]")] == [
            f"[rank {rank}] line {i} of rank {rank}" for i in range(3)
        ]


# Rank 1 raises; rank 0, in its next collective, dies of gloo's "Connection closed by
# peer". Rank 0 ignores the gang's SIGTERM so that its secondary traceback is always
# printed (a rank stopped first would print none, and the test would prove less).
PEER_DIES = """
import signal
import torch, torch.distributed as dist
signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
dist.barrier()
if dist.get_rank() == 1:
    config = {}
    config["learning_rate"]
dist.all_reduce(torch.ones(1))
"""


@LOCAL_AND_SERVER
def test_failed_job_run_shows_the_rank_that_failed_first_and_its_traceback(cli: Cli) -> None:
    cli.write("src/bad.py", PEER_DIES)
    spec = cli.write(
        "job.yml",
        "command: python bad.py\ncode: src\n"
        "distribution: {type: pytorch, process_count_per_instance: 2}\n",
    )
    proc = cli.run("run", str(spec))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    # Rank 0's log (what `run` streams) ends with gloo's error: a consequence ...
    secondary = next(i for i, ln in enumerate(lines) if "Connection closed by peer" in ln)
    # ... and the end of the stream names the cause first, then shows its traceback.
    first = lines.index("rank 1 failed first: KeyError: 'learning_rate'")
    assert secondary < first
    assert "rank 0's errors above, if any, came after it" in lines[first + 1]
    rest = "\n".join(lines[first:])
    assert "rank 1 · node 0, local rank 1 · exit code 1" in rest
    assert 'config["learning_rate"]' in rest  # rank 1's own traceback
    assert rest.index('config["learning_rate"]') < rest.index(" ● Failed in ")


@LOCAL_AND_SERVER
def test_ctrl_c_stops_streaming_not_the_job(cli: Cli) -> None:
    cli.write("src/slow.py", "import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    spec = cli.write("job.yml", "name: keepgoing\ncommand: python slow.py\ncode: src\n")
    out_path = cli.workdir / "stream.out"
    with open(out_path, "w") as out:
        stream = subprocess.Popen(
            [PHALANX, "run", str(spec)],
            env=cli.env,
            cwd=cli.workdir,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Bounds against a hang, not speed checks: a busy machine may take a while.
        deadline = time.monotonic() + 120
        while "working" not in out_path.read_text():
            assert time.monotonic() < deadline, "the job's output never streamed"
            assert stream.poll() is None
            time.sleep(0.2)
        stream.send_signal(signal.SIGINT)
        _, err = stream.communicate(timeout=120)
    assert stream.returncode == 130
    assert "stopped streaming" in err and "keepgoing" in err
    assert "Traceback" not in err
    time.sleep(1)
    assert cli.show("keepgoing")["status"] == "Running"
    cli.run("job", "cancel", "keepgoing", check=True)
    assert cli.show("keepgoing")["status"] == "Canceled"


HUGE_LINE = """
import os
chunk = b"x" * (1 << 20)
for _ in range(200):
    os.write(1, chunk)
os.write(1, b"<end of the one line>")
"""

# Runs a command with stdout to a file; prints the peak RSS (KiB) of what it waited for.
PEAK_RSS = """
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    code = subprocess.run(sys.argv[2:], stdout=out).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)
"""


def test_streaming_one_200_mb_line_stays_small_and_shows_all_of_it(cli: Cli) -> None:
    # A rank writes 200 MiB without a newline (a progress bar left running, a dump).
    cli.write("src/huge.py", HUGE_LINE)
    name = cli.create(cli.write("job.yml", "command: python huge.py\ncode: src\n"))
    cli.wait(name, ("Completed",))
    out = cli.workdir / "stream.out"
    measured = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(out), PHALANX, "job", "stream", name],
        env=cli.env, cwd=cli.workdir, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    peak_kib, code = map(int, measured.stdout.split())
    assert code == 0, measured.stderr
    assert peak_kib < 150 << 10, f"job stream peaked at {peak_kib >> 10} MiB"
    xs, widest, end_seen = 0, 0, False
    with open(out, encoding="utf-8") as f:
        for line in f:
            body = line.rstrip("\n").removeprefix("… ")
            widest = max(widest, len(line))
            if body.endswith("<end of the one line>"):
                body, end_seen = body.removesuffix("<end of the one line>"), True
            if body and not body.strip("x"):
                xs += len(body)
    assert end_seen and xs == 200 << 20  # the whole line, its tail included
    assert widest <= (64 << 10) + 4  # printed in pieces, each after the first marked "… "


PROGRESS = """
import sys
for i in range(1, 101):
    sys.stdout.write(f"\\rprogress {i}%")
sys.stdout.write("\\n")
print("done")
for i in range(1, 4):
    sys.stdout.write(f"\\rsaving {i}/3")  # the job ends without a newline
"""


@LOCAL_AND_SERVER
def test_a_progress_bar_shows_its_latest_state_per_line_end(cli: Cli) -> None:
    cli.write("src/bar.py", PROGRESS)
    proc = cli.run("run", str(cli.write("job.yml", "command: python bar.py\ncode: src\n")))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("progress")] == ["progress 100%"]
    assert "done" in lines
    assert [ln for ln in lines if ln.startswith("saving")] == ["saving 3/3"]


@LOCAL_AND_SERVER
def test_a_waiting_job_streams_its_place_and_why_it_waits(cli: Cli) -> None:
    tiny = ("--type", "local", "--name", "tiny", "--cpus", "1", "--gpus", "none")
    cli.run("compute", "create", *tiny, check=True)
    spec = cli.write("hold.yml", "command: sleep 120\ncompute: tiny\n")
    first = cli.create(spec)
    cli.wait(first, ("Running",))
    second = cli.create(spec)
    stream = cli.popen("job", "stream", second)
    try:
        deadline = time.monotonic() + 60
        while not (cli.show(second)["queue"] or {}).get("reason"):
            assert time.monotonic() < deadline, "the scheduler gave no reason"
            time.sleep(0.2)
        time.sleep(1.0)  # the stream looks every 0.2 s
        cli.run("job", "cancel", first, check=True)
        cli.run("job", "cancel", second, check=True)
        out, _ = stream.communicate(timeout=60)
    finally:
        stream.kill()
    waited = [ln for ln in out.splitlines() if ln.startswith("  #1 in the queue of tiny")]
    assert waited, out
    # The scheduler's own reason, as `phalanx queue` gives it, and its estimate: none, as
    # the job ahead has no time limit.
    assert waited[0] == (
        "  #1 in the queue of tiny: needs 1 CPU on 1 node; 0 CPUs free, 0 launchers free"
        " · start unknown"
    )


@LOCAL_AND_SERVER
def test_stream_all_ranks_with_timestamps_shows_lines_in_the_order_written(cli: Cli) -> None:
    """Ranks that take turns come out in turn order, each line with its time."""
    cli.write("src/turns.py", turns.SCRIPT)
    name = cli.create(cli.write("job.yml", turns.SPEC))
    proc = cli.run("job", "stream", name, "--all-ranks", "--timestamps")
    assert proc.returncode == 0, proc.stderr
    shown = [ln for ln in proc.stdout.splitlines() if " turn " in ln]
    assert [ln.split("] ", 1)[1] for ln in shown] == turns.EXPECTED, proc.stdout
    clocks = [ln.split(" ", 1)[0] for ln in shown]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", c) for c in clocks), shown
    assert [ln.split(" ", 1)[1] for ln in shown] == [
        f"[rank {t % 2}] {text}" for t, text in enumerate(turns.EXPECTED)
    ]
    # Without --timestamps a line is as it was before: no time in front.
    plain = cli.run("job", "stream", name, "--all-ranks")
    assert "[rank 0] turn 0 of rank 0" in plain.stdout.splitlines()


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_stream_through_a_server_shows_unknown_times_and_refuses_too_many_ranks(
    cli: Cli,
) -> None:
    """A log whose index begins with an unknown time (an attempt before any index) is
    streamed through a server, that line without a time; a job that made more rank logs
    than are read together gets a one-line refusal naming the limit, not a 500."""
    name = cli.create(cli.write("job.yml", "command: echo done\n"))
    job_dir = Path(cli.wait(name, ("Completed",))["job_dir"])
    log = job_dir / "user_logs" / "std_log_process_0.txt"
    log.write_bytes(b"old line\nnew line\n")
    times_path(log).write_bytes(ENTRY.pack(9, math.nan) + ENTRY.pack(18, 1000.5))
    proc = cli.run("job", "stream", name, "--all-ranks", "--timestamps")
    assert proc.returncode == 0, proc.stderr
    clock = time.strftime("%H:%M:%S", time.localtime(1000.5)) + ".500"
    assert [ln for ln in proc.stdout.splitlines() if " line" in ln] == [
        "-            [rank 0] old line", f"{clock} [rank 0] new line"
    ]  # fmt: skip
    for rank in range(1, MAX_RANKS_AT_ONCE + 1):
        (job_dir / "user_logs" / f"std_log_process_{rank}.txt").write_bytes(b"")
    refused = cli.run("job", "stream", name, "--all-ranks")
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert f"at most {MAX_RANKS_AT_ONCE} are read together" in refused.stderr
    assert "Traceback" not in refused.stderr
