"""Which rank is blamed, from the records ranks leave behind."""

from __future__ import annotations

from pathlib import Path

from phalanx.launch.rootcause import root_cause


def record(rank: int, *, exit_code: int | None = 1, ended: float = 100.0, error: str | None = None,
           error_ns: float | None = None, error_s: int | None = None, signal: str | None = None,
           received: tuple[str, ...] = ()) -> dict[str, object]:  # fmt: skip
    info: dict[str, str] = {}
    if error_ns is not None:
        info["timestamp_ns"] = str(int(error_ns * 1e9))
    if error_s is not None:
        info["timestamp"] = str(error_s)
    return {
        "rank": rank,
        "node_rank": 0,
        "local_rank": rank,
        "exit_code": exit_code,
        "signal": signal,
        "signals_received": list(received),
        "ended_at": ended,
        "error": {"message": error, "extraInfo": info} if error else None,
        "log_file": None,
    }


PEER = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1"


def test_no_failure_no_cause() -> None:
    assert root_cause([record(0, exit_code=0), record(1, exit_code=0)]) is None


def test_exception_beats_peer_loss_even_when_later() -> None:
    cause = root_cause(
        [
            record(0, error=PEER, error_ns=10.0, ended=10.1),
            record(1, error="ValueError: bad batch", error_ns=10.3, ended=11.5),
        ]
    )
    assert cause is not None and cause.rank == 1 and cause.message == "ValueError: bad batch"


def test_exit_without_exception_beats_peer_loss() -> None:
    cause = root_cause([record(0, error=PEER, error_ns=10.0), record(1, exit_code=3, ended=12.0)])
    assert cause is not None and (cause.rank, cause.exit_code) == (1, 3)


def test_stopped_ranks_are_not_blamed() -> None:
    cause = root_cause(
        [
            record(0, exit_code=None, signal="SIGTERM", ended=5.0, received=("SIGTERM",)),
            record(1, error="KeyError: 'x'", error_ns=6.0, ended=6.5),
        ]
    )
    assert cause is not None and cause.rank == 1


def test_earliest_independent_failure_wins_and_whole_seconds_are_bounded() -> None:
    cause = root_cause(
        [
            record(0, error="OSError: disk", error_s=9, ended=9.2),  # @record: whole seconds
            record(1, error="ValueError: nan", error_ns=9.5, ended=9.6),
        ]
    )
    assert cause is not None and cause.rank == 0


def test_signal_death_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "std_log_process_3.txt"
    log.write_text("step 1\nstep 2\n\n")
    rec = record(3, exit_code=None, signal="SIGKILL", ended=3.0)
    rec["log_file"] = str(log)
    cause = root_cause([rec])
    assert cause is not None
    assert cause.exit_code == 128 + 9
    assert cause.message == "killed by SIGKILL: step 2"
    assert cause.signal == "SIGKILL"


def test_a_message_from_one_huge_log_line_keeps_its_end(tmp_path: Path) -> None:
    log = tmp_path / "std_log_process_0.txt"
    log.write_text("é" * 200_000 + " the end.")  # no newline; its last 64 KiB begin mid-"é"
    rec = record(0, exit_code=3)
    rec["log_file"] = str(log)
    cause = root_cause([rec])
    assert cause is not None
    assert cause.message.endswith("é the end.") and len(cause.message) <= 1001
    assert cause.traceback is not None and "\ufffd" not in cause.traceback
