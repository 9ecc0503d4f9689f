"""A sweep's search state in the database: its ``sweeps`` row and its trials.

Every statement on ``sweeps`` and ``sweep_trials`` is here. A trial's row is
written, with its values, *before* its job is made, and the job's name is fixed
by the row (``<sweep>_<number>``); so a controller killed between the two makes
that job when it comes back, and never asks the sampler again for a trial it
already has. Each write of a sweep's controller is fenced by the sweep's lease
(:meth:`~phalanx.workspace.store.Workspace.fence`): a controller whose lease was
taken writes nothing more.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from phalanx.workspace.store import Workspace

SWEEP_TARGET = "sweep"
"""The target a sweep job is recorded on: it runs nothing itself, and no compute target
may take the name. Its trials queue on the sweep's ``compute``."""


class TrialState(str, Enum):
    """Where a trial is, as its sweep sees it."""

    PENDING = "pending"
    """Its row is written; its job may not be made yet."""
    STARTED = "started"
    """Its job is made and not over."""
    COMPLETED = "completed"
    """Its job completed; ``value`` is its objective."""
    FAILED = "failed"
    """Its job failed (or completed without reporting the primary metric)."""
    PRUNED = "pruned"
    """Stopped early by the early-termination policy; ``reason`` says why."""
    CANCELED = "canceled"
    """Canceled by a user, or by the sweep ending (canceled, timed out)."""

    @property
    def is_over(self) -> bool:
        return self not in (TrialState.PENDING, TrialState.STARTED)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a sweep."""

    number: int
    job_name: str
    params: dict[str, Any]
    """The values its command got, by search-space name."""
    internal: dict[str, Any]
    """The same values as the sampler sees them (its own space)."""
    state: TrialState
    created_at: float
    value: float | None = None
    """Its objective: the last value of the primary metric it reported."""
    reason: str | None = None
    """Why it was stopped or failed, in one line."""
    attrs: dict[str, Any] = field(default_factory=dict)
    """What the pruner keeps of it between rounds (ASHA's rungs)."""
    curve: list[tuple[int, float]] | None = None
    """The primary metric's ``(step, value)`` points, kept once it is over."""
    ended_at: float | None = None


@dataclass(frozen=True)
class SweepState:
    """A sweep's own row."""

    restarts: int = 0
    """How often a controller took the sweep over after the last one was lost."""
    best_trial: int | None = None
    best_value: float | None = None
    ended_reason: str | None = None
    """Why it stopped making trials (limits reached, grid covered, timeout)."""
    study: dict[str, Any] = field(default_factory=dict)
    """What the sampler keeps of the whole search (a Sobol sequence's place)."""


def begin(ws: Workspace, sweep: str) -> SweepState:
    """The sweep's state, its row made on first call; a later call counts a restart."""

    def write() -> SweepState:
        with ws.transaction() as tx:
            ws.fence(tx, sweep)
            row = tx.first("SELECT * FROM sweeps WHERE name = :name", {"name": sweep})
            if row is None:
                tx.execute("INSERT INTO sweeps (name) VALUES (:name)", {"name": sweep})
                return SweepState()
            tx.execute(
                "UPDATE sweeps SET restarts = restarts + 1 WHERE name = :name", {"name": sweep}
            )
            return _state(row, restarts=row["restarts"] + 1)

    return ws.database.retrying(write)


def state_of(ws: Workspace, sweep: str) -> SweepState | None:
    """The sweep's row; ``None`` before its controller first ran (or for a command job)."""
    rows = ws.query("SELECT * FROM sweeps WHERE name = :name", {"name": sweep})
    return _state(rows[0]) if rows else None


def _state(row: Any, restarts: int | None = None) -> SweepState:
    return SweepState(
        restarts=row["restarts"] if restarts is None else restarts,
        best_trial=row["best_trial"],
        best_value=row["best_value"],
        ended_reason=row["ended_reason"],
        study=json.loads(row["study_json"] or "{}"),
    )


def trials_of(ws: Workspace, sweep: str) -> list[TrialRecord]:
    """The sweep's trials, by number."""
    rows = ws.query(
        "SELECT * FROM sweep_trials WHERE sweep_name = :name ORDER BY number", {"name": sweep}
    )
    return [
        TrialRecord(
            number=row["number"],
            job_name=row["job_name"],
            params=json.loads(row["params_json"]),
            internal=json.loads(row["internal_json"]),
            state=TrialState(row["state"]),
            created_at=row["created_at"],
            value=row["value"],
            reason=row["reason"],
            attrs=json.loads(row["attrs_json"] or "{}"),
            curve=[(s, v) for s, v in json.loads(row["curve_json"])] if row["curve_json"] else None,
            ended_at=row["ended_at"],
        )
        for row in rows
    ]


def add_trial(
    ws: Workspace,
    sweep: str,
    number: int,
    params: dict[str, Any],
    internal: dict[str, Any],
    *,
    attrs: dict[str, Any] | None = None,
    study: dict[str, Any] | None = None,
) -> TrialRecord:
    """Record trial ``number`` (Pending) with its values, what the sampler keeps of it
    (``attrs``) and, when given, of the whole search (``study``), in one transaction;
    its job's name is fixed here."""
    now = time.time()
    job_name = trial_job_name(sweep, number)

    def write() -> None:
        with ws.transaction() as tx:
            ws.fence(tx, sweep)
            if tx.first(
                "SELECT 1 AS found FROM sweep_trials WHERE sweep_name = :sweep AND number = :n",
                {"sweep": sweep, "n": number},
            ):
                return  # written before a lost answer: the same values
            tx.execute(
                "INSERT INTO sweep_trials (sweep_name, number, job_name, params_json,"
                " internal_json, state, attrs_json, created_at) VALUES (:sweep, :n, :job,"
                " :params, :internal, :state, :attrs, :now)",
                {
                    "sweep": sweep,
                    "n": number,
                    "job": job_name,
                    "params": json.dumps(params),
                    "internal": json.dumps(internal),
                    "state": TrialState.PENDING.value,
                    "attrs": json.dumps(attrs or {}, sort_keys=True),
                    "now": now,
                },
            )
            if study is not None:
                tx.execute(
                    "UPDATE sweeps SET study_json = :study WHERE name = :name",
                    {"study": json.dumps(study, sort_keys=True), "name": sweep},
                )

    ws.database.retrying(write)
    return TrialRecord(
        number, job_name, params, internal, TrialState.PENDING, now, attrs=attrs or {}
    )


def trial_job_name(sweep: str, number: int) -> str:
    """The name of trial ``number``'s job (Azure ML's shape: ``<sweep>_<n>``)."""
    return f"{sweep}_{number}"


def update_trial(
    ws: Workspace,
    sweep: str,
    number: int,
    *,
    state: TrialState | None = None,
    value: float | None = None,
    reason: str | None = None,
    attrs: dict[str, Any] | None = None,
    curve: list[tuple[int, float]] | None = None,
) -> None:
    """Change what is given of trial ``number``; an ended trial gets its end time."""
    sets: list[str] = []
    args: dict[str, Any] = {"sweep": sweep, "n": number}
    if state is not None:
        sets.append("state = :state")
        args["state"] = state.value
        if state.is_over:
            sets.append("ended_at = :now")
            args["now"] = time.time()
    for column, given in (("value", value), ("reason", reason)):
        if given is not None:
            sets.append(f"{column} = :{column}")
            args[column] = given
    if attrs is not None:
        sets.append("attrs_json = :attrs")
        args["attrs"] = json.dumps(attrs, sort_keys=True)
    if curve is not None:
        sets.append("curve_json = :curve")
        args["curve"] = json.dumps([[s, v] for s, v in curve])
    if not sets:
        return

    def write() -> None:
        with ws.transaction() as tx:
            ws.fence(tx, sweep)
            tx.execute(
                f"UPDATE sweep_trials SET {', '.join(sets)} "
                "WHERE sweep_name = :sweep AND number = :n",
                args,
            )

    ws.database.retrying(write)


def set_outcome(
    ws: Workspace,
    sweep: str,
    *,
    best_trial: int | None,
    best_value: float | None,
    ended_reason: str | None = None,
) -> None:
    """Record the best trial so far and, once it stops making trials, why."""

    def write() -> None:
        with ws.transaction() as tx:
            ws.fence(tx, sweep)
            tx.execute(
                "UPDATE sweeps SET best_trial = :trial, best_value = :value,"
                " ended_reason = COALESCE(:reason, ended_reason) WHERE name = :name",
                {"trial": best_trial, "value": best_value, "reason": ended_reason, "name": sweep},
            )

    ws.database.retrying(write)


@dataclass(frozen=True)
class SweepView:
    """A sweep as the front ends show it: its state and every trial, with the status of
    its job and the primary metric's points so far."""

    metric: str
    goal: str
    state: SweepState
    trials: list[TrialRecord]
    statuses: dict[str, str]
    """Trial job name → its job's status."""
    register: str | None = None
    """The one command that registers the best trial's output as a model
    (:func:`register_command`), once there is a best trial."""

    @property
    def best(self) -> TrialRecord | None:
        return next((t for t in self.trials if t.number == self.state.best_trial), None)

    def ranked(self) -> list[TrialRecord]:
        """Trials best first by the primary metric (those without a value last)."""
        sign = -1.0 if self.goal == "maximize" else 1.0
        return sorted(
            self.trials,
            key=lambda t: (t.value is None, sign * (t.value or 0.0), t.number),
        )


def register_command(
    ws: Workspace, sweep: str, outputs: dict[str, Any], best: TrialRecord | None
) -> str | None:
    """The command that registers ``best``'s model: of the sweep's ``custom_model``
    outputs, its other outputs and the trial's checkpoints, in that order, the first the
    trial wrote a file to; ``None`` when it wrote none (an empty folder cannot be
    registered: the command would fail)."""
    if best is None:
        return None
    models = [
        k for k, v in outputs.items() if isinstance(v, dict) and v.get("type") == "custom_model"
    ]
    others = [k for k in outputs if k not in models]
    for output in [*models, *others, "checkpoints"]:
        if _written(ws, best.job_name, output, outputs.get(output)):
            return (
                f"phalanx model create --name {sweep}-best "
                f"--path azureml://jobs/{best.job_name}/outputs/{output}"
            )
    return None


def _written(ws: Workspace, job: str, output: str, spec: Any) -> bool:
    """Whether ``job`` wrote a file to ``output``. One the spec puts elsewhere (a
    datastore, a local ``path``) is taken to hold what the job wrote there."""
    if isinstance(spec, dict) and spec.get("path"):
        return True
    paths = ws.paths(job)
    folder = paths.checkpoints if output == "checkpoints" else paths.outputs / output
    return any(files for _, _, files in os.walk(folder))


def view_to_wire(view: SweepView) -> dict[str, Any]:
    """The view as JSON (what ``GET /jobs/<sweep>/sweep`` answers)."""
    return {
        "metric": view.metric,
        "goal": view.goal,
        "restarts": view.state.restarts,
        "best_trial": view.state.best_trial,
        "best_value": view.state.best_value,
        "ended_reason": view.state.ended_reason,
        "register": view.register,
        "trials": [
            {
                "number": t.number,
                "job_name": t.job_name,
                "params": t.params,
                "state": t.state.value,
                "status": view.statuses.get(t.job_name),
                "value": t.value,
                "reason": t.reason,
                "curve": [[s, v] for s, v in t.curve or ()],
                "created_at": t.created_at,
                "ended_at": t.ended_at,
            }
            for t in view.trials
        ],
    }


def view_from_wire(data: dict[str, Any]) -> SweepView:
    """The view a server sent."""
    trials = [
        TrialRecord(
            number=t["number"],
            job_name=t["job_name"],
            params=t["params"],
            internal={},
            state=TrialState(t["state"]),
            created_at=t["created_at"],
            value=t.get("value"),
            reason=t.get("reason"),
            curve=[(s, v) for s, v in t.get("curve") or ()],
            ended_at=t.get("ended_at"),
        )
        for t in data["trials"]
    ]
    state = SweepState(
        restarts=data.get("restarts", 0),
        best_trial=data.get("best_trial"),
        best_value=data.get("best_value"),
        ended_reason=data.get("ended_reason"),
    )
    statuses = {t["job_name"]: t["status"] for t in data["trials"] if t.get("status")}
    return SweepView(
        data["metric"], data["goal"], state, trials, statuses, register=data.get("register")
    )
