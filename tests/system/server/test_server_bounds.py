"""Bounded requests (issue 21): hostile input gets one line and a 4xx, never a 500.

Each attack goes through a real ``phalanx server`` with one serving process (so
the memory of the process that answered can be watched) on SQLite and on
PostgreSQL where the database matters, or through the CLI in a subprocess as a
user runs it. Every refusal is checked for its status, its one line, that
nothing was recorded, and that the server still answers afterwards.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import servers
from conftest import LOCAL_AND_SERVER, Cli
from phalanx.scheduler.model import Capacity, Host, NodeGrant, QueuedJob, Request, RunningJob
from phalanx.scheduler.placement import Free, never_fits
from phalanx.scheduler.policy import decide

pytestmark = pytest.mark.slow

MB = 1 << 20
# A YAML alias bomb of about 400 bytes: 9 levels of 9 aliases stand for 9**9 strings.
BOMB = (
    "command: echo\nidentity:\n  a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"  {this}: &{this} [" + ",".join([f"*{last}"] * 9) + "]\n"
        for last, this in zip("abcdefgh", "bcdefghi", strict=True)
    )
)
# The same through merge keys: each mapping merges the one before twice (2**40 keys).
MERGE_BOMB = "command: echo\nidentity:\n  m0: &m0 {x: 1, y: 2}\n" + "".join(
    f"  m{i}: &m{i}\n    <<: [*m{i - 1}, *m{i - 1}]\n" for i in range(1, 41)
)
HUGE = 10**30


@pytest.fixture
def served(cli: Cli, db: str | None) -> Iterator[servers.PhalanxServer]:
    """A server on the test's workspace and database, answering in one process."""
    server = servers.start_phalanx_server(cli.home, cli.env, "--workers", "1")
    yield server
    servers.kill_phalanx_server(server)


def _api(server: servers.PhalanxServer) -> httpx.Client:
    # A generous timeout: it only turns a hang into a failure.
    return httpx.Client(base_url=server.url + "/api/v1", timeout=60)


