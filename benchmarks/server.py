"""The phalanx server under load: many clients, log streaming, and job start-up.

Three parts, each against a real ``phalanx server`` process on this machine:

* **Job start-up through the server vs embedded.** The same one-rank job is
  created ``--rounds`` times with ``phalanx job create`` on an embedded
  workspace and through a server, alternating. Measured: from the command's
  start to rank 0's first line (the time the rank printed). Goal: the server
  adds ≤ 0.5 s.
* **Log streaming latency.** A job on the server prints a line with its
  wall-clock time every 50 ms; ``phalanx job stream`` runs as a remote client
  and each line's latency is its arrival on the client's stdout minus the time
  in it. Goal: p99 ≤ 0.5 s.
* **Many clients.** ``--clients`` threads (50), each its own HTTP client with a
  token, for ``--seconds`` (60): create a job (it queues behind one that holds
  the only CPU slot of the target), list the newest 50 jobs, cancel the job it
  made. Counted: requests, 5xx answers, and jobs lost (created, then not found
  or not Canceled); the server runs the largest of ``--workers``. Then the
  workspace is filled to ``--jobs`` (1,000) jobs and ``GET /api/v1/jobs`` is
  timed on a server of each ``--workers`` count (1 and 2), one after the other:
  alone (200 requests), and with ``--clients`` listing at once with no pause,
  first as that many Python threads of this process, then (where Debian's
  ``wrk`` is installed) as that many ``wrk`` connections. The threads' times
  include their own wait for this process's GIL; ``wrk``'s are the server's.
  Goal: p99 ≤ 200 ms.

Usage::

    .venv/bin/python benchmarks/server.py [--rounds 5] [--clients 50] [--seconds 60] \\
        [--jobs 1000] [--workers 1 2] [--skip start stream load]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")

FIRST = """
command: python -c "import time; print('FIRST', time.time(), flush=True)"
"""
TICKS = """
command: >-
  python -c "import time;
  [(print('T', time.time(), flush=True), time.sleep(0.05)) for _ in range(%d)]"
