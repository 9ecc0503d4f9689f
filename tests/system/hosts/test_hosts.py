"""phalanx on hosts that share nothing but the network (tests/hostbed.py).

Each host is a set of namespaces of this machine: its own network stack and
address, its own /tmp, $HOME and /dev/shm, its own process table and host
name. What a test checks here is what only shows across machines: a client
whose files the server cannot see, a server whose paths the client cannot
open, a client that goes away for good.

Needs root (CI runs as root); the bed refuses to start otherwise.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import hostbed
from hostbed import Host, HostBed

pytestmark = pytest.mark.timeout(600)

SERVER_HOME = "/root/phalanx-server"
"""Not ``~/phalanx``: a checkout cloned there is on every host, read-only."""
PORT = 8765


def test_hosts_share_nothing_but_the_network(tmp_path: Path) -> None:
    with HostBed(["a", "b"]) as bed:
        a, b = bed["a"], bed["b"]
        assert a.run(["hostname"]).stdout.strip() == "a"
        assert b.run(["hostname"]).stdout.strip() == "b"
        # Files: /tmp, $HOME and /dev/shm are each host's own; the test's are nobody's.
        for path in ("/tmp/note", "/root/note", "/dev/shm/note"):
            a.write(path, "a's")
            assert a.exists(path) and not b.exists(path), path
        assert tmp_path.exists() and not a.exists(str(tmp_path))
        # Processes: b's table does not hold a's sleeper; /proc shows a host's own only.
        sleeper = a.popen(["sleep", "300"], stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30  # the sleeper has run sleep, on a busy machine
            while "sleep" not in (ps_a := a.run(["ps", "-e", "-o", "comm="]).stdout.split()):
                assert time.monotonic() < deadline, ps_a
                time.sleep(0.2)
            ps_b = b.run(["ps", "-e", "-o", "comm="]).stdout.split()
            assert "sleep" in ps_a and "sleep" not in ps_b
            assert "pytest" not in " ".join(ps_a) and len(ps_a) < 10, ps_a
        finally:
            sleeper.kill()
            sleeper.wait(timeout=10)
        # Network: b serves on its address; a reaches it there and nowhere else.
        server = b.popen(
            [sys.executable, "-m", "http.server", "--bind", b.address, "8000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            fetch = (
                "import sys, time, urllib.request\n"
                "for _ in range(100):\n"
                "    try:\n"
                "        urllib.request.urlopen(sys.argv[1], timeout=2); print('ok'); break\n"
                "    except OSError as exc:\n"
                "        err = exc; time.sleep(0.1)\n"
                "else:\n"
                "    print('unreachable', err)\n"
            )
            assert (
                a.run([sys.executable, "-c", fetch, f"http://{b.address}:8000/"]).stdout == "ok\n"
            )
            # a's loopback is a's own: b's server is not on it.
            once = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)"
            assert a.run(
                [sys.executable, "-c", once, "http://127.0.0.1:8000/"], check=False
            ).returncode
            # A cut link: b is unreachable until it is healed.
            bed.cut("b")
            assert a.run([sys.executable, "-c", once, f"http://{b.address}:8000/"],
                         check=False).returncode  # fmt: skip
            bed.heal("b")
            assert (
                a.run([sys.executable, "-c", fetch, f"http://{b.address}:8000/"]).stdout == "ok\n"
            )
        finally:
            server.kill()
            server.wait(timeout=10)
        # The install is shared read-only: no host writes into the checkout.
        assert a.run(["touch", str(hostbed.REPO / "written-by-a")], check=False).returncode
    assert hostbed.leftovers(bed.bed) == []


# Run in a checkout of its own: a bed whose checkout and venv a private mount hides.
IN_A_CHECKOUT = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import hostbed
with hostbed.HostBed(["a"]) as bed:
    a = bed["a"]
    seen = {
        "kept": hostbed.kept(),
        "prefix": a.run([sys.executable, "-c", "import sys; print(sys.prefix)"]).stdout.strip(),
        "read": a.run(["cat", sys.argv[1] + "/mark"]).stdout,
        "touch": a.run(["touch", sys.argv[1] + "/mark"], check=False).returncode,
        "beside": a.exists(sys.argv[2]),
    }
print(json.dumps({**seen, "left": hostbed.leftovers(bed.bed)}))
"""


