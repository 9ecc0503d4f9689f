"""phalanx studio in a real browser (Debian's chromium through Playwright).

Against a ``phalanx server`` process on a workspace made for the benchmark:

* **Jobs page with ``--jobs`` (1,000) jobs:** from navigation to its first page
  drawn (50 rows; every row before issue 27 paged the list on the server)
  (median of ``--rounds``). Goal: ≤ 1 s.
* **A job page whose rank log holds ``--lines`` (1,000,000) lines:** from
  navigation to the log's last line shown (tail-first). Goal: ≤ 1 s.
* **A chart of ``--points`` (100,000) steps:** the metrics route's answer with
  and without server-side downsampling (bytes, seconds), and from opening the
  metrics tab to the chart drawn.
* **Server memory while ``--followers`` (20) pages follow live logs:** the RSS
  of the server's processes (uvicorn's parent and its serving processes)
  before, and after every page has shown a new line of a job printing 20 lines
  a second (each page a browser context of its own: its own cookies,
  connections and event stream).
* **Live log latency:** from a rank printing a line (its own timestamp in the
  line) to the line shown on a page that follows the log, p50/p99 over every
  line of 5 s, while the ``--followers`` pages follow the same log. Goal: ≤ 1 s.

Usage::

    .venv/bin/python benchmarks/studio.py [--jobs 1000] [--lines 1000000] \\
        [--points 100000] [--followers 20] [--rounds 3]
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
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

BIN = Path(sys.executable).parent
PHALANX = str(BIN / "phalanx")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
TICKS = """
command: >-
  python -c "import time;
  [(print('tick', i, repr(time.time()), flush=True), time.sleep(0.05)) for i in range(100000)]"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PHALANX_SERVER", "PHALANX_TOKEN")}
    env.update(PHALANX_HOME=str(home), PHALANX_SYSTEM_METRICS_INTERVAL="0")
    return env


def _fill(home: Path, jobs: int, lines: int, points: int) -> str:
    """``jobs`` finished jobs (as a team's history leaves them); one holds a log of
    ``lines`` lines and a metric of ``points`` steps. Returns that one's name."""
    from phalanx.workspace import JobStatus, Workspace

    ws = Workspace(home)
    big = ""
    for k in range(jobs):
        job = ws.create_job({"command": "true"}, spec_text="command: 'true'\n")
        ws.set_status(job.name, JobStatus.COMPLETED if k % 7 else JobStatus.FAILED)
        big = big or job.name
    paths = ws.paths(big)
    paths.user_logs.mkdir(parents=True, exist_ok=True)
    with open(paths.rank_log(0), "w") as f:
        f.writelines(
            f"step {i:07d} loss {1 / (i + 1):.6f} lr 0.1 img/s 812.4\n" for i in range(lines)
        )
    with open(Path(ws.get_job(big).job_dir) / "metrics.jsonl", "w") as f:
        for step in range(points):
            record = {"name": "loss", "value": 1 / (step + 1) + (step % 13) / 1000, "step": step}
            f.write(json.dumps(record) + "\n")
    return big


