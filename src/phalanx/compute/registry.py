"""The compute kinds phalanx knows: every object in the ``phalanx.compute_kinds``
entry-point group, ``local`` and ``ray`` (phalanx's own, :mod:`phalanx.kinds`) and any
an installed package adds.

A kind registers itself in its distribution's metadata, e.g. in ``pyproject.toml``::

    [project.entry-points."phalanx.compute_kinds"]
    slurm = "phalanx_slurm:KIND"

so every process that resolves a target (the CLI, the server, the scheduler, a job's
supervisor) finds it with no change to phalanx. The entry point's name is the kind's
name; it names an instance of :class:`~phalanx.compute.kind.ComputeKind`.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

from phalanx.compute.kind import ComputeKind, TargetSettings
from phalanx.errors import PhalanxError

GROUP = "phalanx.compute_kinds"


@functools.cache
def names() -> tuple[str, ...]:
    """The registered kinds' names, sorted, without importing them (for ``--type``)."""
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


@functools.cache
def kinds() -> dict[str, ComputeKind]:
    """Every registered kind by name, loaded.

    Raises:
        PhalanxError: an entry point that does not name a kind of its own name, or none
            for ``local`` (phalanx's own metadata is missing: it is not installed).
    """
    found: dict[str, ComputeKind] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            continue  # the first on the path wins, as for a module
        kind = ep.load()
        if not isinstance(kind, ComputeKind) or kind.name != ep.name:
            raise PhalanxError(
                f"entry point {ep.name} = {ep.value} ({GROUP}) is not a compute kind named "
                f"{ep.name!r}: it must name an instance of phalanx.compute.kind.ComputeKind"
            )
        found[ep.name] = kind
    if "local" not in found:
        raise PhalanxError(
            f"no compute kind 'local' in the {GROUP} entry points: phalanx's metadata is "
            "missing; install phalanx (pip install -e .) in this environment"
        )
    return found


def kind(name: str) -> ComputeKind:
    """The kind called ``name``.

    Raises:
        PhalanxError: no such kind, naming those there are.
    """
    found = kinds().get(name)
    if found is None:
        raise PhalanxError(
            f"--type {name}: not a compute kind phalanx knows ({', '.join(sorted(kinds()))})"
        )
    return found


def kind_of(target: TargetSettings) -> ComputeKind:
    """The kind of a target's settings."""
    return kind(target.type)


def builtin(name: str) -> ComputeKind | None:
    """The kind whose built-in target is called ``name`` (``local``), if one is."""
    return next((k for k in kinds().values() if k.builtin == name), None)


def load(data: dict[str, Any]) -> TargetSettings:
    """Settings from a record's JSON object (its ``type`` picks the model).

    Raises:
        PhalanxError: an unknown kind, or settings it does not accept.
    """
    from pydantic import ValidationError

    try:
        return kind(str(data.get("type"))).settings.model_validate(data)
    except ValidationError as exc:
        raise PhalanxError(f"a compute target record cannot be read: {exc}") from exc
