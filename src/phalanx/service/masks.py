"""What a caller is shown of a job's spec and of the server's disk.

Two rules, decided here once for every front end (the API, so ``job show``, ``job
list``, the SDK and the studio too):

- **A spec's environment variables are its owner's.** They are where users paste
  tokens, so their values are shown to the job's owner and to admins only; anyone
  else reads :data:`MASK` (a secret reference, ``${{secrets.NAME}}``, holds no value
  and shows as written). The spec as submitted, whose text holds the same values, and
  the job's folder files that copy it (``spec.yaml``, ``spec.json``) are theirs too.
- **Through a server, the server's disk is an admin's business.** A member or viewer
  reads :data:`SERVER_PATH` for a spec's code and files, a local datastore's folder
  and an environment's files; a job's logs by their place in its folder and no
  ``job_dir``; and messages (errors, a job's root cause) with the server's folders
  named as what a user names them by: a datastore's URI, the job's folder, the
  workspace (:class:`ServerPlaces`).

On this machine's own workspace the caller is its owner (an admin): nothing is masked.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from phalanx.service.access import Caller
from phalanx.storage.usersecrets import is_reference
from phalanx.workspace import JobRecord, Workspace
from phalanx.workspace.layout import JobPaths
from phalanx.workspace.records import RootCause

MASK = "***"
"""What another's environment variable's value reads as."""
SERVER_PATH = "(a path on the server)"
"""What a path of the server's disk reads as to a member or viewer."""
_PATH_KEYS = frozenset({"code", "path", "conda_file", "pip_file"})
# Files of a job's folder that hold its spec's values or the server's paths. Only
# admins read them through a server; the owner also reads the spec it submitted.
_OWNERS_FILES = ("spec.yaml",)
_ADMINS_FILES = ("spec.json", "account.json", "system_logs/.container_*.env")


def sees_values(caller: Caller, owner: str | None) -> bool:
    """Whether ``caller`` reads the values of environment variables of a job of ``owner``."""
    return caller.is_admin or (caller.user is not None and caller.user == owner)


def sees_server_paths(caller: Caller) -> bool:
    """Whether ``caller`` reads paths of the disk of the server it asks through."""
    return caller.is_admin or not caller.through_server


def masked_variables(variables: Mapping[str, Any]) -> dict[str, Any]:
    """``variables`` with every value masked but secret references."""
    return {k: v if isinstance(v, str) and is_reference(v) else MASK for k, v in variables.items()}


def spec_for(caller: Caller, owner: str | None, spec: dict[str, Any]) -> dict[str, Any]:
    """A job's resolved spec (a command job's or a sweep's) as ``caller`` may read it."""
    shown = spec
    if not sees_values(caller, owner):
        shown = dict(shown)
        if isinstance(shown.get("environment_variables"), dict):
            shown["environment_variables"] = masked_variables(shown["environment_variables"])
        trial = shown.get("trial")
        if isinstance(trial, dict) and isinstance(trial.get("environment_variables"), dict):
            variables = masked_variables(trial["environment_variables"])
            shown["trial"] = {**trial, "environment_variables": variables}
    if not sees_server_paths(caller):
        shown = _without_paths(shown)
    return shown


def _without_paths(value: Any, key: str | None = None) -> Any:
    """``value`` with each path of this machine in a field that names a file or folder
    (``code``, ``path``, ``conda_file``, ``pip_file``) replaced by :data:`SERVER_PATH`."""
    if isinstance(value, dict):
        return {k: _without_paths(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v, key) for v in value]
    if key in _PATH_KEYS and isinstance(value, str) and value.startswith(("/", "file:")):
        return SERVER_PATH
    return value


def withheld(caller: Caller, owner: str | None, rel: str) -> bool:
    """Whether the file ``rel`` of a job's folder (relative, ``/``-separated) is kept
    from ``caller``: it copies the job's spec or names the server's paths."""
    if caller.is_admin:
        return False
    rel = "/".join(p for p in rel.split("/") if p not in ("", "."))
    mine = sees_values(caller, owner)
    patterns = _ADMINS_FILES if mine else (*_OWNERS_FILES, *_ADMINS_FILES)
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


