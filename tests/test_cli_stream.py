"""Streaming logs: rank 0 by default, every rank prefixed, Ctrl-C leaves the job running."""

from __future__ import annotations

import signal
import subprocess
import time

from conftest import PHALANX, Cli

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


def test_failed_job_run_exits_one_and_shows_root_cause(cli: Cli) -> None:
    cli.write("src/bad.py", "def f():\n    raise KeyError('missing-key')\nf()\n")
    spec = cli.write("job.yml", "command: python bad.py\ncode: src\n")
    proc = cli.run("run", str(spec))
    assert proc.returncode == 1
    assert "Failed" in proc.stdout
    assert "KeyError: 'missing-key'" in proc.stdout
    assert "rank 0" in proc.stdout


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
        deadline = time.monotonic() + 60
        while "working" not in out_path.read_text():
            assert time.monotonic() < deadline, "the job's output never streamed"
            assert stream.poll() is None
            time.sleep(0.2)
        stream.send_signal(signal.SIGINT)
        _, err = stream.communicate(timeout=15)
    assert stream.returncode == 130
    assert "stopped streaming" in err and "keepgoing" in err
    assert "Traceback" not in err
    time.sleep(1)
    assert cli.show("keepgoing")["status"] == "Running"
    cli.run("job", "cancel", "keepgoing", check=True)
    assert cli.show("keepgoing")["status"] == "Canceled"
