"""A database that blinks under running jobs, and a job two supervisors want, end to end.

Everything is real: PostgreSQL (a server of the test's own, so stopping it takes no
other test's database with it), the phalanx server, the scheduler, supervisors,
torchrun and the ranks. The jobs are tiny on purpose (a shell loop that prints a
numbered line every half second and keeps its count in the checkpoint folder, one
node of one process), so ten of them fit a 2-core machine beside twenty clients.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

import pg
import servers
from conftest import PHALANX, Cli, job_processes_under
from phalanx.workspace import Workspace

# A numbered line every half second until the job's gate file exists; the count
# survives in the checkpoint folder, so a new attempt would go on from it.
COUNT = """
command: |
  n=$(cat "$PHALANX_CHECKPOINT_DIR/n" 2>/dev/null || echo 0)
  while [ ! -e "$GATES/$PHALANX_JOB_NAME" ]; do
    echo "attempt=$PHALANX_ATTEMPT line=$n"
    n=$((n+1)); echo "$n" > "$PHALANX_CHECKPOINT_DIR/n"
    sleep 0.5
  done
  echo "attempt=$PHALANX_ATTEMPT end=$n"
environment_variables: {{GATES: "{gates}"}}
resources: {{cpus_per_instance: 0.1}}
"""
QUICK = "command: echo hi\nresources: {cpus_per_instance: 0.1}\n"
LINE = re.compile(r"^attempt=(\d+) (line|end)=(\d+)$")
DOWN = "database unavailable, retrying"


def _query(home: Path, url: str | None, sql: str, **params: object) -> list[dict[str, Any]]:
    ws = Workspace(home, db=url)
    try:
        return [dict(row) for row in ws.query(sql, params)]
    finally:
        ws.close()


def _log(home: Path, name: str) -> list[str]:
    path = home / "jobs" / name / "user_logs" / "std_log_process_0.txt"
    return path.read_text().splitlines() if path.exists() else []


def _numbered(home: Path, name: str) -> list[tuple[int, str, int]]:
    """The job's log as (attempt, kind, number); every line must be one of those."""
    out = []
    for line in _log(home, name):
        match = LINE.match(line)
        assert match, f"{name}: unexpected log line {line!r}"
        out.append((int(match[1]), match[2], int(match[3])))
    return out


def _until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.2)
    return value


