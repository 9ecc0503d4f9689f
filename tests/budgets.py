"""Each suite's share of the whole run's time, printed at the end of every run.

`make test` must stay within 40 minutes on 2 cores (issue 37); each suite gets a share
(``tests/budgets.toml``). At the end of a run, pytest prints the time each suite's tests
took (set-up, call and tear-down, summed; under pytest-xdist, summed over the workers)
beside its budget, and names the suites over theirs. Over budget fails nothing: a timed
test would fail on a busy machine and pass on a fast one. It is what to look at, with the
slowest tests (``--durations``), before a suite grows further.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import tomllib

BUDGETS = Path(__file__).with_name("budgets.toml")
_spent: dict[str, float] = defaultdict(float)
_counted: dict[str, int] = defaultdict(int)


def suite_of(nodeid: str) -> str:
    """``tests/system/ray/test_ray.py::…`` → ``system/ray``; ``tests/unit/…`` → ``unit``."""
    parts = nodeid.split("::", 1)[0].split("/")
    if len(parts) >= 4 and parts[0] == "tests" and parts[1] == "system":
        return f"system/{parts[2]}"
    if len(parts) >= 3 and parts[0] == "tests" and parts[1] == "unit":
        return "unit"
    return "other"


def budgets() -> dict[str, float]:
    """Each suite's budget in minutes."""
    with BUDGETS.open("rb") as f:
        return {str(k): float(v) for k, v in tomllib.load(f)["minutes"].items()}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    suite = suite_of(report.nodeid)
    _spent[suite] += report.duration
    if report.when == "call":
        _counted[suite] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _spent or hasattr(terminalreporter.config, "workerinput"):
        return  # nothing ran, or an xdist worker (the controller prints the table)
    limits = budgets()
    write = terminalreporter.write_line
    terminalreporter.section("time per suite (minutes; budgets: tests/budgets.toml)")
    write(f"{'suite':<20} {'tests':>6} {'spent':>7} {'budget':>7}")
    over = []
    for suite in sorted(_spent, key=lambda s: -_spent[s]):
        spent, limit = _spent[suite] / 60, limits.get(suite)
        shown = f"{limit:7.1f}" if limit is not None else "   none"
        flag = "  over" if limit is None or spent > limit else ""
        write(f"{suite:<20} {_counted[suite]:>6} {spent:7.1f} {shown}{flag}")
        if flag:
            over.append(suite)
    write(f"{'all':<20} {sum(_counted.values()):>6} {sum(_spent.values()) / 60:7.1f}")
    if over:
        write(f"over budget or without one: {', '.join(over)} (see tests/budgets.toml)")