@dataclass(frozen=True)
class ServerPlaces:
    """The server's folders a message may name, each with what a member reads instead."""

    home: Path
    datastores: tuple[tuple[str, str], ...] = ()
    """(folder, name) of each datastore on the server's disk, ``default`` included."""
    roots: tuple[Path, ...] = ()
    """The folders the server keeps local datastores in (``--datastore-root``)."""

    @classmethod
    def of(cls, ws: Workspace, roots: tuple[Path, ...] = ()) -> ServerPlaces:
        """The places of ``ws``'s server (its local datastores read from the database)."""
        from phalanx.errors import PhalanxError
        from phalanx.storage.datastore_records import list_datastores
        from phalanx.storage.datastores import LocalDatastore

        try:
            found = [d for d in list_datastores(ws) if isinstance(d, LocalDatastore)]
        except PhalanxError:  # the database away: the workspace's own folders still hide
            found = []
        folders = {(str(Path(d.path)), d.name) for d in found}
        folders.add((str(ws.home / "datastore"), "default"))
        return cls(ws.home, tuple(sorted(folders)), roots)

    def hide(self, text: str) -> str:
        """``text`` naming none of the server's folders."""
        if "/" not in text:
            return text
        for folder, name in sorted(self.datastores, key=lambda d: -len(d[0])):
            text = _replace(text, folder, f"azureml://datastores/{name}/paths")
        jobs = re.escape(str(self.home / "jobs")) + r"/[^/\s'\"]+"
        text = re.sub(rf"(file://)?{jobs}/", "", text)
        text = re.sub(rf"(file://)?{jobs}\b", "the job's folder", text)
        text = _replace(text, str(self.home), "(the server's workspace)")
        for root in sorted(self.roots, key=lambda r: -len(str(r))):
            text = _replace(text, str(root), "(a folder on the server)")
        return text

    def error(self, error: RootCause | None, job_dir: str) -> RootCause | None:
        """A root cause with its log named in its job's folder and no server path."""
        if error is None:
            return None
        log_file = error.log_file
        if log_file is not None and log_file.startswith(job_dir.rstrip("/") + "/"):
            log_file = log_file[len(job_dir.rstrip("/")) + 1 :]
        elif log_file is not None:
            log_file = self.hide(log_file)
        return replace(
            error,
            message=self.hide(error.message),
            traceback=None if error.traceback is None else self.hide(error.traceback),
            log_file=log_file,
        )


def _replace(text: str, folder: str, by: str) -> str:
    """``text`` with ``folder`` (also as a ``file://`` URL) replaced by ``by`` wherever it
    is a whole folder (followed by ``/``, the end or no part of a name)."""
    return re.sub(rf"(file://)?{re.escape(folder)}(?![\w.-])", by.replace("\\", r"\\"), text)


def job_for(caller: Caller, job: JobRecord, places: ServerPlaces, *, logs: bool) -> JobRecord:
    """``job`` as ``caller`` (through a server) may read it; with ``logs``, its log files
    listed (in its folder, for a caller who may not read the server's paths)."""
    listed = JobPaths(Path(job.job_dir)).log_files() if logs else job.logs
    shown = replace(job, spec=spec_for(caller, job.created_by, job.spec), logs=listed)
    if sees_server_paths(caller):
        return shown
    root = job.job_dir.rstrip("/") + "/"
    if listed is not None:
        listed = {k: [f.removeprefix(root) for f in files] for k, files in listed.items()}
    queue = job.queue
    if queue is not None:  # what a preparing job does may name its log by its path
        queue = {k: places.hide(v) if isinstance(v, str) else v for k, v in queue.items()}
    return replace(
        shown,
        job_dir="",
        logs=listed,
        queue=queue,
        error=places.error(job.error, job.job_dir),
        attempts=tuple(
            replace(
                a,
                error=places.error(a.error, job.job_dir),
                note=None if a.note is None else places.hide(a.note),
            )
            for a in job.attempts
        ),
    )
