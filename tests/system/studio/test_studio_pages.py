"""Every page of the studio as a person reads it, in a real headless Chromium at 1280 px:
no raw JSON in its text, nothing wider than the window, sizes, times and outputs in
humane form, and system charts drawn against time.

One workspace and one server for the module. Two tiny real jobs run (one logs a metric
and writes outputs that are registered as a model and a data asset, the other logs
nothing, for compare); every other row a page needs to display (a model of a known size,
data assets, an environment, a benchmark run) is written through the CLI or, for the
benchmark run, as the file `phalanx bench` keeps, which is fast and shows the same.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import jobpython
import servers
from conftest import BIN, Cli, job_processes_under, workspace_processes
from test_studio import CHROMIUM, CHROMIUM_ARGS, browser, new_context  # noqa: F401  (the module's browser)

pytestmark = pytest.mark.slow

WIDTH = 1280
MIB = 1024 * 1024

# Runs a few seconds (the sampler's first minute takes a sample every 2 s), logs a
# metric, and writes an output registered as a model and one registered as data.
TRAIN = """
import os, sys, time
from phalanx.train import log_metric
out = os.environ["PHALANX_OUTPUTS_DIR"]
os.makedirs(os.path.join(out, "model"), exist_ok=True)
open(os.path.join(out, "model", "model.pt"), "wb").write(b"w" * 3000)
open(os.path.join(out, "stats", "s.txt"), "w").write("1")
for step in range(1, 31):
    log_metric("loss", 1.0 / step, step)
    time.sleep(0.2)
print("trained", flush=True)
"""


# Two trials of a sweep, for its page.
TRIAL = """
import sys
from phalanx.train import log_metric
log_metric("score", float(sys.argv[1]), step=0)
"""
SWEEP = """
type: sweep
experiment_name: pages-sweep
trial:
  code: src
  command: python trial.py ${{search_space.x}}
