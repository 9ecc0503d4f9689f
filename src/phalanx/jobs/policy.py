"""Whether a job gets another attempt after one ended without success.

The budgets of ``retry:``:

* preemptions use ``max_preemptions`` only, never ``max_attempts``: a node
  taken away is nobody's fault;
* every other failure (user error, infrastructure, hang) uses
  ``max_attempts``, which counts all attempts that were not preempted; a user
  error is retried only when its exit code is listed in
  ``retry_on_exit_codes`` (an empty list means any code);
* a timeout or a cancel is final.

A user error that repeats exactly (same rank, same message) is marked
deterministic in the log; it is still retried within the budget, so a flaky
failure that happens to repeat once is not given up too early, and the
budget bounds the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phalanx.spec import Retry
from phalanx.workspace import AttemptRecord, FailureCause, RootCause


@dataclass(frozen=True)
class Decision:
    retry: bool
    reason: str


def decide(
    policy: Retry,
    previous: Sequence[AttemptRecord],
    cause: FailureCause,
    error: RootCause | None,
) -> Decision:
    """Retry or not, after an attempt that ended with ``cause``.

    Args:
        policy: The spec's ``retry`` block.
        previous: The job's attempts before this one, oldest first.
        cause: Why this attempt ended.
        error: Its root cause, if any.
    """
    if cause in (FailureCause.TIMEOUT, FailureCause.CANCELED, FailureCause.SYSTEM_ERROR):
        return Decision(False, f"a {cause} is final")
    if cause is FailureCause.PREEMPTION:
        used = 1 + sum(a.cause is FailureCause.PREEMPTION for a in previous)
        if used <= policy.max_preemptions:
            return Decision(True, f"preemption {used} of {policy.max_preemptions} allowed")
        return Decision(
            False, f"preempted {used} times; retry.max_preemptions is {policy.max_preemptions}"
        )
    counted = 1 + sum(a.cause is not FailureCause.PREEMPTION for a in previous)
    if counted >= policy.max_attempts:
        return Decision(False, f"attempt {counted} of retry.max_attempts={policy.max_attempts}")
    if cause is FailureCause.USER_ERROR and policy.retry_on_exit_codes:
        code = error.exit_code if error else None
        if code not in policy.retry_on_exit_codes:
            return Decision(False, f"exit code {code} is not in retry.retry_on_exit_codes")
    note = ""
    if cause is FailureCause.USER_ERROR and error is not None and _repeats(previous, error):
        note = "; the same error as the attempt before (deterministic?)"
    return Decision(True, f"attempt {counted} of {policy.max_attempts} failed ({cause}){note}")


def _repeats(previous: Sequence[AttemptRecord], error: RootCause) -> bool:
    if not previous or previous[-1].error is None:
        return False
    last = previous[-1].error
    return (last.rank, last.message) == (error.rank, error.message)
