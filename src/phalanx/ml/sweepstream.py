"""``ml_client.jobs.stream(sweep)``: a sweep's progress, one line per trial as it starts
and as it ends, until the sweep ends.

A sweep runs no program of its own, so it has no log to stream; its trials are jobs
with logs of their own (``ml_client.jobs.stream(trial_job_name)``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from phalanx.terminal.termsafe import sanitize
from phalanx.workspace import JobRecord

if TYPE_CHECKING:
    from phalanx.service.jobs import Jobs
    from phalanx.workspace.trials import SweepView, TrialRecord


def _value(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _started(trial: TrialRecord) -> str:
    params = " ".join(f"{k}={_value(v)}" for k, v in trial.params.items())
    return f"trial {trial.number} {trial.job_name} started: {params}"


def _ended(trial: TrialRecord, view: SweepView) -> str:
    result = "" if trial.value is None else f" {view.metric}={_value(trial.value)}"
    why = f" ({trial.reason})" if trial.reason else ""
    return f"trial {trial.number} {trial.job_name} {trial.state}{result}{why}"


def stream_sweep(jobs: Jobs, name: str, poll_s: float) -> JobRecord:
    """Print sweep ``name``'s trials as they start and end, every ``poll_s`` seconds,
    until it ends; then its best trial. Returns the sweep's record as it ended."""
    print(
        f"sweep {name}: its trials are jobs of their own; a trial's log: "
        "ml_client.jobs.stream(<trial job>)",
        flush=True,
    )
    shown: dict[int, bool] = {}  # trial number → whether its end was printed
    while True:
        record = jobs.get(name)  # before the view: trials seen then are all there
        view = jobs.sweep(name)
        for trial in sorted(view.trials, key=lambda t: t.number):
            if trial.number not in shown:
                print(sanitize(_started(trial)), flush=True)
                shown[trial.number] = False
            if trial.state.is_over and not shown[trial.number]:
                print(sanitize(_ended(trial, view)), flush=True)
                shown[trial.number] = True
        if record.status.is_terminal:
            break
        time.sleep(poll_s)
    best = view.best
    if best is not None:
        print(
            sanitize(
                f"sweep {name} {record.status.value}: best trial {best.number} "
                f"({best.job_name}) {view.metric}={_value(best.value)}"
            ),
            flush=True,
        )
    else:
        print(f"sweep {name} {record.status.value}: no trial has a value", flush=True)
    return record