def _one_line(answer: httpx.Response, status: int | tuple[int, ...], *words: str) -> str:
    """The refusal's line, after checking it is one, with ``status`` and ``words``."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert answer.status_code in statuses, (answer.status_code, answer.text[:500])
    line = answer.json()["error"]
    assert isinstance(line, str) and line and "\n" not in line, line
    assert "Traceback" not in line and "internal server error" not in line, line
    for word in words:
        assert word in line, (word, line)
    return line


def _still_answers(api: httpx.Client) -> None:
    assert api.get("/health").json()["status"] == "ok"
    assert api.get("/jobs").status_code == 200  # the database too


def _peak_growth(pid: int, act: Callable[[], httpx.Response]) -> tuple[httpx.Response, int]:
    """``act()``'s answer and how far the process's resident memory rose above where it
    was before, at its highest while ``act`` ran (the kernel's high-water mark, reset
    first)."""
    before = psutil.Process(pid).memory_info().rss
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from now
    answer = act()
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]
    return answer, peak_kib * 1024 - before


# -- the alias bomb and the huge counts: bounded memory ----------------------------------

# The bomb's anchors as one flow mapping, for --set identity={...}.
BOMB_FLOW = "{" + BOMB.split("identity:\n")[1].strip().replace("\n", ", ").replace("  ", "") + "}"
PYTORCH = "distribution: {type: pytorch, process_count_per_instance: %d}\n"
ATTACKS = [
    # (what, body of POST /jobs, words the refusal holds)
    ("alias bomb", {"spec": BOMB}, ("job.yml:", "more than 10000", "aliases")),
    ("merge-key bomb", {"spec": MERGE_BOMB}, ("more than 10000",)),
    (
        "alias bomb in --set",
        {"spec": "command: echo\n", "overrides": [f"identity={BOMB_FLOW}"]},
        ("--set", "more than 10000"),
    ),
    ("recursive alias", {"spec": "command: echo\nidentity: &x {a: *x}\n"}, ("hold itself",)),
    ("deep nesting", {"spec": "command: echo\nidentity: " + "[" * 300_000}, ("100 levels",)),
    (
        "instance_count 10**30",
        {"spec": f"command: echo\nresources: {{instance_count: {HUGE}}}\n"},
        ("job.yml:2: resources.instance_count:", str(HUGE), "runs at most"),
    ),
    (
        "process_count_per_instance 10**30",
        {"spec": "command: echo\n" + PYTORCH % HUGE},
        ("distribution.process_count_per_instance:", str(HUGE), "at most"),
    ),
    (
        "tensorflow workers 10**30",
        {"spec": f"command: echo\ndistribution: {{type: tensorflow, worker_count: {HUGE}}}\n"},
        ("distribution.worker_count:", "at most"),
    ),
    (
        "an integer of 5000 digits",
        {"spec": "command: echo\nretry: {max_attempts: " + "9" * 5000 + "}\n"},
        ("5000 characters",),
    ),
]


def test_alias_bombs_and_huge_counts_are_refused_in_bounded_memory(
    cli: Cli, db: str | None, served: servers.PhalanxServer
) -> None:
    with _api(served) as api:
        # Warm up: the first spec a process reads imports the spec's models.
        valid = "command: echo\nidentity: {a: &a [1, 2], b: *a}\nresources: {instance_count: 1}\n"
        assert api.post("/jobs", json={"spec": valid, "validate_only": True}).status_code == 201
        for what, body, words in ATTACKS:
            started = time.monotonic()
            answer, growth = _peak_growth(served.proc.pid, lambda b=body: api.post("/jobs", json=b))
            took = time.monotonic() - started
            _one_line(answer, 422, *words)
            assert growth < 50 * MB, f"{what}: the server grew by {growth / MB:.0f} MB"
            assert took < 30, f"{what}: {took:.1f} s"  # a hang, not a timing goal
        assert api.get("/jobs").json()["jobs"] == []  # nothing was created
        _still_answers(api)


# -- control characters anywhere -----------------------------------------------------------

SPEC = "command: echo hi\n"


def _requests() -> list[tuple[str, str, dict[str, Any], tuple[str, ...]]]:
    """(method, url, httpx arguments, words of the refusal), each carrying a control
    character where a name, filter, path or text goes."""
    return [
        ("GET", "/jobs/a%00b", {}, ("path", "U+0000 (NUL)")),
        ("GET", "/jobs/a%07b", {}, ("path", "U+0007 (BEL)")),
        ("GET", "/jobs/a%00b/logs", {}, ("U+0000",)),
        ("POST", "/jobs/a%00b/cancel", {}, ("U+0000",)),
        ("GET", "/models/m%00", {}, ("U+0000",)),
        ("GET", "/datastores/d%00/ls", {}, ("U+0000",)),
        ("GET", "/jobs", {"params": {"experiment": "a\x00b"}}, ("'experiment'", "U+0000")),
        ("GET", "/jobs", {"params": {"experiment": "\x1b[31mred"}}, ("U+001B (ESC)",)),
        ("GET", "/jobs", {"params": {"status": "Queued\x00"}}, ("'status'",)),
        ("GET", "/models", {"params": {"name": "m\x00"}}, ("'name'",)),
        ("POST", "/jobs", {"json": {"spec": "command: echo\x00\n"}}, ("spec:", "line 1")),
        ("POST", "/jobs", {"json": {"spec": SPEC, "source": "j\x07.yml"}}, ("source:",)),
        ("POST", "/jobs", {"json": {"spec": SPEC, "overrides": ["a=\x00"]}}, ("overrides[0]",)),
        ("POST", "/jobs", {"json": {"spec": SPEC, "k\x00": 1}}, ("the key holds",)),
        # Escaped in the YAML: the JSON is clean, the spec loader finds it (and the line).
        ("POST", "/jobs", {"json": {"spec": SPEC + 'experiment_name: "a\\0b"\n'}},
         ("job.yml:2:", "U+0000")),
        ("POST", "/jobs", {"json": {"spec": SPEC + 'description: "a\\x07b"\n'}}, ("job.yml:2:",)),
        ("POST", "/jobs", {"json": {"spec": SPEC + 'tags: {"a\\0": b}\n'}}, ("job.yml:2:",)),
        ("POST", "/jobs", {"content": b'{"spec": "command: x\\u0000"}'}, ("spec:", "U+0000")),
        ("POST", "/jobs", {"content": b'{"spec": "command: x\\ud800"}',
                           "headers": {"content-type": "application/json"}}, ("lone surrogate",)),
        ("POST", "/models", {"json": {"name": "m\x00", "path": "azureml://datastores/default/paths/x"}},
         ("name:",)),
        ("POST", "/data", {"json": {"name": "d", "path": "azureml://datastores/default/paths/\x00"}},
         ("path:",)),
        ("POST", "/datastores", {"json": {"name": "d\x00", "type": "local", "path": "/tmp"}},
         ("name:",)),
        ("POST", "/compute", {"json": {"name": "c\x07", "type": "local"}}, ("name:",)),
    ]  # fmt: skip


def test_control_characters_anywhere_get_one_line_4xx(
    cli: Cli, db: str | None, served: servers.PhalanxServer
) -> None:
    with _api(served) as api:
        for method, url, kwargs, words in _requests():
            answer = api.request(method, url, **kwargs)
            _one_line(answer, (400, 422), *words)
        assert api.get("/jobs").json()["jobs"] == []
        assert api.get("/models").json()["models"] == []
        # Text where text goes keeps its tabs and line breaks.
        fine = SPEC + 'description: "two\\tcolumns\\nand lines"\n'
        assert api.post("/jobs", json={"spec": fine, "validate_only": True}).status_code == 201
        _still_answers(api)


# -- limits on tags, fields, bodies and archives ---------------------------------------------


def test_tags_fields_and_bodies_over_their_limits_are_refused(
    cli: Cli, db: str | None, served: servers.PhalanxServer
) -> None:
    tags = "".join(f"  t{i}: {'x' * 10_000}\n" for i in range(999))
    many = "".join(f"  t{i}: v\n" for i in range(101))
    cases = [
        (SPEC + "tags:\n" + tags[:900_000], ("tags.t0:", "10000 characters", "at most 1024")),
        (SPEC + "tags:\n" + many, ("tags:", "101 tags", "at most 100")),
        (SPEC + f"tags: {{{'k' * 300}: v}}\n", ("the key is 300 characters",)),
        (SPEC + f"description: {'d' * 5000}\n", ("description:", "at most 4096")),
        (SPEC + f"display_name: {'n' * 300}\n", ("display_name:", "at most 256")),
        (SPEC + f"$schema: {'s' * 900_000}\n", ("$schema:", "at most 2048")),
        (SPEC + f"identity: {{blob: {'i' * 20_000}}}\n", ("identity:", "only records it")),
        (SPEC + "limits: {timeout: 99999999d}\n", ("limits.timeout:", "at most a year")),
        (SPEC + "queue_settings: {priority: 100000000000}\n", ("priority", "from 0 to 1000")),
    ]
    with _api(served) as api:
        for spec, words in cases:
            _one_line(api.post("/jobs", json={"spec": spec}), 422, *words)
        # The whole spec, and the body around it.
        _one_line(api.post("/jobs", json={"spec": SPEC + "#" * (1 << 20)}), 422, "spec:")
        big = api.post("/jobs", json={"spec": SPEC, "unknown": "u" * (10 * MB)})
        _one_line(big, 413, "larger than 4194304 bytes")
        unknown = api.post("/models", json={"name": "m", "path": "azureml://x", "junk": "u"})
        _one_line(unknown, 422, "junk", "Extra inputs are not permitted")
        model = {"name": "m", "path": "azureml://datastores/default/paths/x"}
        _one_line(api.post("/models", json={**model, "tags": {str(i): "v" for i in range(500)}}),
                  400, "model 'm': tags: 500 tags")  # fmt: skip
        assert api.get("/jobs").json()["jobs"] == []
        _still_answers(api)


def _archive(entries: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(entries):
            tar.addfile(tarfile.TarInfo(f"src/f{i}"), io.BytesIO(b""))
    return buf.getvalue()


@pytest.mark.parametrize("cli", ["local"], indirect=True)
def test_an_upload_of_100000_empty_files_is_refused_unpacked(
    cli: Cli, served: servers.PhalanxServer
) -> None:
    archive = _archive(100_000)
    assert len(archive) < MB  # the 620 KB
    with _api(served) as api:

        def upload() -> str:
            answer = api.put("/uploads", content=archive)
            assert answer.status_code == 201, answer.text
            return str(answer.json()["upload"])

        refused = api.post("/data", json={"name": "many", "upload": upload()})
        _one_line(refused, 413, "more than 10000 files and folders")
        job = {"spec": "command: ls\ncode: src\n", "upload": upload(), "places": {"code": "src"}}
        _one_line(api.post("/jobs", json=job), 413, "more than 10000")
        assert api.get("/data").json()["assets"] == []
        _still_answers(api)
    # Nothing of either was unpacked, and the uploads were used up.
    for folder in ("server/uploads", "server/bundles", "datastore/uploads"):
        top = cli.home / folder
        left = [p for p in top.rglob("*") if p.is_file()] if top.exists() else []
        assert left == [], (folder, left[:5])


# -- the other 500s: a log offset of 10**23, a SAS token that is not one ---------------------


@pytest.mark.parametrize("cli", ["local"], indirect=True)
def test_log_offsets_beyond_any_file_get_one_line(cli: Cli, served: servers.PhalanxServer) -> None:
    with _api(served) as api:
        created = api.post("/jobs", json={"spec": "command: echo hello\n"})
        assert created.status_code == 201, created.text
        name = created.json()["name"]
        deadline = time.monotonic() + 120
        while api.get(f"/jobs/{name}").json()["status"] not in ("Completed", "Failed"):
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.2)
        far = "0:100000000000000000000000"
        _one_line(api.get(f"/jobs/{name}/logs", params={"at": far}), 400, "at: give rank:offset")
        events = api.get(f"/jobs/{name}/logs/events", params={"at": far})
        _one_line(events, 400, "at:")
        _one_line(api.get(f"/jobs/{name}/logs", params={"at": "9" * 40 + ":0"}), 400, "at:")
        answer = api.get(f"/jobs/{name}/logs", params={"at": "0:0"})
        assert answer.status_code == 200 and answer.json()["files"][0]["size"] > 0
        _still_answers(api)


@pytest.mark.parametrize("cli", ["server"], indirect=True)
def test_a_sas_token_or_connection_string_that_is_none_gets_one_line(
    cli: Cli, azurite: servers.Azurite
) -> None:
    container = f"c{uuid.uuid4().hex[:12]}"
    azurite.container(container)
    base = [
        "datastore", "create", "--type", "azure_blob", "--account-name", servers.AZURITE_ACCOUNT,
        "--container-name", container, "--endpoint", azurite.endpoint, "--store",
    ]  # fmt: skip
    garbage = {
        "sas_token": ["garbage-secret-1", "sig=%ZZsecret2", "sv=1&sp=rl", "a;b=secret3", "sig=a b"],
        "connection_string": ["a;secret4;b", "AccountName=x;secret5"],
    }
    for auth, values in garbage.items():
        for i, value in enumerate(values):
            started = time.monotonic()
            proc = cli.run_input(value + "\n", *base, "--name", f"d{i}", "--auth", auth)
            assert proc.returncode == 2, proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
            assert "Traceback" not in proc.stderr and "internal server error" not in proc.stderr
            assert value not in proc.stdout + proc.stderr  # the value is never echoed
            assert time.monotonic() - started < 30  # no minute of the SDK's retries
    assert "not a SAS token" in cli.run_input("x\n", *base, "--name", "x", "--auth",
                                              "sas_token").stderr  # fmt: skip
    # None was kept (names, not text: the workspace's random path may hold "d0").
    listed = cli.run("datastore", "list", check=True).stdout.splitlines()
    names = {line.split()[0] for line in listed if line.strip()}
    assert not names & {"d0", "d1", "x"}, listed
    # A real one works: the check refuses only what is no SAS token.
    sas = azurite.sas(container, "rl")
    good = cli.run_input(sas + "\n", *base, "--name", "good", "--auth", "sas_token")
    assert good.returncode == 0, good.stderr


# -- the CLI: one line and exit 2, locally and through a server ------------------------------

FILES = {
    "nul.yml": ("command: echo hi\x00\n", "nul.yml:1: control character U+0000 (NUL)"),
    "bel.yml": ("command: echo\ndescription: ring\x07\n", "bel.yml:2: control character U+0007"),
    "esc.yml": ("command: echo \x1b[2J\n", "esc.yml:1: control character U+001B (ESC)"),
    "escaped.yml": ('command: "echo \\0"\n', "escaped.yml:1: control character U+0000 (NUL) in"),
    "bomb.yml": (BOMB, "bomb.yml:7: more than 10000 keys and values"),
    "deep.yml": ("command: echo\nidentity: " + "[" * 5000 + "]" * 5000 + "\n", "100 levels"),
    "nodes.yml": (
        f"command: echo\nresources:\n  instance_count: {HUGE}\n",
        f"nodes.yml:3: resources.instance_count: {HUGE} nodes, but compute 'local' runs at most",
    ),
    "big.yml": ("command: echo\n# " + "x" * (5 * MB) + "\n", "big.yml: more than 4194304 bytes"),
    "stamp.yml": ("command: echo\ndescription: 2020-13-45\n", "stamp.yml:2: the value cannot"),
}


@LOCAL_AND_SERVER
def test_job_validate_and_create_print_one_line_and_exit_2(cli: Cli) -> None:
    for name, (text, says) in FILES.items():
        path = cli.workdir / name
        path.write_text(text)
        for verb in ("validate", "create"):
            started = time.monotonic()
            proc = cli.run("job", verb, "-f", str(path), timeout=60)
            assert proc.returncode == 2, (name, verb, proc.stderr[-2000:])
            lines = proc.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), (name, proc.stderr[-2000:])
            assert says in lines[0], (name, lines[0])
            assert time.monotonic() - started < 30
    # --set values go through the same loader.
    spec = cli.write("ok.yml", "command: echo\n")
    proc = cli.run("job", "validate", "-f", str(spec), "--set", "description=ring\x07")
    assert proc.returncode == 2 and "--set" in proc.stderr and "U+0007" in proc.stderr
    assert proc.stderr.count("\n") == 1
    # An environment file too.
    env = cli.write("env.yml", BOMB.replace("command: echo\n", "name: e\nimage: x\n"))
    proc = cli.run("environment", "create", "-f", str(env))
    assert proc.returncode == 2 and "more than 10000" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert json.loads(cli.run("job", "list", "--json", check=True).stdout) == []


def test_launchers_never_exceed_the_cpu_slots_a_local_target_declares(cli: Cli) -> None:
    cli.run("compute", "create", "--type", "local", "--name", "local", "--cpus", "2",
            "--gpus", "none", check=True)  # fmt: skip
    two = cli.write("two.yml", "command: echo\nresources: {instance_count: 2}\n")
    assert cli.run("job", "validate", "-f", str(two)).returncode == 0  # the demo's 2 nodes
    three = cli.write("three.yml", "command: echo\nresources: {instance_count: 3}\n")
    proc = cli.run("job", "create", "-f", str(three))
    assert proc.returncode == 2
    assert "resources.instance_count: 3 nodes, but compute 'local' runs at most 2" in proc.stderr
    ranks = cli.write(
        "ranks.yml",
        "command: echo\nresources: {instance_count: 2}\n"
        "distribution: {type: pytorch, process_count_per_instance: 5}\n",
    )
    proc = cli.run("job", "validate", "-f", str(ranks))
    assert proc.returncode == 2 and "runs at most 8 processes" in proc.stderr, proc.stderr


# -- the scheduler: counts bounded before any loop -------------------------------------------

LOCAL = Capacity("local", (Host("localhost", (), 2.0, 8 << 30, launchers=2),))


def test_a_request_larger_than_the_target_is_answered_without_placing_its_nodes() -> None:
    started = time.monotonic()
    reason = never_fits(Request(nodes=HUGE, cpus=1e-30), LOCAL)
    assert reason is not None and "runs at most 2 at once" in reason
    assert Free.of(LOCAL).place(Request(nodes=HUGE), spread=False) is None
    ray = Capacity("ray", tuple(Host(f"n{i}", (), 4.0) for i in range(3)), spread=True)
    assert Free.of(ray).place(Request(nodes=HUGE, cpus=1.0), spread=True) is None
    assert time.monotonic() - started < 5  # a hang, not a timing goal


def test_launchers_are_counted_across_jobs_on_a_machine() -> None:
    holding = RunningJob(
        "first", (NodeGrant("localhost", cpus=0.1), NodeGrant("localhost", cpus=0.1))
    )
    queued = QueuedJob("second", Request(nodes=1, cpus=0.1), submitted=1.0)
    decision = decide(LOCAL, [holding], [queued], now=2.0)
    assert "second" not in decision.admit
    assert "0 launchers free" in decision.waiting["second"]
    # Once the first has ended, it starts.
    assert "second" in decide(LOCAL, [], [queued], now=3.0).admit


# -- every route, a little fuzzing ------------------------------------------------------------

# Path segments (already percent-encoded), query values and JSON values no route expects.
HOSTILE_SEGMENTS = ["a%00b", "%07", "9" * 40, "%2e%2e", "x" * 3000, "%ff%fe", "-1"]
HOSTILE_VALUES: list[Any] = ["a\x00b", "\x1b[2J", "9" * 40, "-1", "x" * 5000, "", HUGE, -HUGE,
                             1e308, [], {}, None, True]  # fmt: skip


def _hostile_requests(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, url, httpx arguments) for every route of the OpenAPI document: hostile path
    segments, then each query parameter and each JSON body field given hostile values."""
    for template, item in doc["paths"].items():
        for method, operation in item.items():
            url = template.removeprefix("/api/v1")
            names = re.findall(r"\{(\w+)(?::path)?\}", url)

            def filled(value: str, url: str = url) -> str:
                return re.sub(r"\{\w+(?::path)?\}", value, url)

            for segment in HOSTILE_SEGMENTS if names else []:
                yield method.upper(), filled(segment), {}
            plain = filled("nothing_here")
            for param in operation.get("parameters", []):
                if param.get("in") != "query":
                    continue
                for value in HOSTILE_VALUES:
                    if isinstance(value, (list, dict)) or value is None:
                        continue
                    yield method.upper(), plain, {"params": {param["name"]: str(value)}}
            body = operation.get("requestBody", {}).get("content", {})
            if "application/json" not in body:
                continue
            ref = body["application/json"]["schema"].get("$ref", "")
            schema = doc["components"]["schemas"].get(ref.rsplit("/", 1)[-1], {})
            for field in schema.get("properties", {}):
                for value in HOSTILE_VALUES:
                    yield method.upper(), plain, {"json": {field: value}}
            deep = {"content": b"[" * 100_000, "headers": {"content-type": "application/json"}}
            yield method.upper(), plain, deep


def test_no_route_answers_500_to_hostile_input(
    cli: Cli, db: str | None, served: servers.PhalanxServer
) -> None:
    with _api(served) as api:
        doc = api.get("/openapi.json").json()
        failures = []
        count = 0
        for method, url, kwargs in _hostile_requests(doc):
            if url == "/uploads":
                continue  # its body is an archive: the upload tests cover it
            answer = api.request(method, url, **kwargs)
            count += 1
            if answer.status_code >= 500:
                failures.append((method, url[:80], str(kwargs)[:120], answer.status_code))
        assert count > 500  # every route was reached
        assert failures == [], failures[:10]
        _still_answers(api)
    log = served.log.read_text()
    assert "Traceback" not in log, log[-3000:]


@LOCAL_AND_SERVER
def test_an_environment_file_with_tags_that_are_no_mapping_gets_one_line(cli: Cli) -> None:
    env = cli.write("env.yml", "name: tagged\nimage: docker.io/library/python:3.11\ntags: [a, b]\n")
    proc = cli.run("environment", "create", "-f", str(env))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "tags: give a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr
