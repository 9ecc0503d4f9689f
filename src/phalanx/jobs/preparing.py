"""What a Preparing job is doing, on its record while it does it.

A cold environment takes seconds to build, minutes with CUDA wheels; pulling an
image as long; a job that needs what another job is building waits for it. The
steps announce themselves (:mod:`phalanx.environments.progress`) and
:class:`PreparingNote` shows the one under way where a Queued job's place and
reason are shown (``JobRecord.queue``, :meth:`Workspace.set_preparing`): the
step's sentence, when it began, its output's last line (read again every
:data:`EVERY_S`) and that output's log, named inside the job's folder. So ``job
stream``, ``job show``, the API and the studio's job page say "building
environment torch-cpu:2 (pip, first use)" with its progress through the path
they already read, and the step's whole output stays the system log it is
written to (``system_logs/environment.txt``, ``image_build.txt``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from phalanx.environments.progress import Progress, Step
from phalanx.errors import DatabaseUnavailable, PhalanxError
from phalanx.launch.rootcause import tail
from phalanx.storage.redact import redact
from phalanx.workspace import Workspace
from phalanx.workspace.leases import LeaseLost

log = logging.getLogger(__name__)

EVERY_S = 1.0
"""How often the step's output is read again for its last line."""
PROGRESS_CHARS = 200
"""A progress line keeps its end only (a long one is a wheel's path or URL)."""


class PreparingNote:
    """Shows the job's preparation step on its record for the ``with`` block; the note is
    gone at the end (and with the Preparing status, whoever ends it).

    Args:
        ws: The job's workspace (its writes fenced by the supervisor's lease).
        name: The job.
    """

    def __init__(self, ws: Workspace, name: str) -> None:
        self._ws = ws
        self._name = name
        self._lock = threading.Lock()
        self._step: Step | None = None
        self._since = 0.0
        self._shown: dict[str, Any] | None = None
        self._changed = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="preparing", daemon=True)

    @property
    def progress(self) -> Progress:
        """What the preparation announces its steps to."""
        return Progress(job=self._name, announce=self._announce)

    def __enter__(self) -> PreparingNote:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._announce(None)
        self._stopped.set()
        self._changed.set()
        self._thread.join(timeout=10)

    def _announce(self, step: Step | None) -> None:
        with self._lock:
            self._step, self._since = step, time.time()
        self._changed.set()

    def _loop(self) -> None:
        while True:
            self._changed.wait(EVERY_S)
            self._changed.clear()
            self._show()  # the last note too: the step that ended is not shown on
            if self._stopped.is_set():
                return

    def _in_job_folder(self, output: Path | None) -> str | None:
        """The step's log named inside the job's folder (``system_logs/environment.txt``):
        front ends show no path of the server's disk."""
        root = self._ws.paths(self._name).root
        if output is None or not output.is_relative_to(root):
            return None
        return output.relative_to(root).as_posix()

    def _show(self) -> None:
        with self._lock:
            step, since = self._step, self._since
        note = None
        if step is not None:
            note = {
                "reason": step.doing, "since": since, "progress": last_line(step.output),
                "log": self._in_job_folder(step.output),
            }  # fmt: skip
        if note == self._shown:
            return
        try:
            with self._ws.patience(0):  # a note is not worth waiting for: the next one
                self._ws.set_preparing(self._name, note)
        except (DatabaseUnavailable, LeaseLost):
            return  # the runner learns of both on its own
        except PhalanxError as exc:  # a note must never stop the preparation
            log.warning("could not show what the job is preparing: %s", exc)
            return
        self._shown = note


# A path of this machine's disk: ``/`` (or ``file:///``) after a space or a bracket, not
# the path of a URL (``https://host/path``) nor a relative one (``./pkg``, ``~/x``).
_PATH = re.compile(r"(?<![\w:/.~-])(?:file://)?/[^\s'\"()]*")


def last_line(output: Path | None) -> str | None:
    """The last line of a step's output that says something, credentials masked and each
    path of this machine's disk cut to its last part (``Requirement already satisfied:
    numpy in …/site-packages``): the job's record is read by every member and viewer of a
    server, who are never shown where its folders or Python are; the log keeps it whole.
    The command lines phalanx writes there (``$ pip install …``) are not progress."""
    if output is None:
        return None
    for line in reversed(tail(output, 20).splitlines()):
        line = line.strip()
        if line and not line.startswith("$ "):
            line = _PATH.sub(_last_part, redact(line))
            return line if len(line) <= PROGRESS_CHARS else "…" + line[-PROGRESS_CHARS:]
    return None


def _last_part(path: re.Match[str]) -> str:
    """``…/site-packages`` for ``/srv/venv/lib/python3.11/site-packages``."""
    return "…/" + path[0].rstrip("/").rpartition("/")[2]