def _supervisors(name: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            ours = "phalanx.jobs.supervisor" in cmd and name in cmd
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _attempt_processes(home: Path, name: str, attempt: int) -> list[psutil.Process]:
    found = []
    for proc in job_processes_under(home):
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if env.get("PHALANX_JOB_NAME") == name and env.get("PHALANX_ATTEMPT") == str(attempt):
                found.append(proc)
    return found


def _lines_in_order(home: Path, name: str, *, attempts: int = 1) -> None:
    """Every number once, in order, and no attempt's line after a later attempt's.

    Between two attempts one number may show twice: a rank stopped between printing a
    line and counting it prints it again when its job resumes.
    """
    lines = _numbered(home, name)
    counted = [(a, n) for a, kind, n in lines if kind == "line"]
    assert [a for a, _ in counted] == sorted(a for a, _ in counted), f"{name}: attempts overlap"
    assert {a for a, _ in counted} == set(range(1, attempts + 1))
    numbers = [n for _, n in counted]
    resumed = [k for k in range(1, len(counted)) if counted[k][0] != counted[k - 1][0]]
    for k in reversed(resumed):
        if numbers[k] == numbers[k - 1]:
            del numbers[k]
    assert numbers == list(range(len(numbers))), f"{name}: lines lost or repeated: {numbers}"
    assert lines[-1][1] == "end" and lines[-1][2] == numbers[-1] + 1


@pytest.mark.slow
def test_a_supervisor_whose_lease_is_taken_stops_its_ranks_and_writes_nothing(
    cli: Cli, tmp_path: Path, db: str | None
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    name = cli.create(cli.write("job.yml", COUNT.format(gates=gates)))
    _until("three lines", lambda: len(_log(cli.home, name)) >= 3, 90)
    [first] = _supervisors(name)
    assert _attempt_processes(cli.home, name, 1)

    def rows() -> tuple[list[dict[str, Any]], ...]:
        return (
            _query(cli.home, db, "SELECT * FROM jobs WHERE name = :n", n=name),
            _query(cli.home, db, "SELECT * FROM attempts WHERE job_name = :n", n=name),
            _query(cli.home, db, "SELECT * FROM allocations WHERE job_name = :n", n=name),
        )

    # The lease goes to a supervisor of another machine (as a scheduler would hand it
    # over); this machine's supervisor must stop its ranks and leave, writing nothing.
    ws = Workspace(cli.home, db=db)
    with ws.transaction() as tx:
        tx.execute(
            "UPDATE jobs SET lease_generation = lease_generation + 1,"
            " lease_holder = 'elsewhere:1' WHERE name = :n",
            {"n": name},
        )
    stolen = rows()
    assert stolen[0][0]["status"] == "Running" and stolen[1][0]["status"] == "Running"
    psutil.wait_procs([first], timeout=30)
    assert not first.is_running(), "the supervisor that lost its lease kept running"
    _until("attempt 1's processes gone", lambda: not _attempt_processes(cli.home, name, 1), 30)
    printed = len(_log(cli.home, name))
    time.sleep(1.5)  # three more lines' worth: a rank still printing would show here
    assert len(_log(cli.home, name)) == printed
    assert rows() == stolen, "the supervisor that lost its lease wrote to the database"
    supervisor_log = (cli.home / "jobs" / name / "system_logs" / "supervisor.txt").read_text()
    assert "was taken by another supervisor" in supervisor_log

    # Handed back (free again), a supervisor started by hand takes the job over.
    with ws.transaction() as tx:
        tx.execute(
            "UPDATE jobs SET lease_holder = NULL, supervisor_pid = NULL WHERE name = :n",
            {"n": name},
        )
    with open(cli.home / "jobs" / name / "system_logs" / "supervisor.txt", "ab") as log:
        second = subprocess.Popen(
            [sys.executable, "-m", "phalanx.jobs.supervisor", name],
            env=cli.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    _until("attempt 2's lines", lambda: any(a == 2 for a, _, _ in _numbered(cli.home, name)), 90)
    (gates / name).touch()
    assert second.wait(timeout=90) == 0
    job = cli.show(name)
    assert job["status"] == "Completed"
    assert [(a["status"], a["cause"]) for a in job["attempts"]] == [
        ("Failed", "infrastructure"),
        ("Succeeded", None),
    ]
    assert "superseded" in job["attempts"][0]["note"]
    [row] = _query(cli.home, db, "SELECT lease_generation FROM jobs WHERE name = :n", n=name)
    assert row["lease_generation"] == 3
    generations = _query(
        cli.home, db, "SELECT generation FROM attempts WHERE job_name = :n ORDER BY number", n=name
    )
    assert [g["generation"] for g in generations] == [1, 3]
    _lines_in_order(cli.home, name, attempts=2)  # attempt 2 went on from attempt 1's count
    ws.close()


@dataclass
class Answer:
    client: str
    began: float
    ended: float
    status: int
    """HTTP status, or the CLI's exit code."""
    text: str
    """The ``error`` of an HTTP answer, or the CLI's stderr."""


class Clients:
    """Twenty clients of the server: 16 readers and 2 job creators over HTTP, and the CLI
    in a loop listing jobs and creating them. ``phase`` says when a creator creates."""

    def __init__(self, url: str, env: dict[str, str], names: list[str], workdir: Path) -> None:
        self.url = url
        self.env = env
        self.names = names
        self.workdir = workdir
        self.phase = "before"
        self.answers: list[Answer] = []
        self.created: list[str] = []
        self.after = 0
        """Creators that created their job after the outage (3 when all have)."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            *(threading.Thread(target=self._reader, args=(k,)) for k in range(16)),
            *(threading.Thread(target=self._creator, args=(k,)) for k in range(2)),
            threading.Thread(target=self._cli_lister),
            threading.Thread(target=self._cli_creator),
        ]

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)
            assert not thread.is_alive(), "a client hung"

    def _note(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def _http(self, client: str, http: httpx.Client, method: str, path: str, **kw: Any) -> int:
        began = time.monotonic()
        response = http.request(method, "/api/v1" + path, **kw)
        try:
            body = response.json()
        except ValueError:
            body = None
        text = str(body.get("error", "")) if isinstance(body, dict) else response.text[:200]
        self._note(Answer(client, began, time.monotonic(), response.status_code, text))
        return response.status_code

    def _reader(self, k: int) -> None:
        paths = ["/jobs?limit=20", "/jobs/{}", "/jobs/{}/spec", "/health", "/queue"]
        with httpx.Client(base_url=self.url, timeout=60) as http:
            i = 0
            while not self._stop.wait(0.25):
                i += 1
                path = paths[(k + i) % len(paths)].format(self.names[(k + i) % len(self.names)])
                self._http(f"reader{k}", http, "GET", path)

    def _creator(self, k: int) -> None:
        made = {"before": 0, "after": 0}
        with httpx.Client(base_url=self.url, timeout=60) as http:
            n = 0
            while not self._stop.wait(3.0):
                phase = self.phase
                if phase != "down" and made[phase]:
                    continue
                n += 1
                name = f"http-{k}-{n}"
                body = {"spec": f"name: {name}\n{QUICK}", "source": "job.yml"}
                if self._http(f"creator{k}", http, "POST", "/jobs", json=body) == 201:
                    self._made(name, phase, made)

    def _made(self, name: str, phase: str, made: dict[str, int]) -> None:
        with self._lock:
            self.created.append(name)
            if phase != "down":
                made[phase] += 1
            if phase == "after":
                self.after += 1

    def _cli(self, client: str, *args: str) -> int:
        began = time.monotonic()
        proc = subprocess.run(
            [PHALANX, *args], env=self.env, cwd=self.workdir, capture_output=True, text=True,
            timeout=170,
        )  # fmt: skip
        self._note(Answer(client, began, time.monotonic(), proc.returncode, proc.stderr))
        return proc.returncode

    def _cli_lister(self) -> None:
        while not self._stop.wait(2.0):
            self._cli("cli-list", "job", "list", "--json")

    def _cli_creator(self) -> None:
        spec = self.workdir / "quick.yml"
        spec.write_text(QUICK)
        made = {"before": 0, "after": 0}
        n = 0
        while not self._stop.wait(4.0):
            phase = self.phase
            if phase != "down" and made[phase]:
                continue
            n += 1
            name = f"cli-{n}"
            if not self._cli(
                "cli-create", "job", "create", "-f", str(spec), "--set", f"name={name}"
            ):
                self._made(name, phase, made)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_minute_without_postgresql_fails_no_job_runs_none_twice_and_loses_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    # Beside the workspace, open to all: the server's jobs run walled off as accounts of
    # their own, which must see the gates (pytest's own folders are root's alone).
    gates = cli.home.parent / "gates"
    gates.mkdir()
    gates.chmod(0o755)
    with pg.own_server() as postgres:
        url = postgres.create_database()
        cli.env["PHALANX_DB"] = url
        # Ten small jobs at once: this machine's target declares the slots for their
        # launchers (one per slot; a 2-core machine declares 2 otherwise).
        cli.run("compute", "create", "--type", "local", "--name", "local", "--cpus", "12",
                check=True)  # fmt: skip
        server = servers.start_phalanx_server(cli.home, cli.env)
        try:
            _outage(cli, postgres, server, url, gates, tmp_path)
        finally:
            servers.kill_phalanx_server(server)


def _outage(
    cli: Cli, postgres: pg.Postgres, server: servers.PhalanxServer, url: str, gates: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    home = cli.home
    env = {k: v for k, v in cli.env.items() if k != "PHALANX_DB"}  # a client's, elsewhere
    env.update(PHALANX_SERVER=server.url, PHALANX_HOME=str(tmp_path / "laptop"))
    spec = cli.write("count.yml", COUNT.format(gates=gates))
    names = [f"run-{k}" for k in range(10)]
    for name in names:
        proc = subprocess.run(
            [PHALANX, "job", "create", "-f", str(spec), "--set", f"name={name}"],
            env=env, cwd=cli.workdir, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    for name in names:
        _until(f"{name} printing", lambda n=name: len(_log(home, n)) >= 2, 180)
    with Clients(server.url, env, names, cli.workdir) as clients:
        time.sleep(5)  # the clients at work with the database up
        counts = {name: len(_log(home, name)) for name in names}
        down_from = time.monotonic()
        clients.phase = "down"
        pg.pause(postgres)
        down = time.monotonic()
        while time.monotonic() < down + 60:  # the outage: a minute
            for name in names:
                alive = len(_supervisors(name))
                assert alive == 1, f"{name} has {alive} supervisors while the database is down"
            time.sleep(2)
        during = {name: len(_log(home, name)) - counts[name] for name in names}
        up_from = time.monotonic()
        pg.resume(postgres)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            _until("health", lambda: http.get("/api/v1/health").status_code == 200, 60)
        healthy = time.monotonic()
        clients.phase = "after"
        time.sleep(10)
        _until("the creators' jobs after the outage", lambda: clients.after == 3, 90)
    # The ranks kept training while the database was away (a line every 0.5 s).
    assert all(lines >= 60 for lines in during.values()), during
    answers = clients.answers
    for answer in answers:
        assert answer.status not in range(500, 600) or answer.status == 503, answer
    outage = [a for a in answers if a.began > down and a.ended < up_from]
    http_outage = [a for a in outage if not a.client.startswith("cli")]
    assert len(http_outage) > 500
    assert {(a.status, a.text) for a in http_outage} == {(503, DOWN)}

    def ok(answer: Answer) -> bool:
        return answer.status in ((0,) if answer.client.startswith("cli") else (200, 201))

    assert all(ok(a) for a in answers if a.ended < down_from)
    assert all(ok(a) for a in answers if a.began > healthy + 2)
    # The CLI: one line about the database (never "unreachable"), and a listing that
    # waited through the outage got its answer once the database was back.
    cli_answers = [a for a in answers if a.client.startswith("cli")]
    assert not any("Traceback" in a.text or "unreachable" in a.text for a in cli_answers)
    waited = [a for a in cli_answers if a.client == "cli-list" and a.began < up_from < a.ended]
    assert waited and all(a.status == 0 and DOWN in a.text for a in waited), waited
    refused = [a for a in cli_answers if a.client == "cli-create" and a.status != 0]
    assert refused and all(
        a.status == 2 and a.text.count("\n") == 1 and "database unavailable" in a.text
        for a in refused
    ), refused
    # Every job: done once, by one supervisor, in one attempt; nothing acknowledged lost.
    for name in names:
        (gates / name).touch()

    def ended() -> list[dict[str, Any]] | None:
        rows = _query(home, url, "SELECT * FROM jobs")
        over = all(r["status"] in ("Completed", "Failed", "Canceled") for r in rows)
        return rows if over else None

    jobs = _until("every job ended", ended, 180)
    by_name = {job["name"]: job for job in jobs}
    assert set(names) | set(clients.created) <= set(by_name)
    assert {job["status"] for job in jobs} == {"Completed"}
    attempts = _query(home, url, "SELECT job_name, number, status, generation FROM attempts")
    assert sorted((a["job_name"], a["number"], a["status"], a["generation"]) for a in attempts) == (
        sorted((name, 1, "Succeeded", 1) for name in by_name)
    )
    assert {job["lease_generation"] for job in jobs} == {1}
    for name in names:
        _lines_in_order(home, name)
    scheduler_log = (home / "scheduler.log").read_text()
    assert "database is unavailable" in scheduler_log and "Traceback" not in scheduler_log
