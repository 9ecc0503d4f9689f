"""Hostile requests against a real server: how long each refusal takes and what it costs.

A ``phalanx server`` with one serving process (so the process that answers is
the one measured) on a fresh workspace, SQLite unless ``--db`` names a
PostgreSQL URL. Each attack is sent ``--rounds`` times; measured are the
request's wall time on the client (median and slowest) and how far the serving
process's resident memory rose above where it was before the request, at its
highest (the kernel's high-water mark, ``VmHWM``, reset before each request
through ``/proc/PID/clear_refs``). Goals (issue 21): each refusal in < 1 s,
growth < 50 MB.

Usage::

    .venv/bin/python benchmarks/bounds.py [--rounds 5] [--db postgresql://...]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

BIN = Path(sys.executable).parent
MB = 1 << 20
HUGE = 10**30
BOMB = (
    "command: echo\nidentity:\n  a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"  {this}: &{this} [" + ",".join([f"*{last}"] * 9) + "]\n"
        for last, this in zip("abcdefgh", "bcdefghi", strict=True)
    )
)
MERGE_BOMB = "command: echo\nidentity:\n  m0: &m0 {x: 1, y: 2}\n" + "".join(
    f"  m{i}: &m{i}\n    <<: [*m{i - 1}, *m{i - 1}]\n" for i in range(1, 41)
)


def _spec(text: str, **extra: object) -> dict[str, object]:
    return {"json": {"spec": text, **extra}}


def attacks() -> dict[str, tuple[str, str, Callable[[], dict[str, object]]]]:
    """name → (method, url, the request's arguments, made fresh each time)."""
    flow = "command: echo\nidentity: [" + ",".join(["1"] * 500_000) + "]\n"
    bomb_flow = BOMB.split("identity:\n")[1].strip().replace("\n", ", ").replace("  ", "")
    tags = "command: echo\ntags:\n" + "".join(f"  t{i}: {'x' * 1000}\n" for i in range(999))
    return {
        f"alias bomb ({len(BOMB)} bytes)": ("POST", "/jobs", lambda: _spec(BOMB)),
        "merge-key bomb": ("POST", "/jobs", lambda: _spec(MERGE_BOMB)),
        "alias bomb in --set": (
            "POST", "/jobs",
            lambda: _spec("command: echo\n", overrides=[f"identity={{{bomb_flow}}}"]),
        ),
        "instance_count: 10**30": (
            "POST", "/jobs",
            lambda: _spec(f"command: echo\nresources: {{instance_count: {HUGE}}}\n"),
        ),
        "process_count_per_instance: 10**30": (
            "POST", "/jobs",
            lambda: _spec(
                "command: echo\ndistribution: "
                f"{{type: pytorch, process_count_per_instance: {HUGE}}}\n"
            ),
        ),
        "nesting of 300,000 [": (
            "POST", "/jobs", lambda: _spec("command: echo\nidentity: " + "[" * 300_000)
        ),
        "a flow list of 500,000 items (1 MiB)": ("POST", "/jobs", lambda: _spec(flow)),
        "999 tags of 1 KB": ("POST", "/jobs", lambda: _spec(tags)),
        "NUL in a job name (URL)": ("GET", "/jobs/a%00b", dict),
        "NUL in ?experiment=": ("GET", "/jobs", lambda: {"params": {"experiment": "a\x00"}}),
        "a 10 MB unknown field": (
            "POST", "/jobs", lambda: _spec("command: echo\n", unknown="u" * (10 * MB))
        ),
    }  # fmt: skip


def _archive(entries: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(entries):
            tar.addfile(tarfile.TarInfo(f"f{i}"), io.BytesIO(b""))
    return buf.getvalue()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    assert found is not None
    return int(found.group(1))


def measure(pid: int, send: Callable[[], httpx.Response]) -> tuple[float, int, int]:
    """(seconds, peak growth in bytes, status) of one request."""
    before = psutil.Process(pid).memory_info().rss
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    started = time.perf_counter()
    answer = send()
    took = time.perf_counter() - started
    return took, _peak_kib(pid) * 1024 - before, answer.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--db", help="a PostgreSQL URL (default: SQLite in the workspace)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-bounds-") as tmp:
        port = _free_port()
        env = {**os.environ, "PHALANX_HOME": str(Path(tmp) / "home")}
        env.pop("PHALANX_SERVER", None)
        env.pop("PHALANX_DB", None)
        if args.db:
            env["PHALANX_DB"] = args.db
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 (kept open for the server)
        server = subprocess.Popen(
            [str(BIN / "phalanx"), "server", "start", "--port", str(port), "--workers", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            api = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", timeout=120)
            deadline = time.monotonic() + 60
            while True:
                try:
                    api.get("/health")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            # Warm up: the first spec a process reads imports the spec's models.
            api.post("/jobs", json={"spec": "command: echo\n", "validate_only": True})
            rows = []
            for name, (method, url, kwargs) in attacks().items():

                def send(method: str = method, url: str = url, kwargs: Any = kwargs) -> Any:
                    return api.request(method, url, **kwargs())

                rows.append((name, [measure(server.pid, send) for _ in range(args.rounds)]))
            archive = _archive(100_000)

            def upload_then_register() -> httpx.Response:
                sent = api.put("/uploads", content=archive).json()["upload"]
                return api.post("/data", json={"name": "many", "upload": sent})

            rows.append(
                (
                    f"an upload of 100,000 empty files ({len(archive) // 1024} KiB)",
                    [measure(server.pid, upload_then_register) for _ in range(args.rounds)],
                )
            )
            assert api.get("/health").status_code == 200
        finally:
            server.kill()
            server.wait()
            log.close()
    where = "PostgreSQL" if args.db else "SQLite"
    print(f"\n{args.rounds} rounds each, one serving process, {where}\n")
    print("| request | status | median s | slowest s | peak growth MB |")
    print("|---|---|---|---|---|")
    for name, runs in rows:
        times = [t for t, _, _ in runs]
        growth = max(g for _, g, _ in runs) / MB
        statuses = "/".join(sorted({str(s) for _, _, s in runs}))
        print(
            f"| {name} | {statuses} | {statistics.median(times):.3f} | {max(times):.3f} "
            f"| {growth:.1f} |"
        )


if __name__ == "__main__":
    main()
