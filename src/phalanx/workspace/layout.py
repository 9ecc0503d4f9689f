"""Where things live under ``PHALANX_HOME``.

::

    $PHALANX_HOME/                  (default ~/.phalanx)
      phalanx.db                    SQLite, WAL mode: the records (unless PHALANX_DB names another)
      jobs/<name>/
        spec.yaml                   the spec as submitted (after --set)
        spec.json                   the validated spec, paths resolved
        code/                       snapshot of `code:`; the command's working directory
        user_logs/std_log_process_<rank>.txt
        system_logs/supervisor.txt  the job's supervisor
        system_logs/node_<k>.txt    node k's launcher (torchrun)
        system_logs/attempt_<n>/rank_<r>.json   how rank r ended in attempt n
        outputs/<output name>/      each declared output, and anything else the job writes
        checkpoints/                stable across attempts (PHALANX_CHECKPOINT_DIR)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "PHALANX_HOME"


def phalanx_home() -> Path:
    """The workspace folder: ``$PHALANX_HOME`` or ``~/.phalanx``."""
    value = os.environ.get(HOME_ENV)
    # Resolved, so every process names a job's folder the same way (it is the
    # marker that finds the job's processes).
    return (Path(value).expanduser() if value else Path.home() / ".phalanx").resolve()


SERVICE_HOME = Path("/var/lib/phalanx")
"""A root server's workspace when ``PHALANX_HOME`` is unset and root's home is closed."""


def server_home() -> Path:
    """The workspace ``phalanx server start`` and ``phalanx server token`` use by default.

    ``$PHALANX_HOME`` when set, else ``~/.phalanx`` — except for root whose home other
    accounts cannot enter (``/root`` is 0700 on most systems): a root server runs each job
    as an account of its own, which must reach its job's folder in the workspace, so the
    server keeps its state where a system service does, ``/var/lib/phalanx``. Opening
    ``/root`` to every account instead would expose whatever root keeps there.
    """
    if os.environ.get(HOME_ENV) or os.geteuid() != 0:
        return phalanx_home()
    try:
        closed = not Path.home().stat().st_mode & 0o001
    except OSError:
        closed = True
    return SERVICE_HOME if closed else phalanx_home()


@dataclass(frozen=True)
class JobPaths:
    """The folders and files of one job."""

    root: Path

    @property
    def spec_yaml(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def spec_json(self) -> Path:
        return self.root / "spec.json"

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def user_logs(self) -> Path:
        return self.root / "user_logs"

    @property
    def system_logs(self) -> Path:
        return self.root / "system_logs"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def supervisor_log(self) -> Path:
        return self.system_logs / "supervisor.txt"

    def rank_log(self, rank: int) -> Path:
        return self.user_logs / f"std_log_process_{rank}.txt"

    def node_log(self, node_rank: int) -> Path:
        return self.system_logs / f"node_{node_rank}.txt"

    def attempt_dir(self, attempt: int) -> Path:
        return self.system_logs / f"attempt_{attempt}"

    def rank_logs(self) -> list[Path]:
        """Every rank's log file, in rank order (a job may put other files in
        ``user_logs``: only ``std_log_process_<rank>.txt`` is a rank's)."""
        found = {}
        for path in self.user_logs.glob("std_log_process_*.txt"):
            number = path.stem.rsplit("_", 1)[1]
            if number.isascii() and number.isdigit() and len(number) < 8:
                found[int(number)] = path
        return [found[rank] for rank in sorted(found)]

    def log_files(self) -> dict[str, list[str]]:
        """The job's log files as ``job show --json`` (and the API) list them."""
        return {
            "user_logs": [str(p) for p in self.rank_logs()],
            "system_logs": sorted(str(p) for p in self.system_logs.glob("*.txt")),
        }

    def make(self) -> None:
        for folder in (self.code, self.user_logs, self.system_logs, self.outputs, self.checkpoints):
            folder.mkdir(parents=True, exist_ok=True)