def test_a_checkout_in_tmp_with_its_venv_is_on_every_host_read_only(tmp_path: Path) -> None:
    """Cloned into /tmp (or ~), the checkout and its venv lie where each host has a private
    mount: the bed binds them back, read-only, beside the interpreter the venv links to."""
    checkout = tmp_path / "phalanx"
    (checkout / "tests").mkdir(parents=True)
    (checkout / "tests" / "hostbed.py").write_text(
        (hostbed.REPO / "tests" / "hostbed.py").read_text()
    )
    (checkout / "tests" / "mark").write_text("the checkout's\n")
    (tmp_path / "beside").mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkout / ".venv")],
                   check=True, timeout=120)  # fmt: skip
    venv_python = str(checkout / ".venv" / "bin" / "python")
    run = subprocess.run([venv_python, "-c", IN_A_CHECKOUT, str(checkout / "tests"),
                          str(tmp_path / "beside")], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout)
    assert str(checkout) in seen["kept"], seen  # the venv inside it: one mount for both
    assert seen["prefix"] == str(checkout / ".venv"), seen  # the venv's python runs there
    assert seen["read"] == "the checkout's\n" and seen["touch"] != 0, seen
    assert seen["beside"] is False and seen["left"] == [], seen  # only the checkout


def test_the_bed_leaves_nothing_behind_after_a_failure_or_a_killed_test() -> None:
    with pytest.raises(RuntimeError, match="a test that fails"), HostBed(["x"]) as bed:
        bed["x"].popen(["sleep", "300"])
        raise RuntimeError("a test that fails")
    assert hostbed.leftovers(bed.bed) == []
    # A test process killed outright leaves its bed; the next bed removes it.
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); import hostbed\n"
        "bed = hostbed.HostBed(['y']).__enter__(); print('up', bed.bed, flush=True)\n"
        "time.sleep(300)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(hostbed.REPO / "tests")], stdout=subprocess.PIPE
    )
    try:
        assert owner.stdout is not None
        up, killed = owner.stdout.readline().decode().split()
        assert up == "up" and hostbed.leftovers(killed) != []
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    removed = hostbed.sweep_stale()
    assert any(ns.endswith("-y") for ns in removed), removed
    assert hostbed.leftovers(killed) == []


def start_postgresql(host: Host) -> str:
    """PostgreSQL on ``host``, as a team installs it beside its server: its files in the
    host's own /tmp, listening on the host's own loopback (tests/pg.py, run there); the
    database's URL."""
    start_pg = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import pg; "
        "print(json.dumps(pg.start().create_database()))"
    )
    made = host.run([sys.executable, "-c", start_pg, str(hostbed.REPO / "tests")])
    return str(json.loads(made.stdout))


