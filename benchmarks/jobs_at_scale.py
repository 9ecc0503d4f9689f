"""The job list over 10,000 jobs: ``GET /api/v1/jobs`` of a real ``phalanx server``.

A workspace of ``--jobs`` (10,000) jobs is written through the workspace's API
(each Queued, then ended at once: none runs; the list only reads their rows),
then a ``phalanx server`` serves it and each request below is timed from the
client, the median of ``--rounds`` (7):

* the first page (50 jobs, newest first, the studio's default);
* a text filter over every job (``text=``, matching a tenth of them), and a
  status filter (a third);
* a deep page: the last page, and the page before it (keyset cursors);
* a sort by name, and by duration (no index: sorted over every row).

On SQLite (the workspace's file), and on PostgreSQL with ``--postgres`` (a
server started as the tests start one, ``tests/pg.py``). Goals: a first page
≤ 0.5 s, a filter ≤ 0.5 s.

Usage::

    .venv/bin/python benchmarks/jobs_at_scale.py [--jobs 10000] [--rounds 7] [--postgres]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")
ENDS = ("Completed", "Failed", "Canceled")


def write_jobs(home: Path, count: int) -> float:
    """``count`` ended jobs, written through the workspace's API; the seconds it took."""
    from phalanx.workspace import JobStatus, Workspace

    start = time.perf_counter()
    ws = Workspace(home)
    for i in range(count):
        spec = {
            "command": "python train.py",
            "experiment_name": f"exp-{i % 20}",
            "display_name": f"Trial {i} of sweep {i % 10}",
            "tags": {"team": ("vision", "speech", "nlp")[i % 3], "seed": i % 10},
        }
        name = f"job-{i:05d}"
        ws.create_job(spec, spec_text="", name=name, created_by=f"user{i % 7}")
        ws.set_status(name, JobStatus(ENDS[i % 3]))
    ws.close()
    return time.perf_counter() - start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _median(rounds: int, call: Callable[[], Any]) -> tuple[float, Any]:
    times, answer = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), answer


def measure(home: Path, env: dict[str, str], rounds: int) -> list[tuple[str, float, str]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api/v1/jobs"
    server = subprocess.Popen(
        [PHALANX, "server", "start", "--port", str(port), "--trust-jobs"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    rows: list[tuple[str, float, str]] = []
    try:
        with httpx.Client(timeout=60) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.get(url, params={"limit": 1}).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the server did not start") from None
                    time.sleep(0.2)

            def get(**params: Any) -> dict[str, Any]:
                answer = client.get(url, params=params)
                answer.raise_for_status()
                return dict(answer.json())

            def timed(what: str, **params: Any) -> dict[str, Any]:
                seconds, body = _median(rounds, lambda: get(**params))
                rows.append((what, seconds, f"{len(body['jobs'])} of {body['total']:,}"))
                return body

            first = timed("first page (50, newest first)")
            timed("text filter over all (`text=sweep 3`)", text="sweep 3")
            timed("status filter (`status=Failed`)", status="Failed")
            timed("tag filter (`tag=team=nlp`)", tag="team=nlp")
            last = timed("last page (keyset cursor)", cursor=first["last"])
            timed("the page before the last", cursor=last["prev"])
            timed("sort by name, first page", sort="name")
            timed("sort by duration, first page", sort="duration")
            timed("text + user + sort by name", text="trial", user="user3", sort="name")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", action="store_true", help="Also on PostgreSQL.")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    results: dict[str, list[tuple[str, float, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "sqlite"
        env = {**base, "PHALANX_HOME": str(home)}
        os.environ.update(env)
        print(f"SQLite: writing {args.jobs:,} jobs: {write_jobs(home, args.jobs):.1f} s")
        results["SQLite"] = measure(home, env, args.rounds)
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            import pg

            server = pg.start()
            try:
                home = Path(tmp) / "postgres"
                url = pg.Postgres.create_database(server)
                env = {**base, "PHALANX_HOME": str(home), "PHALANX_DB": url}
                os.environ.update(env)
                seconds = write_jobs(home, args.jobs)
                print(f"PostgreSQL: writing {args.jobs:,} jobs: {seconds:.1f} s")
                results["PostgreSQL"] = measure(home, env, args.rounds)
            finally:
                pg.stop(server)
    backends = list(results)
    print(f"\n| request | {' | '.join(backends)} | rows |")
    print(f"|---|{'---|' * len(backends)}---|")
    for k, (what, _, shown) in enumerate(results["SQLite"]):
        times = " | ".join(f"{results[b][k][1] * 1000:.0f} ms" for b in backends)
        print(f"| {what} | {times} | {shown} |")


if __name__ == "__main__":
    main()
