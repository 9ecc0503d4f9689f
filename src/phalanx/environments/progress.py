"""What a job's preparation is doing, told while it does it.

Building an environment or an image takes from seconds to many minutes (CUDA
wheels), pulling an image as long, and a job that needs what another job is
building waits for that build; all the while the job is Preparing. The code
that does these steps announces each one through the job's :class:`Progress`
as a :class:`Step`: a sentence for people and the log its output goes to,
whose last line is the step's progress. The runner shows it on the job
(:mod:`phalanx.jobs.preparing`).

A build is serialised per content by a lock file; while a job holds it,
:func:`building` records the job's name beside the lock, so that a job waiting
for the lock can say whose build it waits for (:func:`builder_words`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.nofollow import read_bytes, write_new

_NAME_BYTES = 256
"""A builder record holds a job's name; anything longer is not one."""


@dataclass(frozen=True)
class Step:
    """One step of a job's preparation, as the people watching the job read it."""

    doing: str
    """What it is: ``building environment torch-cpu:2 (pip, first use)``."""
    output: Path | None = None
    """The log the step's output is appended to: its last line is the progress."""


def _unheard(step: Step | None) -> None:
    """Nobody listens (a check at ``job create``, a test)."""


@dataclass(frozen=True)
class Progress:
    """Where a job's preparation tells what it is doing."""

    job: str = ""
    """The job preparing: named to the jobs that wait for a build it holds."""
    announce: Callable[[Step | None], None] = field(default=_unheard)
    """Called with each step as it begins, and with ``None`` once it is over."""

    @contextmanager
    def step(self, step: Step) -> Iterator[None]:
        """Announce ``step`` for the ``with`` block, and its end after it."""
        self.announce(step)
        try:
            yield
        finally:
            self.announce(None)


QUIET = Progress()


@contextmanager
def building(lock: Path, progress: Progress) -> Iterator[None]:
    """Record that ``progress.job`` builds under ``lock`` (which it holds) for the block."""
    record = _record(lock)
    if progress.job:
        with contextlib.suppress(OSError):  # only a waiting job's words depend on it
            write_new(record, progress.job.encode(), 0o644)
    try:
        yield
    finally:
        record.unlink(missing_ok=True)


def builder_words(lock: Path) -> str:
    """``being built by job NAME``, as the record beside ``lock`` names it, or ``being
    built by another job`` when it names none (a build begun before records, or on
    another machine sharing the folder)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        name = read_bytes(_record(lock), _NAME_BYTES).decode().strip()
        if name and name.isprintable() and len(name) < _NAME_BYTES:
            return f"being built by job {name}"
    return "being built by another job"


def _record(lock: Path) -> Path:
    return lock.with_name(lock.name + ".job")