sampling_algorithm: {type: grid}
search_space: {x: {type: choice, values: [0.25, 0.75]}}
objective: {primary_metric: score, goal: maximize}
limits: {max_total_trials: 2, max_concurrent_trials: 2, timeout: 5m}
"""


@dataclass
class Pages:
    cli: Cli
    server: servers.PhalanxServer
    trained: str
    quiet: str
    sweep: str

    @property
    def url(self) -> str:
        return self.server.url


def _job(cli: Cli, name: str, text: str, more: str = "") -> str:
    cli.write(f"src/{name}.py", text)
    spec = cli.write(
        f"{name}.yml",
        f"command: python {name}.py\ncode: src\nexperiment_name: pages\n"
        "tags: {team: vision, stage: dev}\nlimits: {timeout: 300}\n" + more,
    )
    return cli.create(spec)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    root = tmp_path_factory.mktemp("pages")
    home, workdir = jobpython.workspace_home(root), root / "work"
    workdir.mkdir()
    env = dict(os.environ)
    env.update(
        PHALANX_HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        OMP_NUM_THREADS="1", PHALANX_CACHE_DIR=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
    )  # fmt: skip
    # The sampler's own schedule (fast first minute) is what the charts test draws.
    for name in ("PHALANX_DEBUG", "PHALANX_SERVER", "PHALANX_TOKEN", "PHALANX_DB",
                 "PHALANX_SYSTEM_METRICS_INTERVAL"):  # fmt: skip
        env.pop(name, None)
    cli = Cli(home, env, workdir)
    outputs = (
        "outputs:\n  model: {type: custom_model, name: pages-net}\n  stats: {name: pages-stats}\n"
    )
    trained = _job(cli, "train", TRAIN, more=outputs)
    quiet = _job(cli, "quiet", "print('nothing to log')\n")
    cli.write("src/trial.py", TRIAL)
    sweep = cli.create(cli.write("sweep.yml", SWEEP))
    # Rows that only need to exist: through the CLI.
    sized = workdir / "sized"
    sized.mkdir()
    (sized / "weights.bin").write_bytes(b"\0" * (MIB + MIB // 2))
    # Long words and many tags: what made the models page wider than the window.
    described = "a model of 1.5 MiB, " + "described at length " * 12
    tags = [f"--tag=key{i}=a-rather-long-value-{i}" for i in range(8)]
    cli.run("model", "create", "--name", "pages-sized", "--path", str(sized), "--tag",
            "team=vision", *tags, "--description", described, check=True)  # fmt: skip
    shared = home / "datastore" / "pages-shared"
    shared.mkdir(parents=True)
    (shared / "part-0.csv").write_text("a,b\n1,2\n")
    cli.run("data", "create", "--name", "pages-shared", "--path",
            "azureml://datastores/default/paths/pages-shared", check=True)  # fmt: skip
    cli.run("data", "create", "--name", "pages-local", "--path", str(sized), check=True)
    env_file = cli.write(
        "env.yml",
        "name: pages-env\nversion: '1'\nimage: python:3.11-slim\ntags: {cuda: none}\n"
        "description: the image the pages test names\n",
    )
    cli.run("environment", "create", "-f", str(env_file), check=True)
    run = "20000102-000000-data-abcdef"
    (home / "bench" / run).mkdir(parents=True)
    (home / "bench" / run / "results.json").write_text(json.dumps({
        "run": run, "kind": "data", "created_at": 946771200.0, "command": "phalanx bench data",
        "median": {"memory": 120.5}, "modes": {"memory": "in memory"},
        "config": {"rounds": 3, "sizes": {"image": 224, "batch": 32}},
    }))  # fmt: skip
    server = servers.start_phalanx_server(home, env, "--trust-jobs")
    try:
        assert cli.wait(trained, ("Completed", "Failed"))["status"] == "Completed"
        assert cli.wait(quiet, ("Completed", "Failed"))["status"] == "Completed"
        assert cli.wait(sweep, ("Completed", "Failed"))["status"] == "Completed"
        yield Pages(cli, server, trained, quiet, sweep)
    finally:
        servers.kill_phalanx_server(server)
        for proc in [*job_processes_under(home), *workspace_processes(home)]:
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:  # noqa: F811
    context = new_context(browser, viewport={"width": WIDTH, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert not errors, f"the page's script failed: {errors}"


def _reads_as_text_and_fits(page: Any, what: str) -> None:
    text = page.evaluate("document.body.innerText")
    for raw in ('{"', "[{"):
        assert raw not in text, f"{what}: raw JSON ({raw}) on the page:\n{text}"
    wide, window = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert wide <= window, f"{what}: {wide} px wide in a {window} px window"


def test_every_page_reads_as_text_and_fits_a_1280_px_window(
    pages: Pages, page: Any, tmp_path: Path
) -> None:
    job = pages.trained
    visits = [
        ("jobs", "/", f'tr[data-job="{job}"]'),
        ("job-overview", f"/jobs/{job}", "#attempts-table"),
        ("job-metrics", f"/jobs/{job}#metrics", "#system-charts .chart canvas"),
        ("job-logs", f"/jobs/{job}#logs", "#log .ln"),
        ("job-files", f"/jobs/{job}#files", '.tree[data-folder="outputs"]'),
        ("job-spec", f"/jobs/{job}#spec", "#spec-resolved"),
        ("sweep", f"/jobs/{pages.sweep}", "#trials tbody tr"),
        ("compare", f"/compare?jobs={job},{pages.quiet}&metric=loss", "#compare-chart canvas"),
        ("models", "/models", '#items tr[data-name="pages-sized"]'),
        ("model", "/models/pages-net", "#files"),
        ("data", "/data", '#items tr[data-name="pages-shared"]'),
        ("data-asset", "/data/pages-shared", "dl.grid"),
        ("environments", "/environments", '#items tr[data-name="pages-env"]'),
        ("environment", "/environments/pages-env", "dl.grid"),
        ("datastores", "/datastores", '#items tr[data-name="default"]'),
        ("datastore", "/datastores/default?path=pages-shared", "#ls"),
        ("compute", "/compute", ".target .host"),
        ("queue", "/queue", "#queues"),
        ("bench", "/bench", "#bench-chart canvas"),
    ]
    for name, path, ready in visits:
        page.goto(pages.url + path)
        page.wait_for_selector(ready)
        page.wait_for_timeout(200)  # a chart's legend, a second fetch, settle
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        _reads_as_text_and_fits(page, name)
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_sizes_times_and_tags_read_as_people_write_them(pages: Pages, page: Any) -> None:
    page.goto(pages.url + "/models")
    row = '#items tr[data-name="pages-sized"]'
    page.wait_for_selector(row)
    assert page.inner_text(f'{row} td[data-col="size"]') == "1.5 MiB"
    tags = page.locator(f'{row} td[data-col="tags"] .chip').all_inner_texts()
    assert tags[0] == "team=vision" and "key7=a-rather-long-value-7" in tags
    headers = page.locator("#items th").all_inner_texts()
    assert "CREATED_AT" not in headers and "created_at" not in headers
    assert any(h.lower() == "created" for h in headers)
    # A time: relative text, the exact ISO time on hover (its title), within the minute.
    created = page.locator(f'{row} td[data-col="created_at"] time')
    assert re.fullmatch(r"just now|\d+ (s|min) ago", created.inner_text())
    iso = (created.get_attribute("title") or "").split(" ")[0]
    when = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    assert abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds()) < 600
    # The model's files: sizes, a download that answers with the file.
    page.click(f"{row} a")
    page.wait_for_selector("#files")
    assert "1.5 MiB" in page.inner_text("#files")
    # Copied from a folder here: named, its path (and the registry's) not shown.
    assert "a local folder, copied into the registry" in page.inner_text("dl.grid")
    assert str(pages.cli.workdir) not in page.evaluate("document.body.innerText")
    got = httpx.get(pages.url + (page.get_attribute("#files a", "href") or ""))
    assert got.status_code == 200 and len(got.content) == MIB + MIB // 2
    # The job's overview: tags as chips, times relative with their ISO title.
    page.goto(f"{pages.url}/jobs/{pages.trained}")
    page.wait_for_selector("#overview .chip")
    assert {"team=vision", "stage=dev"} <= set(page.locator("#overview .chip").all_inner_texts())
    started = page.locator("#overview time").first
    assert re.search(r"ago|just now", started.inner_text())
    assert re.match(r"\d{4}-\d\d-\d\dT", started.get_attribute("title") or "")
    # No path of the server's disk on the job's page, nor on a data asset kept there.
    home = str(pages.cli.home)
    assert home not in page.evaluate("document.body.innerText")
    page.goto(f"{pages.url}/jobs/{pages.trained}#spec")
    resolved = page.wait_for_selector("#spec-resolved")
    assert resolved is not None and "code: a folder on the server\n" in resolved.inner_text()
    assert str(pages.cli.workdir) not in resolved.inner_text()
    page.goto(f"{pages.url}/data/pages-local")
    page.wait_for_selector("dl.grid")
    text = page.evaluate("document.body.innerText")
    assert "a folder on the server's disk" in text and str(pages.cli.workdir) not in text


def test_outputs_and_data_places_are_links_that_answer(pages: Pages, page: Any) -> None:
    page.goto(f"{pages.url}/jobs/{pages.trained}")
    model = page.wait_for_selector('#outputs tr[data-name="model"]')
    assert model is not None
    # To the job's files, shown on the same page.
    page.click('#outputs a.output[data-output="model"]')
    page.wait_for_selector('.tree[data-folder="outputs"] details[data-path="outputs/model"]')
    assert page.evaluate("location.hash") == "#files"
    # A download of the output as a tar, through the files API.
    tar = page.get_attribute('#outputs tr[data-name="model"] a[download]', "href") or ""
    got = httpx.get(pages.url + tar)
    assert got.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(got.content)) as packed:
        assert any(n.endswith("model.pt") for n in packed.getnames())
    # To the model it was registered as, and the data asset.
    for output, listed in (("model", "pages-net"), ("stats", "pages-stats")):
        link = f'#outputs tr[data-name="{output}"] a:has-text("{listed}")'
        href = page.get_attribute(link, "href")
        assert href and httpx.get(pages.url + href).status_code == 200
        page.goto(pages.url + href)
        page.wait_for_selector("dl.grid")
        assert listed in page.inner_text("h1")
        page.goto(f"{pages.url}/jobs/{pages.trained}")
        page.wait_for_selector('#outputs tr[data-name="model"]')
    # A data asset on a datastore links to that folder's listing.
    page.goto(f"{pages.url}/data")
    link = page.locator('#items tr[data-name="pages-shared"] td[data-col="path"] a')
    assert link.get_attribute("href") == "/datastores/default?path=pages-shared"
    link.click()
    page.wait_for_selector("#ls")
    assert "part-0.csv" in page.inner_text("#ls") and "8 B" in page.inner_text("#ls")


def test_system_charts_run_against_time_and_legends_show_the_latest(
    pages: Pages, page: Any
) -> None:
    job = httpx.get(f"{pages.url}/api/v1/jobs/{pages.trained}").json()
    took = job["ended_at"] - job["started_at"]
    got = httpx.get(f"{pages.url}/api/v1/jobs/{pages.trained}/metrics?elapsed=true").json()
    cpu = got["system"]["system/cpu_percent"]
    # A job of a few seconds gets points (every 2 s in the first minute), placed by time.
    assert len(cpu) >= 2, cpu
    xs = [x for x, _ in cpu]
    assert xs == sorted(xs) and xs[0] >= 0 and xs[-1] <= took + 5
    assert any(x != int(x) for x in xs) or xs[-1] - xs[0] >= 1  # seconds, not sample numbers
    page.goto(f"{pages.url}/jobs/{pages.trained}#metrics")
    chart = '#system-charts .chart[data-metric="system/cpu_percent"]'
    page.wait_for_selector(f"{chart} canvas")
    assert page.get_attribute(chart, "data-x") == "time"
    assert int(page.get_attribute(chart, "data-points") or 0) == len(cpu)
    # Without hovering: the latest value, never "--".
    for box in ('#metric-charts .chart[data-metric="loss"]', chart):
        values = page.locator(f"{box} .u-legend .u-value").all_inner_texts()
        assert values and "--" not in values, values
    loss = page.locator('#metric-charts .chart[data-metric="loss"] .u-legend .u-value')
    assert loss.nth(0).inner_text() == "30" and loss.nth(1).inner_text() == "0.0333333"
    # Compare: a job without the metric is named, the other drawn.
    page.goto(f"{pages.url}/compare?jobs={pages.trained},{pages.quiet}&metric=loss")
    page.wait_for_selector("#compare-chart canvas")
    missing = page.inner_text("#compare-missing")
    assert pages.quiet in missing and "loss" in missing and pages.trained not in missing
    labels = page.locator("#compare-chart .u-legend .u-label").all_inner_texts()
    assert pages.trained in labels and pages.quiet not in labels
