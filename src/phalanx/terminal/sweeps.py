"""How a sweep looks in a terminal: its search, its progress, and its trials ranked
by the primary metric, with the one line that registers the best trial's output
(made by the service: :func:`phalanx.workspace.trials.register_command`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from phalanx.terminal.columns import print_table
from phalanx.workspace import JobRecord
from phalanx.workspace.trials import SweepView, TrialState

MOST_ROWS = 50


def show_sweep(console: Console, job: JobRecord, view: SweepView) -> None:
    spec = job.spec
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    algorithm = spec.get("sampling_algorithm") or {}
    sampling = str(algorithm.get("type", "random"))
    if algorithm.get("rule") == "sobol":
        sampling += " (sobol)"
    if algorithm.get("seed") is not None:
        sampling += f", seed {algorithm['seed']}"
    head.add_row("objective", Text(f"{view.goal} {view.metric}"))
    head.add_row("sampling", Text(sampling))
    policy = spec.get("early_termination")
    if policy:
        shown = ", ".join(f"{k}={v}" for k, v in policy.items() if k != "type")
        head.add_row("early termination", Text(f"{policy['type']} ({shown})"))
    limits = spec.get("limits") or {}
    running = sum(1 for t in view.trials if not t.state.is_over)
    made = len(view.trials)
    total = limits.get("max_total_trials")
    head.add_row(
        "trials",
        Text(
            f"{made} made" + (f" of {total}" if total else "") + f", {running} running"
            + (f" (at most {limits['max_concurrent_trials']} at once)"
               if limits.get("max_concurrent_trials") else "")
        ),
    )  # fmt: skip
    if view.state.ended_reason:
        head.add_row("stopped", Text(view.state.ended_reason))
    best = view.best
    if best is not None:
        head.add_row(
            "best trial",
            Text(f"{best.number} ({best.job_name}): {view.metric} = {best.value:.6g}"),
        )
        head.add_row(
            "register it",
            Text(view.register or f"nothing to: {best.job_name} wrote no output or checkpoint"),
        )
    console.print(head)
    if not view.trials:
        return
    names = list(view.trials[0].params)
    rows, notes = [], []
    for trial in view.ranked()[:MOST_ROWS]:
        status = view.statuses.get(trial.job_name, "-")
        state = trial.state.value if trial.state is not TrialState.STARTED else status
        value = trial.value if trial.value is not None else _last(trial.curve)
        rows.append([str(trial.number), trial.job_name, state,
                     "-" if value is None else f"{value:.6g}",
                     *(_short(trial.params.get(n)) for n in names)])  # fmt: skip
        notes.append(trial.reason or None)  # why it was stopped: under its row, at spaces
    console.print(f"trials by {view.metric} ({view.goal})", markup=False, highlight=False)
    # Whole columns give way on a narrow terminal, the last parameters first; never a
    # name cut mid-word.
    headers = ["#", "JOB", "STATUS", view.metric, *names]
    optional = [*reversed(names), "#", "STATUS"]
    left_out = print_table(console, headers, rows, optional=optional, notes=notes)
    if left_out:
        console.print(f"(left out for the width: {', '.join(left_out)}; "
                      f"phalanx job show {job.name} --json has them)", markup=False,
                      highlight=False)  # fmt: skip
    if len(view.trials) > MOST_ROWS:
        console.print(f"… and {len(view.trials) - MOST_ROWS} more: phalanx job show "
                      f"{job.name} --json")  # fmt: skip


def _last(curve: list[tuple[int, float]] | None) -> float | None:
    return max(curve)[1] if curve else None


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
