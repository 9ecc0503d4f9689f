"""Job leases and a database that blinks, in-process: fenced writes, who may take a
lease and when, and how long a call waits for an unavailable database.

The store tests take ``db`` (SQLite and a fresh PostgreSQL database). The waits are
tried on a PostgreSQL server of the test's own, stopped and started again, so no
other test's database goes away with it. The end-to-end runs (real supervisors, a
server, an outage under running jobs) are in ``test_outage.py``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import pg
from phalanx.errors import DatabaseUnavailable
from phalanx.jobs import control
from phalanx.scheduler import ledger
from phalanx.scheduler.daemon import Scheduler
from phalanx.scheduler.model import Decision, NodeGrant
from phalanx.workspace import AttemptStatus, FailureCause, JobStatus, Workspace
from phalanx.workspace.leases import EXPIRE_S, LeaseKeeper, LeaseLost, LeaseWatch, take_over

SPEC = {"command": "true"}


@pytest.fixture
def ws(tmp_path: Path, db: str | None) -> Workspace:
    return Workspace(tmp_path / "home")


def _rows(ws: Workspace, name: str) -> tuple[list[dict[str, Any]], ...]:
    """Everything the database holds about a job."""
    args = {"name": name}
    return (
        [dict(r) for r in ws.query("SELECT * FROM jobs WHERE name = :name", args)],
        [dict(r) for r in ws.query("SELECT * FROM attempts WHERE job_name = :name", args)],
        [dict(r) for r in ws.query("SELECT * FROM allocations WHERE job_name = :name", args)],
    )


def test_a_supervisor_whose_lease_was_taken_writes_nothing(ws: Workspace, tmp_path: Path) -> None:
    name = ws.create_job(SPEC, spec_text="", name="job").name
    ledger.apply(ws, "local", Decision(admit={name: (NodeGrant("h", ("0",)),)}))
    assert ws.claim_supervisor(name, 4242, lambda pid: True) == 1
    ws.set_status(name, JobStatus.RUNNING)
    attempt = ws.start_attempt(name, master_port=29400)
    assert attempt.generation == 1
    # Repeated (a commit whose answer was lost): the same attempt, not a second one.
    assert ws.start_attempt(name, master_port=29400).number == attempt.number
    # Another process (the scheduler, having judged this supervisor lost) takes the lease.
    other = Workspace(tmp_path / "home")
    job = other.get_job(name)
    assert (job.lease_generation, job.lease_holder) == (1, f"{_host()}:4242")
    assert take_over(other, name, job.lease_generation, job.lease_renewed_at)
    before = _rows(ws, name)
    writes = {
        "status": lambda: ws.set_status(name, JobStatus.COMPLETED),
        "attempt": lambda: ws.start_attempt(name, master_port=1),
        "end": lambda: ws.end_attempt(name, attempt.number, AttemptStatus.SUCCEEDED),
        "note": lambda: ws.set_attempt_note(name, attempt.number, "retried"),
        "take": lambda: ws.take_preemption_request(name),
        "preempt": lambda: ws.request_preemption(name, None),
        "release": lambda: ledger.release(ws, name, requeue=True),
        "hosts": lambda: ledger.set_hosts(ws, name, ["elsewhere"]),
        "waiting": lambda: ws.set_waiting(name, "waits"),
        "check": lambda: ws.check_lease(name),
    }
    for what, write in writes.items():
        with pytest.raises(LeaseLost):
            write()
        assert _rows(ws, name) == before, f"{what} wrote despite the lost lease"
    # A judgement made on an old reading takes nothing: the lease moved since.
    assert not take_over(other, name, job.lease_generation, job.lease_renewed_at)
    # Writers that hold no lease (a cancel from the CLI) are not fenced.
    other.request_cancel(name)
    assert other.get_job(name).cancel_requested


def test_who_may_claim_a_lease(ws: Workspace) -> None:
    name = ws.create_job(SPEC, spec_text="", name="job").name
    assert ws.claim_supervisor(name, 4242, lambda pid: True) == 1
    assert ws.claim_supervisor(name, 4343, lambda pid: True) is None  # a live one holds it
    ws.start_attempt(name, master_port=None)
    assert ws.claim_supervisor(name, 4343, lambda pid: False) == 2  # a dead one does not
    # The attempt the dead one left open is over: nobody runs it any more.
    [attempt] = ws.list_attempts(name)
    assert (attempt.status, attempt.cause) == (AttemptStatus.FAILED, FailureCause.INFRASTRUCTURE)
    assert attempt.note is not None and "superseded" in attempt.note
    # A machine cannot judge another's processes: held here, a claim from elsewhere
    # waits for the lease to be freed; held from elsewhere, no claim here takes it.
    assert ws.claim_supervisor(name, 77, lambda pid: False, host="elsewhere") is None
    job = ws.get_job(name)
    assert take_over(ws, name, job.lease_generation, job.lease_renewed_at)
    assert ws.claim_supervisor(name, 77, lambda pid: False, host="elsewhere") == 4
    assert ws.claim_supervisor(name, 4444, lambda pid: False) is None
    job = ws.get_job(name)
    assert job.lease_holder == "elsewhere:77" and job.supervisor_pid == 77


def test_a_keeper_renews_and_learns_its_lease_was_taken(ws: Workspace, tmp_path: Path) -> None:
    name = ws.create_job(SPEC, spec_text="", name="job").name
    generation = ws.claim_supervisor(name, 4242, lambda pid: True)
    assert generation is not None
    keeper = LeaseKeeper(ws, name, generation)
    first = ws.get_job(name).lease_renewed_at
    assert first is not None
    time.sleep(0.01)
    keeper.renew()
    renewed = ws.get_job(name).lease_renewed_at
    assert renewed is not None and renewed > first and not keeper.lost
    assert not keeper.overdue()
    other = Workspace(tmp_path / "home")
    assert take_over(other, name, generation, renewed)
    keeper.renew()
    assert keeper.lost
    assert other.get_job(name).lease_renewed_at == renewed  # and it renewed nothing


def test_a_lease_of_another_machine_expires_only_on_time_the_database_was_there() -> None:
    now = [1000.0]
    watch = LeaseWatch(clock=lambda: now[0])
    assert not watch.expired("job", 1, 50.0)
    now[0] += EXPIRE_S - 1
    assert not watch.expired("job", 1, 50.0)
    now[0] += 2
    assert watch.expired("job", 1, 50.0)
    assert not watch.expired("job", 1, 60.0)  # renewed: the look starts again
    now[0] += EXPIRE_S - 1
    watch.forget()  # an outage: what was seen before it counts for nothing
    assert not watch.expired("job", 1, 60.0)
    now[0] += EXPIRE_S - 1
    assert not watch.expired("job", 1, 60.0)
    now[0] += 1
    assert watch.expired("job", 1, 60.0)


def test_the_scheduler_judges_a_remote_supervisor_by_its_lease_and_forgets_outages(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path / "home")
    name = ws.create_job(SPEC, spec_text="", name="job").name
    ws.claim_supervisor(name, 1, lambda pid: False, host="elsewhere")
    ws.set_status(name, JobStatus.RUNNING)
    now = [0.0]
    scheduler = Scheduler(ws, control, LeaseWatch(clock=lambda: now[0]))
    assert scheduler._jobs_to_watch(waiting_too=True) == []  # pid 1 here says nothing
    now[0] += EXPIRE_S / 2
    assert scheduler._jobs_to_watch(waiting_too=True) == []
    ws.database.outages += 1  # the database was away meanwhile
    now[0] += EXPIRE_S / 2 + 1
    assert scheduler._jobs_to_watch(waiting_too=True) == []
    now[0] += EXPIRE_S
    [(job, expired)] = scheduler._jobs_to_watch(waiting_too=True)
    assert job.name == name and expired


def test_a_database_that_went_away_is_one_line_at_once_or_waited_for(tmp_path: Path) -> None:
    with pg.own_server() as server:
        url = server.create_database()
        ws = Workspace(tmp_path / "home", db=url)
        name = ws.create_job(SPEC, spec_text="", name="job").name
        patient = Workspace(tmp_path / "home", db=url, patience_s=60)
        pg.pause(server)
        # No patience (a command, a server's request): the one line, at once.
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as caught:
            ws.get_job(name)
        assert time.monotonic() - began < 10
        text = str(caught.value)
        assert text.startswith("the workspace database stopped answering (")
        assert "\n" not in text and server.password not in text
        with pytest.raises(DatabaseUnavailable, match=r"^cannot open the workspace database"):
            Workspace(tmp_path / "home", db=url)
        # Patience that runs out: the same error, after about that long.
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailable), patient.patience(1.5):
            patient.get_job(name)
        assert 1.0 < time.monotonic() - began < 10
        # Patience enough: reads and writes wait, and happen once it is back.
        results: list[object] = []

        def wait_and_write() -> None:
            patient.request_cancel(name)
            results.append(patient.get_job(name).cancel_requested)

        started = time.monotonic()
        waiter = threading.Thread(target=wait_and_write)
        waiter.start()
        time.sleep(2)
        assert waiter.is_alive() and not results
        pg.resume(server)
        resumed = time.monotonic()
        waiter.join(timeout=60)
        assert results == [True]
        assert time.monotonic() - started >= resumed - started
        assert patient.database.outages == 1
        # The impatient workspace answers again too: its pool's dead connections are
        # replaced, not handed out.
        assert ws.get_job(name).cancel_requested
        ws.close()
        patient.close()


def _host() -> str:
    import socket

    return socket.gethostname()