"""
HOLD = """
name: %s
compute: bench
command: python -c "import time; time.sleep(100000)"
"""
QUEUED = "compute: bench\ncommand: 'true'\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(PHALANX_HOME=str(home), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", **extra)
    return env


def _run(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([PHALANX, *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"phalanx {' '.join(args)}: {proc.stderr}")
    return proc.stdout.strip()


class Server:
    def __init__(self, home: Path, *args: str) -> None:
        self.home = home
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [PHALANX, "server", "start", "--port", str(self.port), *args],
            env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/api/v1/health", timeout=1).raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def _first_line(home: Path, name: str, timeout: float = 120) -> float:
    log = home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith("FIRST "):
                    return float(line.split()[1])
        time.sleep(0.01)
    raise RuntimeError(f"{name}: rank 0 never started")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def start_latency(root: Path, rounds: int) -> dict[str, object]:
    embedded, served = root / "embedded", root / "served"
    spec = root / "first.yml"
    spec.write_text(FIRST)
    server = Server(served)
    times: dict[str, list[float]] = {"embedded": [], "server": []}
    try:
        for _ in range(rounds):
            for kind, home, extra in (
                ("embedded", embedded, {}),
                ("server", served, {"PHALANX_SERVER": server.url}),
            ):
                env = _env(root / "laptop" if extra else home, **extra)
                t0 = time.time()
                name = _run(env, "job", "create", "-f", str(spec))
                times[kind].append(_first_line(home, name) - t0)
    finally:
        server.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "embedded_s": [round(t, 3) for t in times["embedded"]],
        "server_s": [round(t, 3) for t in times["server"]],
        "median_embedded_s": round(med["embedded"], 3),
        "median_server_s": round(med["server"], 3),
        "added_s": round(med["server"] - med["embedded"], 3),
    }


def stream_latency(root: Path, lines: int) -> dict[str, object]:
    home = root / "stream"
    spec = root / "ticks.yml"
    spec.write_text(TICKS % lines)
    server = Server(home)
    try:
        env = _env(root / "laptop", PHALANX_SERVER=server.url)
        name = _run(env, "job", "create", "-f", str(spec))
        proc = subprocess.Popen(
            [PHALANX, "job", "stream", name], env=env, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert proc.stdout is not None
        delays = []
        for line in proc.stdout:
            now = time.time()
            if line.startswith("T "):
                delays.append(now - float(line.split()[1]))
        proc.wait(timeout=60)
    finally:
        server.stop()
    return {
        "lines": len(delays),
        "p50_s": round(_pct(delays, 50), 3),
        "p99_s": round(_pct(delays, 99), 3),
        "max_s": round(max(delays), 3),
    }


def _token(home: Path) -> str:
    return _run(_env(home), "server", "token", "create", "--user", "bench")


def many_clients(
    root: Path, clients: int, seconds: float, fill: int, workers: list[int]
) -> dict[str, object]:
    home = root / "load"
    _run(_env(home), "compute", "create", "--type", "local", "--name", "bench", "--cpus", "1",
         "--gpus", "none")  # fmt: skip
    token = _token(home)
    server = Server(home, "--auth", "--workers", str(max(workers)))
    headers = {"authorization": f"Bearer {token}"}
    api = server.url + "/api/v1"
    try:
        with httpx.Client(base_url=api, headers=headers, timeout=120) as c:
            c.post("/jobs", json={"spec": HOLD % "holder"}).raise_for_status()
        lock = threading.Lock()
        codes: dict[int, int] = {}
        created: list[str] = []
        latency: dict[str, list[float]] = {"create": [], "list": [], "cancel": []}
        errors: list[str] = []
        deadline = time.monotonic() + seconds

        def timed(kind: str, call: object) -> httpx.Response:
            t0 = time.perf_counter()
            response: httpx.Response = call()  # type: ignore[operator]
            with lock:
                latency[kind].append(time.perf_counter() - t0)
                codes[response.status_code] = codes.get(response.status_code, 0) + 1
            return response

        def client() -> None:
            with httpx.Client(base_url=api, headers=headers, timeout=120) as c:
                while time.monotonic() < deadline:
                    try:
                        r = timed("create", lambda: c.post("/jobs", json={"spec": QUEUED}))
                        name = r.json()["name"] if r.status_code == 201 else None
                        if name:
                            with lock:
                                created.append(name)
                        timed("list", lambda: c.get("/jobs", params={"limit": 50}))
                        if name:
                            url = f"/jobs/{name}/cancel"
                            timed("cancel", lambda: c.post(url))  # noqa: B023
                    except httpx.HTTPError as exc:
                        with lock:
                            errors.append(repr(exc))

        threads = [threading.Thread(target=client) for _ in range(clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        lost = []
        with httpx.Client(base_url=api, headers=headers, timeout=120) as c:
            for name in created:
                r = c.get(f"/jobs/{name}")
                if r.status_code != 200 or r.json()["status"] != "Canceled":
                    lost.append(name)
            c.post("/jobs/holder/cancel")
        load = {
            "clients": clients,
            "seconds": round(wall, 1),
            "requests": sum(codes.values()),
            "status_codes": codes,
            "transport_errors": len(errors),
            "jobs_created": len(created),
            "jobs_lost": len(lost),
            **{f"{k}_p50_s": round(_pct(v, 50), 3) for k, v in latency.items() if v},
            **{f"{k}_p99_s": round(_pct(v, 99), 3) for k, v in latency.items() if v},
        }
    finally:
        server.stop()
    listing = _list_latency(home, headers, clients, fill, workers)
    return {"load": load, "list_with_many_jobs": listing}


def _list_latency(
    home: Path, headers: dict[str, str], clients: int, fill: int, workers: list[int]
) -> dict[str, object]:
    """``GET /api/v1/jobs`` (newest 50) on a workspace of ``fill`` jobs, for each
    worker count, alone and with ``clients`` listing at once with no pause."""
    from phalanx.workspace import JobStatus, Workspace

    ws = Workspace(home)
    have = len(ws.list_jobs(limit=10**6))
    for _ in range(max(0, fill - have)):  # rows as a team's history leaves them
        job = ws.create_job({"command": "true"}, spec_text="command: 'true'\n")
        ws.set_status(job.name, JobStatus.COMPLETED)
    total = len(ws.list_jobs(limit=10**6))
    ws.close()
    _wait_for_quiet(home)
    results: dict[str, list[dict[str, object]]] = {f"workers_{n}": [] for n in workers}
    # Each worker count twice, alternating, so neither is always measured first.
    for count in [*workers, *workers]:
        server = Server(home, "--auth", "--workers", str(count))
        url = server.url + "/api/v1/jobs?limit=50"
        try:
            alone: list[float] = []
            with httpx.Client(headers=headers, timeout=120) as c:
                for _ in range(200):
                    t0 = time.perf_counter()
                    c.get(url).raise_for_status()
                    alone.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                c.get(url.replace("limit=50", f"limit={total}")).raise_for_status()
                whole = time.perf_counter() - t0
            row: dict[str, object] = {
                "alone_p50_s": round(_pct(alone, 50), 4),
                "alone_p99_s": round(_pct(alone, 99), 4),
                f"all_{total}_in_one_request_s": round(whole, 3),
            }
            _threads(url, headers, clients)  # warm: every request thread opens its connection
            row[f"{clients}_python_threads"] = _threads(url, headers, clients)
            if shutil.which("wrk"):
                row[f"{clients}_wrk_connections"] = _wrk(url, headers, clients)
            results[f"workers_{count}"].append(row)
        finally:
            server.stop()
    return {"jobs": total, **results}


def _wait_for_quiet(home: Path, timeout: float = 120) -> None:
    """Until the supervisors of the load's jobs have ended: they share the CPUs."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("PHALANX_HOME") == str(home) and (
                    "phalanx.jobs.supervisor" in " ".join(proc.cmdline())
                ):
                    busy = True
                    break
            except psutil.Error:
                continue
        if not busy:
            return
        time.sleep(1)


