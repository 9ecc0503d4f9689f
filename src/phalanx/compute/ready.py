"""A job made ready where its nodes run: its inputs there, its command substituted.

One function for every compute: the supervisor calls it on this machine for
local compute, each node's agent on its node for Ray
(:class:`~phalanx.compute.nodejob.NodeFolder`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from phalanx.compute.inputs import InputsReady
from phalanx.compute.inputs import make_ready as make_inputs_ready
from phalanx.compute.plan import JobPlan
from phalanx.spec import interpolate
from phalanx.storage.cache import NodeCache


@dataclass
class Ready:
    """The job on one machine: its inputs ready there, its command for that machine."""

    inputs_ready: InputsReady
    """What holds the inputs (mounts, pinned files); :meth:`InputsReady.close` lets go."""
    inputs: dict[str, str]
    """The value each input takes in the command (literals and paths)."""
    command: str
    """The command with every ``${{...}}`` substituted."""


def make_ready(
    plan: JobPlan,
    *,
    outputs: Mapping[str, str],
    checkpoints: Path,
    mounts: Path,
    cache: NodeCache | None = None,
    canceled: Callable[[], bool] = lambda: False,
    owner: tuple[int, int] | None = None,
    shown_in: Path | None = None,
) -> Ready:
    """Make the plan's data inputs ready here and substitute the command.

    Args:
        outputs: What each ``${{outputs.NAME}}`` becomes on this machine.
        checkpoints: ``${{outputs.checkpoints}}`` on this machine.
        mounts: Where read-only mounts go.
        cache: The node cache (``None``: this machine's, from the environment).
        canceled, owner, shown_in: As for :func:`phalanx.compute.inputs.make_ready`.

    Raises:
        PreparationCanceled: ``canceled()`` said so.
        PhalanxError: an input cannot be made ready here.
    """
    ready = make_inputs_ready(
        plan.data_inputs, plan.locations, mounts, cache, canceled, owner=owner, shown_in=shown_in
    )
    try:
        inputs = {**plan.literals, **ready.values}
        references = {**outputs, "checkpoints": str(checkpoints)}  # the built-in output
        command = interpolate(plan.command, inputs, references, literals=plan.literals.keys())
    except BaseException:
        ready.close()
        raise
    return Ready(ready, inputs, command)
