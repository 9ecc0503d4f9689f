"""Job leases: one supervisor runs a job at a time, and one that lost its job writes nothing.

A job's row holds its lease (schema 10): ``lease_generation``, raised by one at
every take; ``lease_holder``, ``HOST:PID`` of the supervisor holding it
(``NULL`` when free); ``lease_renewed_at``, the holder's clock at its last
renewal. Each attempt records the generation it ran under.

- **Taking.** A supervisor claims its job when it starts
  (:meth:`Workspace.claim_supervisor <phalanx.workspace.store.Workspace.claim_supervisor>`):
  it takes the lease when it is free, or when its holder is a supervisor of this
  machine that is no longer alive (the fast path: a process check, no waiting).
  A holder on another machine is never judged by a claim; only the scheduler
  frees such a lease (below). A claim also ends an attempt a former holder left
  open: nobody runs it any more.
- **Renewing.** The holder renews the lease every :data:`RENEW_S`
  (:class:`LeaseKeeper`); each of its state writes renews it too.
- **Fencing.** Every state write of a holder (status, attempts, notes,
  preemption requests, allocations) first runs ``UPDATE jobs SET
  lease_renewed_at = … WHERE name = :name AND lease_generation = :gen`` in its
  write transaction (:func:`fence`); a write that finds another generation
  raises :class:`LeaseLost` and writes nothing. Write transactions are
  serialised, so no take can slip between the check and the write. A
  supervisor that learns its lease was taken stops the processes of its
  attempt and exits.
- **Without the database.** A holder keeps its ranks running while it cannot
  reach the database, for up to :data:`RANKS_WITHOUT_DB_S` (5 minutes) after its
  last renewal. Past that it stops them, so that they cannot run beside those of
  a supervisor that took the lease meanwhile; once the database is back the
  attempt ends as preempted and the job resumes from its checkpoints (unless its
  lease was taken: then it leaves). It gives up, and exits, after
  :data:`GIVE_UP_S` without the database.
- **Expiry.** The scheduler frees the lease of a holder on another machine only
  once it has itself seen the lease unrenewed for :data:`EXPIRE_S` of time in
  which it could read the database (:class:`LeaseWatch`): longer than a holder
  runs its ranks without the database, plus a stop's grace, so a holder cut off
  from the database has stopped its ranks before anyone may start them again.
  Time in which the scheduler could not read the database never counts, so
  after an outage every holder has the whole :data:`EXPIRE_S` to renew: a
  database that blinked makes no supervisor look lost. On this machine the
  scheduler does not wait: a holder whose process is gone is lost at once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from phalanx.errors import DatabaseUnavailable

if TYPE_CHECKING:
    from phalanx.workspace.database import Tx
    from phalanx.workspace.store import Workspace

log = logging.getLogger(__name__)

RENEW_S = 10.0
"""How often a holder renews its lease."""
RANKS_WITHOUT_DB_S = 300.0
"""How long after its last renewal a holder keeps its ranks running without the database."""
EXPIRE_S = 360.0
"""How long the scheduler must see a lease of another machine unrenewed before freeing it:
more than :data:`RANKS_WITHOUT_DB_S` plus the time a stop takes."""
GIVE_UP_S = 1800.0
"""How long a supervisor waits for an unreachable database before it exits."""


class LeaseLost(Exception):
    """The job's lease is no longer this process's: another supervisor may run the job.

    Whoever catches it stops the processes it started for the job and writes nothing.
    """

    def __init__(self, name: str, generation: int) -> None:
        super().__init__(f"job {name}: lease generation {generation} was taken")
        self.name = name
        self.generation = generation


def this_host() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a supervisor's machine and process."""

    host: str
    pid: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def parse(cls, text: str | None) -> Holder | None:
        """``HOST:PID`` as stored; ``None`` for a free lease (or one nobody can name)."""
        if not text:
            return None
        host, _, pid = text.rpartition(":")
        return cls(host, int(pid)) if host and pid.isdigit() else None

    @property
    def local(self) -> bool:
        """Whether it is a process of this machine (so its liveness can be checked here)."""
        return self.host == this_host()


def claim(
    ws: Workspace, name: str, pid: int, alive: Callable[[int], bool], host: str | None = None
) -> int | None:
    """Take the job's lease for the supervisor ``pid``; its generation, or ``None`` when
    another holds it (see the module docstring for when a lease may be taken).

    Raises:
        JobNotFoundError: no such job.
    """
    from phalanx.errors import JobNotFoundError
    from phalanx.workspace.records import AttemptStatus, FailureCause, RootCause

    me = Holder(host or this_host(), pid)
    now = time.time()
    with ws.transaction() as tx:
        row = tx.first(
            "SELECT supervisor_pid, lease_generation, lease_holder FROM jobs WHERE name = :name",
            {"name": name},
        )
        if row is None:
            raise JobNotFoundError(name)
        holder = Holder.parse(row["lease_holder"])
        if holder is not None and holder != me:
            if holder.host != me.host or alive(holder.pid):
                return None
        elif holder is None and row["lease_generation"] == 0:
            # Never leased: a supervisor of a phalanx before leases may still run it.
            current = row["supervisor_pid"]
            if current is not None and current != pid and alive(current):
                return None
        generation = int(row["lease_generation"]) + 1
        tx.execute(
            "UPDATE jobs SET lease_generation = :gen, lease_holder = :holder,"
            " lease_renewed_at = :now, supervisor_pid = :pid, supervisor_started = :now"
            " WHERE name = :name",
            {"gen": generation, "holder": str(me), "now": now, "pid": pid, "name": name},
        )
        error = RootCause(
            message="the supervisor of this attempt lost the job's lease; a new supervisor "
            "took the job over and this attempt's processes were stopped"
        )
        tx.execute(
            "UPDATE attempts SET status = :failed, cause = :cause, ended_at = :now,"
            " error_json = COALESCE(error_json, :error), note = COALESCE(note, :note)"
            " WHERE job_name = :name AND status = :running",
            {
                "failed": AttemptStatus.FAILED.value,
                "cause": FailureCause.INFRASTRUCTURE.value,
                "now": now,
                "error": _json(error.to_dict()),
                "note": f"superseded by the supervisor of lease generation {generation}",
                "name": name,
                "running": AttemptStatus.RUNNING.value,
            },
        )
    return generation


