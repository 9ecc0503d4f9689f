"""A sweep's Optuna study: built from its spec, rebuilt from its trial records.

The database holds the truth (:mod:`phalanx.workspace.trials`); the study is
an in-memory view of it that the sampler and the pruner read. A controller
that starts (or starts again after the last was killed) rebuilds it by adding
every recorded trial in number order, with its values, result, reported
points and the attributes the sampler and pruner keep (the grid point taken,
ASHA's rungs), so Optuna numbers the next trial as the database does and never
proposes again what a recorded trial already has.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState, create_trial

from phalanx.search.policies import explain, explain_at, judges_every_step, make_pruner
from phalanx.search.space import Value, dimensions, distributions, values_of
from phalanx.spec.sweep import SweepSpec
from phalanx.workspace.trials import TrialRecord
from phalanx.workspace.trials import TrialState as RecordState

optuna.logging.set_verbosity(optuna.logging.WARNING)
# TPE's constant liar and multivariate modes are marked experimental; they are what a
# parallel search wants, and the warning would land in every sweep's log.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

_RESULT = {
    RecordState.COMPLETED: TrialState.COMPLETE,
    RecordState.FAILED: TrialState.FAIL,
    RecordState.PRUNED: TrialState.PRUNED,
    RecordState.CANCELED: TrialState.FAIL,
}


def make_sampler(spec: SweepSpec, resumed_at: int = 0) -> BaseSampler:
    """The sampler of the sweep's ``sampling_algorithm``.

    Args:
        resumed_at: The trials recorded before this controller started. A seeded random
            or TPE sampler started again with its seed would draw its first values again;
            its seed is moved on by that count instead (so a resumed sweep is as
            reproducible as one that was not). A grid and a Sobol sequence keep their
            place in the study's own attributes.
    """
    algorithm = spec.sampling_algorithm
    seed = algorithm.seed
    moved = None if seed is None else (seed + 1_000_003 * resumed_at) % 2**32
    if algorithm.type == "grid":
        grid = {d.name: d.grid() for d in dimensions(spec)}
        return _Grid(grid, seed=seed)
    if algorithm.type == "bayesian":
        startup = algorithm.n_startup_trials or max(2, min(10, spec.max_total_trials // 5))
        return optuna.samplers.TPESampler(
            seed=moved, n_startup_trials=startup, multivariate=True, constant_liar=True
        )
    if algorithm.rule == "sobol":
        return optuna.samplers.QMCSampler(
            qmc_type="sobol",
            scramble=True,
            seed=seed,
            independent_sampler=optuna.samplers.RandomSampler(seed=moved),
            warn_independent_sampling=False,
            warn_asynchronous_seeding=False,
        )
    return optuna.samplers.RandomSampler(seed=moved)


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid sampler, less its stopping the study once the grid is covered (which
    only an ``optimize`` loop may do): the controller stops making trials itself."""

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Any) -> None:  # fmt: skip
        return None


@dataclass
class Proposal:
    """What the sampler proposed for the next trial."""

    number: int
    internal: dict[str, Any]
    params: dict[str, Value]
    attrs: dict[str, Any]