@pytest.fixture
def team() -> Iterator[HostBed]:
    """A server host running PostgreSQL and ``phalanx server start`` on it, and a client
    host with only the CLI."""
    with HostBed(["server", "client"]) as bed:
        server = bed["server"]
        env = server.env(PHALANX_HOME=SERVER_HOME, PHALANX_DB=start_postgresql(server))
        token = server.run(["phalanx", "server", "token", "create", "--user", "alice"],
                           env).stdout.split()[0]  # fmt: skip
        start = (f"exec phalanx server start --host {server.address} --port {PORT} "
                 "--workers 1 >/root/server.log 2>&1")  # fmt: skip
        proc = server.popen(["sh", "-c", start], env)
        bed.token = token  # type: ignore[attr-defined]
        bed.url = f"http://{server.address}:{PORT}"  # type: ignore[attr-defined]
        _wait_answering(bed["client"], bed.url)  # type: ignore[attr-defined]
        yield bed
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _wait_answering(host: Host, url: str, timeout: float = 60.0) -> None:
    probe = (  # any HTTP answer will do (an error status is an answer too)
        "import sys, urllib.error, urllib.request\n"
        "try:\n"
        "    urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)\n"
        "except urllib.error.HTTPError:\n"
        "    pass\n"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if host.run([sys.executable, "-c", probe, url], check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the server at {url} did not answer {host.name} within {timeout} s")


def _story(bed: HostBed, name: str, seen: str) -> str:
    """What the server host kept of job ``name``, for a failed assertion's message."""
    logs = bed["server"].run(
        ["sh", "-c", f"tail -n 40 {SERVER_HOME}/jobs/{name}/system_logs/*.txt /root/server.log "
         f"{SERVER_HOME}/scheduler.log"], check=False,
    )  # fmt: skip
    return f"{seen}\n--- on the server host:\n{logs.stdout}{logs.stderr}"


TRAIN = """\
import os, pathlib, socket, sys
words = pathlib.Path(sys.argv[1]).read_text().split()
out = pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
(out / "count.txt").write_text(str(len(words)))
print(f"counted {len(words)} words on {socket.gethostname()}", flush=True)
"""
SPEC = """\
command: python train.py ${{inputs.text}} ${{outputs.result}}
code: src
inputs:
  text: {type: uri_file, path: ./words.txt}
outputs:
  result: {type: uri_folder}
"""


def test_a_client_host_runs_a_job_on_the_server_host_and_reads_its_output(
    team: HostBed,
) -> None:
    client = team["client"]
    env = client.env(PHALANX_SERVER=team.url, PHALANX_TOKEN=team.token)  # type: ignore[attr-defined]
    client.write("/root/work/src/train.py", TRAIN)
    client.write("/root/work/words.txt", "one two three four five\n")
    client.write("/root/work/job.yml", SPEC)
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/work")
    name = created.stdout.split()[-1]
    streamed = client.run(["phalanx", "job", "stream", name], env, cwd="/root/work",
                          timeout=300, check=False)  # fmt: skip
    # The job ran on the server host, from the files the client sent.
    assert "counted 5 words on server" in streamed.stdout, _story(team, name, streamed.stdout)
    shown = json.loads(client.run(["phalanx", "job", "show", name, "--json"], env).stdout)
    assert shown["status"] == "Completed", shown
    # What the server keeps is on the server host alone.
    assert team["server"].exists(f"{SERVER_HOME}/jobs/{name}")
    # The records are in the server host's PostgreSQL, not in a SQLite file.
    assert not team["server"].exists(f"{SERVER_HOME}/phalanx.db")
    assert not client.exists(SERVER_HOME)
    assert not team["server"].exists("/root/work")


def test_a_job_outlives_its_client_host(team: HostBed) -> None:
    client, server = team["client"], team["server"]
    env = client.env(PHALANX_SERVER=team.url, PHALANX_TOKEN=team.token)  # type: ignore[attr-defined]
    client.write("/root/work/src/train.py", "import time; time.sleep(3); print('done')\n")
    client.write("/root/work/job.yml", "command: python train.py\ncode: src\n")
    created = client.run(["phalanx", "job", "create", "-f", "job.yml"], env, cwd="/root/work")
    name = created.stdout.split()[-1]
    client.power_off()  # gone for good, right after create
    server_env = server.env(PHALANX_SERVER=team.url, PHALANX_TOKEN=team.token)  # type: ignore[attr-defined]
    deadline = time.monotonic() + 180
    status = ""
    while time.monotonic() < deadline:
        shown = json.loads(
            server.run(["phalanx", "job", "show", name, "--json"], server_env).stdout
        )
        status = shown["status"]
        if status in ("Completed", "Failed", "Canceled"):
            break
        time.sleep(1)
    assert status == "Completed", _story(team, name, str(shown))
    logs = server.run(["phalanx", "job", "stream", name], server_env).stdout
    assert "done" in logs, logs