def _threads(url: str, headers: dict[str, str], clients: int) -> dict[str, float]:
    """``clients`` threads of this process, each its own HTTP client, 20 requests each.

    Their times include waiting for this process's GIL while 49 other threads
    parse their answers, so they are an upper bound of what the server gives.
    """
    lock = threading.Lock()
    times: list[float] = []

    def lister() -> None:
        with httpx.Client(headers=headers, timeout=120) as c:
            for _ in range(20):
                t0 = time.perf_counter()
                c.get(url).raise_for_status()
                with lock:
                    times.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=lister) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "p50_s": round(_pct(times, 50), 4),
        "p99_s": round(_pct(times, 99), 4),
        "requests_per_s": round(len(times) / wall, 1),
    }


def _wrk(url: str, headers: dict[str, str], clients: int, seconds: int = 15) -> dict[str, float]:
    """``clients`` connections of ``wrk`` (a C load generator, Debian's ``wrk``) for
    ``seconds``: each sends its next request as soon as an answer arrives."""
    args = ["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "--latency", "--timeout", "30s"]
    for key, value in headers.items():
        args += ["-H", f"{key}: {value}"]
    out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
    found: dict[str, float] = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("50%", "99%"):
            found[f"p{words[0][:-1]}_s"] = round(_seconds(words[1]), 4)
        elif line.startswith("Requests/sec:"):
            found["requests_per_s"] = float(words[1])
        elif "Non-2xx" in line or "Socket errors" in line:
            raise RuntimeError(f"wrk: {line.strip()}")
    return found


def _seconds(text: str) -> float:
    for unit, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise ValueError(f"wrk printed an unknown time: {text}")


def _end_workspace_processes(root: Path) -> None:
    """The schedulers and supervisors of the benchmark's workspaces end with it."""
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.environ().get("PHALANX_HOME", "").startswith(str(root)):
                proc.kill()
        except psutil.Error:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="server worker counts to compare"
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["start", "stream", "load"])
    args = parser.parse_args()
    python = platform.python_version()
    results: dict[str, object] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {python}"
    }
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-server-") as tmp:
        root = Path(tmp)
        if "start" not in args.skip:
            results["start"] = start_latency(root, args.rounds)
            print(json.dumps(results["start"]), flush=True)
        if "stream" not in args.skip:
            results["stream"] = stream_latency(root, args.lines)
            print(json.dumps(results["stream"]), flush=True)
        if "load" not in args.skip:
            results["clients"] = many_clients(
                root, args.clients, args.seconds, args.jobs, args.workers
            )
            print(json.dumps(results["clients"]), flush=True)
        _end_workspace_processes(root)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