class Search:
    """One sweep's study, as its controller asks, reports and tells it."""

    def __init__(
        self,
        name: str,
        spec: SweepSpec,
        records: list[TrialRecord],
        study_attrs: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.maximize = spec.objective.goal == "maximize"
        self.distributions = distributions(spec)
        self.study = optuna.create_study(
            study_name=name,
            direction="maximize" if self.maximize else "minimize",
            sampler=make_sampler(spec, resumed_at=len(records)),
            pruner=make_pruner(spec),
        )
        for key, value in (study_attrs or {}).items():
            self.study._storage.set_study_system_attr(self.study._study_id, key, value)
        self._ids: dict[int, int] = {}
        self._fresh: set[int] = set()
        """Steps some trial reported since the running trials were last judged."""
        for record in records:
            self._restore(record)

    def _restore(self, record: TrialRecord) -> None:
        if record.number != len(self._ids):
            raise ValueError(f"trial records skip from {len(self._ids)} to {record.number}")
        state = _RESULT.get(record.state, TrialState.RUNNING)
        value = record.value if state is TrialState.COMPLETE else None
        if state is TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        self.study.add_trial(
            create_trial(
                state=state,
                value=value,
                params=record.internal,
                distributions=self.distributions,
                system_attrs=record.attrs,
                intermediate_values={int(s): v for s, v in record.curve or ()},
            )
        )
        self._ids[record.number] = self.study.get_trials(deepcopy=False)[-1]._trial_id

    @property
    def exhausted(self) -> bool:
        """Whether the sampler has nothing new to propose (a grid that is covered)."""
        sampler = self.study.sampler
        if isinstance(sampler, optuna.samplers.GridSampler):
            return len(self._ids) >= self.spec.grid_size()
        return False

    @property
    def reported(self) -> bool:
        """Whether any trial reported a point of the primary metric."""
        return any(t.intermediate_values for t in self.study.get_trials(deepcopy=False))

    def propose(self) -> Proposal:
        """The next trial's values (Optuna numbers it as the database will)."""
        trial = self.study.ask(self.distributions)
        self._ids[trial.number] = trial._trial_id
        frozen = self._frozen(trial.number)
        return Proposal(
            number=trial.number,
            internal=dict(trial.params),
            params=values_of(self.spec, trial.params),
            attrs=_plain(frozen.system_attrs),
        )

    def _frozen(self, number: int) -> FrozenTrial:
        return self.study._storage.get_trial(self._ids[number])

    def study_attrs(self) -> dict[str, Any]:
        """What the sampler keeps of the whole search (to be recorded)."""
        return _plain(self.study._storage.get_study_system_attrs(self.study._study_id))

    def attrs(self, number: int) -> dict[str, Any]:
        """What the sampler and pruner keep of trial ``number`` (to be recorded)."""
        return _plain(self._frozen(number).system_attrs)

    def report(self, number: int, points: list[tuple[int, float]]) -> bool:
        """Add the trial's new ``(step, value)`` points; whether any was new."""
        frozen = self._frozen(number)
        if frozen.state is not TrialState.RUNNING:
            return False
        new = False
        for step, value in points:
            if step not in frozen.intermediate_values:
                self.study._storage.set_trial_intermediate_value(self._ids[number], step, value)
                self._fresh.add(step)
                new = True
        return new

    def advance(self, curves: Mapping[int, list[tuple[int, float]]]) -> dict[int, str]:
        """Add the running trials' points (trial number → its curve so far) and judge them;
        the trials the early-termination policy stops, with why.

        Azure ML's rules judge every running trial at each step that some trial reported
        since the last call (points of trials that ended since included), in step order,
        against what every trial reported at that step: so a trial that logs ahead of its
        peers is judged at a step again once they reach it. Optuna's pruners judge a trial
        at each of its new steps in turn, as if each were read as it was logged.
        """
        pruner = self.study.pruner
        stops: dict[int, str] = {}
        if not judges_every_step(pruner):
            for number, points in curves.items():
                for point in points:
                    if self.report(number, [point]) and (reason := self.judge(number)):
                        stops[number] = reason
                        break
            self._fresh.clear()
            return stops
        for number, points in curves.items():
            self.report(number, points)
        fresh, self._fresh = sorted(self._fresh), set()
        for step in fresh:
            for number in curves:
                frozen = self._frozen(number)
                if (
                    number in stops
                    or frozen.state is not TrialState.RUNNING
                    or step not in frozen.intermediate_values
                ):
                    continue
                reason = explain_at(pruner, self.study, frozen, step)
                if reason is not None:
                    stops[number] = reason
        return stops

    def judge(self, number: int) -> str | None:
        """Why the early-termination policy stops the trial now; ``None`` to let it run."""
        frozen = self._frozen(number)
        if frozen.state is not TrialState.RUNNING or frozen.last_step is None:
            return None
        return explain(self.study.pruner, self.study, frozen)

    def tell(self, number: int, state: RecordState, value: float | None) -> None:
        """The trial ended (``value``: its result when it completed)."""
        frozen = self._frozen(number)
        if frozen.state is not TrialState.RUNNING:
            return
        result = _RESULT[state]
        if result is TrialState.COMPLETE and value is None:
            result = TrialState.FAIL
        self.study.tell(
            self._ids[number], value if result is TrialState.COMPLETE else None, state=result
        )


def _plain(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes that survive JSON (Optuna keeps only such in its own databases)."""
    import json

    out = {}
    for key, value in attrs.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out
