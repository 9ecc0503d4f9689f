"""Pick the failure that started it all from the ranks' end records."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from phalanx.nofollow import open_file, read_bytes
from phalanx.workspace.records import RootCause

_TAIL_LINES = 30
_TAIL_BYTES = 64 << 10
# A message taken from a log (one huge line, a progress bar) keeps its end only.
_MESSAGE_CHARS = 1000
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


# A rank's end record is a few hundred bytes (its error's traceback aside).
_RECORD_BYTES = 1 << 20


def read_rank_records(attempt_dir: Path) -> list[dict[str, Any]]:
    """Every ``rank_<r>.json`` written by the workers of an attempt, by rank.

    The records are in a folder a walled-off job's account writes, and are read as
    root: no link is followed, at most :data:`_RECORD_BYTES` of each are read, and
    nothing in them names a file phalanx opens: a rank's log is where phalanx puts
    it (``user_logs/std_log_process_<rank>.txt`` of the job), whatever the record says.
    """
    logs = attempt_dir.parent.parent / "user_logs"
    records = []
    for path in attempt_dir.glob("rank_*.json"):
        try:
            data = read_bytes(path, _RECORD_BYTES + 1)
            if len(data) > _RECORD_BYTES:
                continue  # not a record a wrapper writes
            record = json.loads(data)
            rank = int(record["rank"])
            if not 0 <= rank < 1 << 20:
                continue
        except (OSError, ValueError, TypeError, KeyError):
            continue  # a worker killed while writing (or not phalanx's file at all)
        record["log_file"] = str(logs / f"std_log_process_{rank}.txt")
        records.append(record)
    return sorted(records, key=lambda r: int(r["rank"]))


def failed(record: dict[str, Any]) -> bool:
    return bool(record.get("signal")) or (record.get("exit_code") or 0) != 0


def _error_time(record: dict[str, Any]) -> float:
    """When the rank failed: its exception's time if it raised one, else its exit."""
    ended = float(record["ended_at"])
    info = (record.get("error") or {}).get("extraInfo") or {}
    if info.get("timestamp_ns"):
        return int(info["timestamp_ns"]) / 1e9
    if info.get("timestamp"):
        # Whole seconds (torchelastic's @record): the failure lies within the next second.
        return min(float(info["timestamp"]) + 1.0, ended)
    return ended


# How a rank fails when a peer went away first: a consequence, never the cause.
_PEER_LOSS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "remote process exited",
    "nccl communicator was aborted",
    "socket timeout",
)


def peer_loss(record: dict[str, Any]) -> bool:
    """Whether the rank failed because a peer went away (gloo/NCCL's messages)."""
    message = str((record.get("error") or {}).get("message") or "").lower()
    return any(pattern in message for pattern in _PEER_LOSS)


def tail(path: Path, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ('' if it is missing).

    Only its last :data:`_TAIL_BYTES` are read, even while a rank still writes.
    """
    try:
        with os.fdopen(open_file(path), "rb") as f:
            start = max(0, f.seek(0, 2) - _TAIL_BYTES)
            f.seek(start)
            data = f.read(_TAIL_BYTES)
    except OSError:
        return ""
    if start:
        data = data.lstrip(_UTF8_CONTINUATION)  # begin at a whole character
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def _last_line(text: str) -> str:
    """The last line that is not blank, its end only if longer than :data:`_MESSAGE_CHARS`."""
    for line in reversed(text.splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= _MESSAGE_CHARS else "…" + line[-_MESSAGE_CHARS:]
    return ""


def root_cause(records: list[dict[str, Any]]) -> RootCause | None:
    """The first rank to fail on its own, or ``None`` if no rank failed.

    A rank that received a termination signal was stopped (by torchrun or by
    phalanx stopping the gang), so it is the cause only when no rank failed on
    its own. Among the rest, a rank that lost a peer comes after one that did
    not, then the earliest failure wins.
    """
    failures = [r for r in records if failed(r)]
    if not failures:
        return None
    independent = [r for r in failures if not r.get("signals_received")]
    first = min(
        independent or failures, key=lambda r: (peer_loss(r), _error_time(r), int(r["rank"]))
    )
    return _to_root_cause(first)


def _to_root_cause(record: dict[str, Any]) -> RootCause:
    error = record.get("error") or {}
    log_file = record.get("log_file")
    log_tail = tail(Path(log_file)) if log_file else ""
    signal_name = record.get("signal")
    exit_code = record.get("exit_code")
    message = str(error.get("message") or "").strip()
    if not message:
        message = _last_line(log_tail)
    if signal_name:
        prefix = f"killed by {signal_name}"
        message = f"{prefix}: {message}" if message else prefix
    if not message:
        message = f"exited with code {exit_code}"
    traceback = (error.get("extraInfo") or {}).get("py_callstack") or log_tail or None
    return RootCause(
        message=message,
        rank=int(record["rank"]),
        node_rank=record.get("node_rank"),
        local_rank=record.get("local_rank"),
        exit_code=exit_code if exit_code is not None else (128 + _signum(signal_name)),
        signal=signal_name,
        traceback=traceback,
        log_file=log_file,
    )


def _signum(name: str | None) -> int:
    import signal

    try:
        return int(signal.Signals[name]) if name else 0
    except KeyError:
        return 0


def launcher_failure(node_rank: int, exit_code: int | None, node_log: Path) -> RootCause:
    """A node whose launcher failed before any rank ended (bad port, import error…)."""
    log_tail = tail(node_log)
    last = _last_line(log_tail) or "no output"
    return RootCause(
        message=f"node {node_rank} launcher exited with code {exit_code}: {last}",
        node_rank=node_rank,
        exit_code=exit_code,
        traceback=log_tail or None,
        log_file=str(node_log),
    )