def _median_s(times: list[float]) -> float:
    return round(statistics.median(times), 3)


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    home = root / "home"
    big = _fill(home, args.jobs, args.lines, args.points)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [PHALANX, "server", "start", "--port", str(port)], env=_env(home),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/api/v1/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(url + "/static/studio.css")  # the browser itself warmed up

            times = []
            for _ in range(args.rounds):
                page.goto("about:blank")
                t0 = time.perf_counter()
                page.goto(url + "/")
                # The page shows one page of 50 (the server pages the list; issue 27).
                page.wait_for_selector(f"#jobs tr:nth-child({min(args.jobs, 50)})", timeout=60_000)
                times.append(time.perf_counter() - t0)
            out["jobs_page_first_render_s"] = _median_s(times)

            times = []
            last = f"step {args.lines - 1:07d}"
            for _ in range(args.rounds):
                page.goto("about:blank")
                t0 = time.perf_counter()
                page.goto(f"{url}/jobs/{big}")
                page.wait_for_selector(f"#log .ln:has-text('{last}')", timeout=60_000)
                times.append(time.perf_counter() - t0)
            out["job_page_log_tail_s"] = _median_s(times)
            out["log_lines_shown_first"] = page.locator("#log .ln").count()

            metrics = f"{url}/api/v1/jobs/{big}/metrics"
            for label, query in (("whole", ""), ("downsampled", "?points=2000")):
                t0 = time.perf_counter()
                answer = httpx.get(metrics + query, timeout=120)
                out[f"metrics_{label}"] = {
                    "s": round(time.perf_counter() - t0, 3),
                    "bytes": len(answer.content),
                    "points": len(answer.json()["metrics"]["loss"]),
                }
            times = []
            for _ in range(args.rounds):
                page.goto("about:blank")  # a new document each round, not a hash change
                t0 = time.perf_counter()
                page.goto(f"{url}/jobs/{big}#metrics")
                page.wait_for_selector('.chart[data-metric="loss"] canvas', timeout=60_000)
                times.append(time.perf_counter() - t0)
            out["metrics_tab_chart_drawn_s"] = _median_s(times)
            context.close()
            out["followers"] = _followers(browser, url, home, server.pid, args.followers)
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("PHALANX_HOME", "").startswith(str(root)):
                    proc.kill()
            except psutil.Error:
                pass
    return out


def _followers(browser: Any, url: str, home: Path, pid: int, count: int) -> dict[str, Any]:
    spec = home.parent / "ticks.yml"
    spec.write_text(TICKS)
    name = subprocess.run(
        [PHALANX, "job", "create", "-f", str(spec)], env=_env(home), capture_output=True,
        text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deadline = time.monotonic() + 120
    while "tick 5" not in httpx.get(f"{url}/api/v1/jobs/{name}/logs").text and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    server = psutil.Process(pid)

    def rss() -> int:  # uvicorn's parent and its serving processes (not the jobs: own sessions)
        procs = [
            server,
            *(
                p
                for p in server.children(recursive=True)
                if "uvicorn" in " ".join(p.cmdline()) or "multiprocessing" in " ".join(p.cmdline())
            ),
        ]
        return sum(p.memory_info().rss for p in procs)

    before = rss()
    contexts = [browser.new_context() for _ in range(count)]
    pages = [c.new_page() for c in contexts]
    for page in pages:
        page.goto(f"{url}/jobs/{name}")
    for page in pages:
        page.wait_for_selector("#log .ln", timeout=60_000)
    time.sleep(5)  # every stream running for a while
    mark = httpx.get(f"{url}/api/v1/jobs/{name}/logs/page?kib=1").json()["pages"][0]["lines"][-1]
    for page in pages:
        page.wait_for_selector(f"#log .ln:has-text('{mark}')", timeout=30_000)
    during = rss()
    latencies = _live_latencies(pages[0], seconds=5.0)
    for c in contexts:
        c.close()
    subprocess.run([PHALANX, "job", "cancel", name], env=_env(home), capture_output=True)
    return {
        "pages": count,
        "server_rss_before_mib": round(before / 2**20, 1),
        "server_rss_following_mib": round(during / 2**20, 1),
        "per_follower_kib": round((during - before) / count / 1024, 1),
        "live_line_lines": len(latencies),
        "live_line_p50_s": round(statistics.median(latencies), 3),
        "live_line_p99_s": round(statistics.quantiles(latencies, n=100)[98], 3),
    }


# Each log line the page adds from now on: now minus the time the rank printed in it.
_WATCH = """
() => {
  window.lags = [];
  new MutationObserver((changes) => {
    const now = Date.now() / 1000;
    for (const change of changes) for (const node of change.addedNodes) {
      const m = /tick \\d+ (\\d+\\.\\d+)/.exec(node.textContent || "");
      if (m) window.lags.push(now - parseFloat(m[1]));
    }
  }).observe(document.querySelector("#log"), {childList: true, subtree: true});
}
"""


def _live_latencies(page: Any, seconds: float) -> list[float]:
    """Seconds from a rank's print to the page showing the line, for ``seconds`` of lines."""
    page.evaluate(_WATCH)
    time.sleep(seconds)
    return [float(x) for x in page.evaluate("window.lags")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--followers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    }
    with tempfile.TemporaryDirectory(prefix="phalanx-bench-studio-") as tmp:
        results.update(run(args, Path(tmp)))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
