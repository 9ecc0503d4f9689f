"""A supervisor's wait for its job's turn: asleep until the scheduler rings."""

from __future__ import annotations

import time
from collections.abc import Callable

from phalanx.scheduler.bell import Bell, job_bell
from phalanx.scheduler.ledger import grant_of
from phalanx.scheduler.model import NodeGrant
from phalanx.scheduler.process import ensure_running, is_running
from phalanx.workspace import JobRecord, Workspace

# Without a ring, the database is read this often anyway (and the scheduler checked on).
# Rings are not lost in practice (a waiter binds its bell before its first look), so
# this is only a safety net; it is long so that hundreds of waiting jobs cost no CPU.
LOOK_EVERY_S = 15.0


def wait_for_grant(
    ws: Workspace,
    name: str,
    stop: Callable[[], bool],
    on_look: Callable[[JobRecord], None] | None = None,
) -> tuple[NodeGrant, ...] | None:
    """Block until the job holds its devices; ``None`` if ``stop()`` or the job ended first.

    Args:
        stop: Polled between looks: a cancel request or signal.
        on_look: Given the job's record at each look (its place and reason in the queue).
    """
    try:
        bell: Bell | None = Bell(job_bell(ws.home, name))
    except OSError:
        bell = None  # another waiter for this job (cannot happen: one supervisor a job)
    try:
        ensure_running(ws.home, ws.child_env())
        while True:
            grant = grant_of(ws, name)
            if grant:
                return grant
            job = ws.get_job(name)
            if stop() or job.status.is_terminal:
                return None
            if on_look is not None:
                on_look(job)
            if bell is not None:
                bell.wait(LOOK_EVERY_S)
            else:
                time.sleep(0.2)
            if not is_running(ws.home):  # it died: start another (no ring: it looks anyway)
                ensure_running(ws.home, ws.child_env())
    finally:
        if bell is not None:
            bell.close()
