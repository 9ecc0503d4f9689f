"""A sweep job's controller: the sweep's supervisor process runs it.

Each round (twice a second, or when a trial's job ends) it reads the sweep's
trial records and their jobs, gives the study each running trial's new points
of the primary metric, stops the trials the early-termination policy gives up
on, records the trials that ended, and makes new trials while fewer than
``max_concurrent_trials`` run and fewer than ``max_total_trials`` were made.
Trials are ordinary jobs (``<sweep>_<n>``, the sweep their parent) in the
sweep's target's queue, at the sweep's priority and tier; the scheduler runs
them like any other job.

What it knows is in the database (:mod:`phalanx.workspace.trials`), written
before it acts: a trial's row with its values before its job, a stopped
trial's reason before its job is asked to stop. A controller that is killed
(or whose server or scheduler is) is replaced by the scheduler, like any lost
supervisor; the new one rebuilds the study from the rows and goes on, making
the job of a row that has none and never drawing values again for a trial it
has. A sweep whose controller was lost more than ``MAX_RESTARTS`` times fails.

The sweep ends when no trial runs and no more will be made: ``Completed``
naming its best trial, or ``Failed`` when no trial completed with a value of
the primary metric. A sweep stops making trials early when its first
``max(3, max_concurrent_trials)`` trials all failed (a broken script should not
run a thousand times); when a trial completed without logging the primary metric
and no trial ever logged it (its name is wrong: the error lists what was logged),
and at ``limits.timeout``, both canceling its running trials. A trial is
``completed`` when its job is, with or without a result. Canceling the sweep
cancels its trials.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from phalanx.errors import PhalanxError
from phalanx.jobs.control import request_stop, stop_trials, submit
from phalanx.scheduler.bell import Bell, job_bell
from phalanx.workspace import JobRecord, JobStatus, RootCause, Workspace
from phalanx.workspace.leases import LeaseLost
from phalanx.workspace.metrics import curve
from phalanx.workspace.trials import (
    TrialRecord,
    TrialState,
    add_trial,
    begin,
    set_outcome,
    trials_of,
    update_trial,
)

if TYPE_CHECKING:
    from phalanx.search.study import Search
    from phalanx.spec.sweep import SweepSpec
    from phalanx.workspace.leases import LeaseKeeper

log = logging.getLogger(__name__)

ROUND_S = 0.5
MAX_RESTARTS = 20
STOP_WAIT_S = 20.0
"""How long a canceled sweep waits for its trials' jobs to end before it ends itself
(they end anyway: each was asked to stop)."""


class SweepRunner:
    """Runs one sweep to its end (or until its lease is taken)."""

    def __init__(
        self, ws: Workspace, name: str, lease: LeaseKeeper, stopping: Callable[[], bool]
    ) -> None:
        self.ws = ws
        self.name = name
        self.lease = lease
        self.stopping = stopping
        self._curves: dict[str, tuple[tuple[int, int, int], list[tuple[int, float]]]] = {}
        self._stop_reason: str | None = None
        self._failure: str | None = None
        self._study: dict[str, object] = {}
        self._asked: set[str] = set()
        """Trial jobs this controller asked to stop."""

    def run(self) -> JobStatus:
        from phalanx.search.study import Search
        from phalanx.spec.sweep import SweepSpec

        job = self.ws.get_job(self.name)
        spec = SweepSpec.model_validate(job.spec)
        state = begin(self.ws, self.name)
        if state.restarts > MAX_RESTARTS:
            return self._end(
                JobStatus.FAILED,
                f"the sweep's controller was lost {state.restarts} times; see "
                "system_logs/supervisor.txt",
            )
        records = trials_of(self.ws, self.name)
        if state.restarts:
            self._say(f"taken over (restart {state.restarts}) with {len(records)} trials "
                      "recorded")  # fmt: skip
        search = Search(self.name, spec, records, state.study)
        self._study = dict(state.study)
        bell = Bell(job_bell(self.ws.home, self.name))
        try:
            while True:
                if self.lease.lost:
                    raise LeaseLost(self.name, self.lease.generation)
                if self.stopping() or self.ws.requests(self.name)[0]:
                    return self._cancel(records)
                records = trials_of(self.ws, self.name)
                children = {j.name: j for j in self.ws.list_jobs(parent=self.name, limit=10_000)}
                self._watch(spec, search, records, children)
                records = trials_of(self.ws, self.name)
                self._limit_time(spec, job, records)
                made = self._make(spec, search, records, children)
                records = trials_of(self.ws, self.name)
                self._record_best(spec, records)
                children = {j.name: j for j in self.ws.list_jobs(parent=self.name, limit=10_000)}
                if (
                    not made
                    and not _active(records, children)
                    and self._done(spec, search, records)
                ):
                    return self._finish(spec, records)
                bell.wait(ROUND_S)
        finally:
            bell.close()

    # -- a round ---------------------------------------------------------------

    def _watch(
        self,
        spec: SweepSpec,
        search: Search,
        records: list[TrialRecord],
        children: dict[str, JobRecord],
    ) -> None:
        """Feed the study what running trials reported; record those that ended; stop
        those the policy gives up on."""
        running: dict[int, tuple[TrialRecord, JobRecord, list[tuple[int, float]]]] = {}
        for record in records:
            child = children.get(record.job_name)
            if record.state is TrialState.PENDING:
                if child is None:
                    self._start(spec, record)
                else:  # made before the last controller could record it
                    update_trial(self.ws, self.name, record.number, state=TrialState.STARTED)
                continue
            if child is None:
                continue
            if record.state.is_over:
                if child.status is JobStatus.CANCELED and child.error is None and record.reason:
                    self.ws.set_end_reason(child.name, RootCause(message=record.reason))
                elif not child.status.is_terminal and child.name not in self._asked:
                    # Stopped, but its job runs: the stop request was lost with the last
                    # controller (killed between the two), or not heard yet. Once more.
                    self._asked.add(child.name)
                    request_stop(self.ws, child.name)
                continue
            curve = self._curve(spec, child)
            if child.status.is_terminal:
                search.report(record.number, curve)
                self._ended(spec, search, record, child, curve)
                continue
            running[record.number] = (record, child, curve)
        # Every running trial is judged, also at the steps others reached only now (see
        # Search.advance): a policy compares trials at the same step.
        stops = search.advance({number: curve for number, (_, _, curve) in running.items()})
        for number, (record, child, curve) in running.items():
            reason = stops.get(number)
            if reason is not None:
                self._say(f"trial {number} stopped: {reason}")
                update_trial(self.ws, self.name, number, state=TrialState.PRUNED,
                             reason=reason, value=_last(curve), attrs=search.attrs(number),
                             curve=curve)  # fmt: skip
                search.tell(number, TrialState.PRUNED, None)
                self._asked.add(child.name)
                request_stop(self.ws, child.name)
            elif search.attrs(number) != record.attrs:
                update_trial(self.ws, self.name, number, attrs=search.attrs(number))

    def _ended(
        self,
        spec: SweepSpec,
        search: Search,
        record: TrialRecord,
        child: JobRecord,
        curve: list[tuple[int, float]],
    ) -> None:
        value = _last(curve)
        metric = spec.objective.primary_metric
        reason: str | None = None
        if child.status is JobStatus.COMPLETED:  # as its job: with a result or without
            state = TrialState.COMPLETED
            if value is None:
                reason = _unlogged(metric, Path(child.job_dir))
        elif child.status is JobStatus.CANCELED:
            state = TrialState.CANCELED
            reason = self._stop_reason or "canceled"
        else:
            state = TrialState.FAILED
            reason = child.error.message.splitlines()[0] if child.error else "failed"
        update_trial(self.ws, self.name, record.number, state=state, value=value,
                     reason=reason, attrs=search.attrs(record.number), curve=curve)  # fmt: skip
        search.tell(record.number, state, value)
        shown = f": {metric} = {value:.6g}" if value is not None else ""
        self._say(f"trial {record.number} {state}{shown}" + (f" ({reason})" if reason else ""))
        unlogged = value is None and state is TrialState.COMPLETED
        if unlogged and self._failure is None and not search.reported:
            # A trial ran to its end and no trial ever logged the metric: its name is wrong
            # (or never logged), and every other trial would be run for nothing.
            self._failure = f"trial {record.number} ({record.job_name}) {reason}"
            self._stop_reason = f"the sweep stopped: trial {record.number} {reason}"
            self._say(f"no trial logs {metric!r}: stopping its running trials")
            stop_trials(self.ws, self.name)

    def _make(
        self,
        spec: SweepSpec,
        search: Search,
        records: list[TrialRecord],
        children: dict[str, JobRecord],
    ) -> int:
        """New trials while there is room; how many were made."""
        if self._stop_reason is not None or self._failure is not None:
            return 0
        live = len(_active(records, children))
        total = len(records)
        failed = [r for r in records if r.state is TrialState.FAILED]
        if best_trial(spec, records) is None and len(failed) >= max(3, spec.max_concurrent_trials):
            self._failure = (
                f"its first {len(failed)} trials failed and none completed, so it made no "
                f"more; trial {failed[0].number} ({failed[0].job_name}): {failed[0].reason}"
            )
            return 0
        made = 0
        while (
            live < spec.max_concurrent_trials
            and total < spec.max_total_trials
            and not search.exhausted
        ):
            proposal = search.propose()
            if proposal.number != total:  # the study and the database disagree: a bug
                raise RuntimeError(f"study numbered trial {proposal.number}, expected {total}")
            # Its values, what the sampler keeps of it and of the whole search: one write,
            # so a controller killed after it never draws these values again.
            study = search.study_attrs()
            record = add_trial(self.ws, self.name, proposal.number, proposal.params,
                               proposal.internal, attrs=proposal.attrs,
                               study=study if study != self._study else None)  # fmt: skip
            self._study = study
            self._start(spec, record)
            live, total, made = live + 1, total + 1, made + 1
        return made

    def _start(self, spec: SweepSpec, record: TrialRecord) -> None:
        """Make the job of a recorded trial."""
        from phalanx.tracking.runfiles import append_events

        job = self.ws.get_job(self.name)
        trial = spec.trial_spec(record.params, name=record.job_name)
        text = f"# trial {record.number} of sweep {self.name}\n" + yaml.safe_dump(
            trial.to_record(), sort_keys=False
        )
        code = self.ws.paths(self.name).code if spec.trial.code is not None else None
        try:
            child = submit(self.ws, trial, text, created_by=job.created_by, parent=self.name,
                           code=code)  # fmt: skip
        except PhalanxError as exc:
            if "already exists" not in str(exc):
                raise
            if self.ws.get_job(record.job_name).parent != self.name:
                raise PhalanxError(
                    f"trial {record.number} of sweep {self.name} would be job "
                    f"{record.job_name}, but a job of that name that is not this sweep's "
                    "exists; submit the sweep again under another name"
                ) from None
        else:
            # The values as the trial's MLflow run's params (mlflow.search_runs shows them).
            append_events(Path(child.job_dir), [
                {"kind": "param", "key": k, "value": _text(v)} for k, v in record.params.items()
            ])  # fmt: skip
        update_trial(self.ws, self.name, record.number, state=TrialState.STARTED)
        values = ", ".join(f"{k}={_text(v)}" for k, v in record.params.items())
        self._say(f"trial {record.number} is job {record.job_name}: {values}")

    def _limit_time(self, spec: SweepSpec, job: JobRecord, records: list[TrialRecord]) -> None:
        timeout = spec.limits.timeout
        if timeout is None or self._stop_reason is not None:
            return
        started = job.started_at or job.created_at
        if time.time() - started < timeout:
            return
        self._stop_reason = f"the sweep reached limits.timeout ({timeout} s)"
        self._say(f"{self._stop_reason}; stopping its running trials")
        stop_trials(self.ws, self.name)

    def _done(self, spec: SweepSpec, search: Search, records: list[TrialRecord]) -> bool:
        return (
            self._stop_reason is not None
            or self._failure is not None
            or len(records) >= spec.max_total_trials
            or search.exhausted
        )

    # -- the end -----------------------------------------------------------------

    def _record_best(self, spec: SweepSpec, records: list[TrialRecord]) -> TrialRecord | None:
        best = best_trial(spec, records)
        if best is not None:
            set_outcome(self.ws, self.name, best_trial=best.number, best_value=best.value)
        return best

    def _finish(self, spec: SweepSpec, records: list[TrialRecord]) -> JobStatus:
        best = self._record_best(spec, records)
        if self._failure is not None:
            reason = self._failure
        elif self._stop_reason is not None:
            reason = self._stop_reason
        elif len(records) >= spec.max_total_trials:
            reason = f"made limits.max_total_trials ({spec.max_total_trials}) trials"
        else:
            reason = f"covered the grid ({spec.grid_size()} points)"
        set_outcome(self.ws, self.name, best_trial=best.number if best else None,
                    best_value=best.value if best else None, ended_reason=reason)  # fmt: skip
        if best is None:
            metric = spec.objective.primary_metric
            first = next((r for r in records if r.reason), None)
            # A failure names the trial it comes from already.
            why = f"; trial {first.number}: {first.reason}" if first and not self._failure else ""
            return self._end(
                JobStatus.FAILED, f"no trial completed with a value of {metric!r}: {reason}{why}"
            )
        self._say(f"{reason}; best trial {best.number} ({best.job_name}): "
                  f"{spec.objective.primary_metric} = {best.value:.6g}")  # fmt: skip
        return self._end(JobStatus.COMPLETED, None)

    def _cancel(self, records: list[TrialRecord]) -> JobStatus:
        """Stop every running trial, wait a while for them, and end Canceled."""
        self._stop_reason = "the sweep was canceled"
        live = [r for r in trials_of(self.ws, self.name) if not r.state.is_over]
        for record in live:
            update_trial(self.ws, self.name, record.number, state=TrialState.CANCELED,
                         reason=self._stop_reason)  # fmt: skip
        # Every trial job that runs, also those a controller killed meanwhile had
        # marked canceled already: only this sweep's (by parent, never by name).
        stop_trials(self.ws, self.name)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            jobs = self.ws.list_jobs(parent=self.name, limit=10_000)
            if all(j.status.is_terminal for j in jobs):
                break
            time.sleep(0.2)
        for job in self.ws.list_jobs(parent=self.name, limit=10_000):
            if job.status is JobStatus.CANCELED:
                self.ws.set_end_reason(job.name, RootCause(message=self._stop_reason))
        return self._end(JobStatus.CANCELED, None)

    def _say(self, text: str) -> None:
        """A line of the sweep's progress: in its log (``job stream``) and the supervisor's."""
        log.info("sweep %s: %s", self.name, text)
        stamp = time.strftime("%H:%M:%S")
        path = self.ws.paths(self.name).rank_log(0)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{stamp} {text}\n")

    def _end(self, status: JobStatus, message: str | None) -> JobStatus:
        if message:
            self._say(message)
        error = RootCause(message=message) if message else None
        self.ws.set_status(self.name, status, error=error)
        return status

    # -- reading a trial's metric ---------------------------------------------------

    def _curve(self, spec: SweepSpec, child: JobRecord) -> list[tuple[int, float]]:
        """The trial's ``(step, value)`` points of the primary metric, read again only
        when its metrics file changed. Points without a step are numbered in order."""
        path = Path(child.job_dir) / "metrics.jsonl"
        try:
            st = os.stat(path)
        except OSError:
            return []
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._curves.get(child.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        points = curve(Path(child.job_dir), spec.objective.primary_metric)
        self._curves[child.name] = (key, points)
        return points


def best_trial(spec: SweepSpec, records: list[TrialRecord]) -> TrialRecord | None:
    """The completed trial with the best result."""
    done = [r for r in records if r.state is TrialState.COMPLETED and r.value is not None]
    if not done:
        return None
    pick = max if spec.objective.goal == "maximize" else min
    return pick(done, key=lambda r: r.value)  # type: ignore[arg-type, return-value]


def _active(records: list[TrialRecord], children: dict[str, JobRecord]) -> list[TrialRecord]:
    """The trials that run or will: not over, or over (stopped) while their job still
    ends. Each counts against ``max_concurrent_trials``: its job holds devices."""
    return [
        r for r in records
        if not r.state.is_over
        or (r.job_name in children and not children[r.job_name].status.is_terminal)
    ]  # fmt: skip


def _last(curve: list[tuple[int, float]]) -> float | None:
    """The result of a trial: the value at its highest step."""
    return max(curve)[1] if curve else None


def _unlogged(metric: str, job_dir: Path) -> str:
    """Why a trial that completed has no result: the metrics it logged instead, and the
    one it likely meant."""
    from phalanx.errors import suggest
    from phalanx.workspace.metrics import read_metrics

    logged = sorted(read_metrics(job_dir))
    if not logged:
        return (
            f"logged no metric; log {metric!r} (objective.primary_metric) with "
            "phalanx.train.log_metric or mlflow.log_metric"
        )
    shown = ", ".join(repr(name) for name in logged[:8])
    if len(logged) > 8:
        shown += f" and {len(logged) - 8} more"
    close = suggest(metric, logged)
    fix = f"did you mean {close!r}?" if close else "set objective.primary_metric to one of them"
    return f"logged no {metric!r} (objective.primary_metric), only {shown}: {fix}"


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