def fence(tx: Tx, name: str, generation: int) -> None:
    """Inside a write transaction: go on only while ``generation`` holds the lease (and
    renew it, since the holder is evidently alive).

    Raises:
        LeaseLost: another took the lease; the transaction must write nothing.
    """
    held = tx.execute(
        "UPDATE jobs SET lease_renewed_at = :now WHERE name = :name AND lease_generation = :gen",
        {"now": time.time(), "name": name, "gen": generation},
    ).rowcount
    if not held:
        raise LeaseLost(name, generation)


def take_over(ws: Workspace, name: str, generation: int, renewed_at: float | None) -> bool:
    """Free the lease of a holder judged lost, unless it moved since it was judged (a
    renewal, or a new holder); whether it was freed. Its holder is fenced out from now."""
    with ws.transaction() as tx:
        return bool(
            tx.execute(
                "UPDATE jobs SET lease_generation = lease_generation + 1, lease_holder = NULL"
                " WHERE name = :name AND lease_generation = :gen"
                " AND COALESCE(lease_renewed_at, -1) = :renewed",
                {
                    "name": name,
                    "gen": generation,
                    "renewed": -1 if renewed_at is None else renewed_at,
                },
            ).rowcount
        )


class LeaseKeeper:
    """A supervisor's lease, renewed on a thread every :data:`RENEW_S` until stopped.

    Args:
        ws: The supervisor's workspace (its fenced writes check the same generation).
        name: The job.
        generation: What :func:`claim` returned.
    """

    def __init__(self, ws: Workspace, name: str, generation: int, every_s: float = RENEW_S):
        self.ws = ws
        self.name = name
        self.generation = generation
        self._every_s = every_s
        self._renewed = time.monotonic()  # claimed just now
        self._lost = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._loop, name="lease", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def lost(self) -> bool:
        """Whether another took the lease (the holder must stop and leave)."""
        return self._lost.is_set()

    def seen(self, generation: int) -> None:
        """The generation a read of the job found: another one means the lease was taken."""
        if generation != self.generation:
            self._lost.set()

    def overdue(self) -> bool:
        """Whether the lease went unrenewed for :data:`RANKS_WITHOUT_DB_S`: the ranks must stop."""
        return time.monotonic() - self._renewed > RANKS_WITHOUT_DB_S

    def renew(self) -> None:
        """Renew now; a database that does not answer at once is tried again next time."""
        try:
            with self.ws.patience(0), self.ws.transaction() as tx:
                fence(tx, self.name, self.generation)
        except LeaseLost:
            log.warning("job %s: lease generation %d was taken", self.name, self.generation)
            self._lost.set()
        except DatabaseUnavailable:
            pass  # counted by overdue(); the database logs the outage once
        except Exception:  # a bug here must not end the job: the next renewal tries again
            log.warning("renewing the lease of job %s failed", self.name, exc_info=True)
        else:
            self._renewed = time.monotonic()

    def _loop(self) -> None:
        while not self._stopped.wait(self._every_s) and not self.lost:
            self.renew()


class LeaseWatch:
    """The scheduler's look at leases held on other machines: expired only after
    :data:`EXPIRE_S` seen unrenewed by its own clock, and never across an outage.

    Args:
        expire_s: How long a lease must be seen unchanged.
        clock: Seconds, monotonic (a test passes its own).
    """

    def __init__(
        self, expire_s: float = EXPIRE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._expire_s = expire_s
        self._clock = clock
        self._seen: dict[str, tuple[tuple[int, float | None], float]] = {}

    def expired(self, name: str, generation: int, renewed_at: float | None) -> bool:
        """Whether the lease ``(generation, renewed_at)`` read now has stayed the same
        for :data:`EXPIRE_S` of this watch's looks."""
        now = self._clock()
        state = (generation, renewed_at)
        seen = self._seen.get(name)
        if seen is None or seen[0] != state:
            self._seen[name] = (state, now)
            return False
        return now - seen[1] >= self._expire_s

    def forget(self, keep: set[str] | None = None) -> None:
        """Start every look again (after an outage), or drop the jobs not in ``keep``."""
        if keep is None:
            self._seen.clear()
        else:
            self._seen = {k: v for k, v in self._seen.items() if k in keep}


def _json(value: object) -> str:
    import json

    return json.dumps(value, sort_keys=True)
