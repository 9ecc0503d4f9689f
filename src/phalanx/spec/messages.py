"""A pydantic ``ValidationError`` → a :class:`SpecError` in plain English.

Every problem is described (``job validate`` lists them all; ``job create``
shows the first and counts the rest), each naming its field by its dotted
YAML path and pointing at its line, or at the ``--set`` item that gave it.
Problems are ordered by line. A required field that is missing because its
key is misspelt (``comand:``) is one mistake, not two: only the unknown key
is reported, with its "did you mean". So is a sweep's trial field written at its
top level (``command:`` beside ``trial:``): it is said to belong under ``trial:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from phalanx.errors import SpecError, SpecProblem, suggest
from phalanx.limits import clip
from phalanx.spec.environment import EnvironmentSpec
from phalanx.spec.job import JobSpec
from phalanx.spec.parts import (
    InputSpec,
    Limits,
    MpiDistribution,
    OutputSpec,
    PyTorchDistribution,
    QueueSettings,
    Resources,
    Retry,
    TensorFlowDistribution,
)
from phalanx.spec.sweep import (
    DISTRIBUTION_MODELS,
    POLICY_MODELS,
    TRIAL_FIELDS,
    Objective,
    SamplingAlgorithm,
    SweepLimits,
    SweepSpec,
    TrialSpec,
)
from phalanx.spec.values import USER_ERROR_TYPE, show
from phalanx.spec.yamldoc import LineMap

SET_ITEM_CHARS = 200
"""Characters of a ``--set KEY=VALUE`` item a problem quotes back (a value may be 100 KB)."""

_BLOCKS: dict[str, type[BaseModel]] = {
    "resources": Resources,
    "limits": Limits,
    "retry": Retry,
    "queue_settings": QueueSettings,
}
_DISTRIBUTIONS: dict[str, type[BaseModel]] = {
    "pytorch": PyTorchDistribution,
    "mpi": MpiDistribution,
    "tensorflow": TensorFlowDistribution,
}
_SWEEP_BLOCKS: dict[str, type[BaseModel]] = {
    "trial": TrialSpec,
    "limits": SweepLimits,
    "objective": Objective,
    "sampling_algorithm": SamplingAlgorithm,
    "retry": Retry,
    "queue_settings": QueueSettings,
}
_MISSING_HINTS = {
    "command": "add e.g. command: python train.py",
    "path": "give the data's local path or URI",
}
_QUOTED_RE = re.compile(r"'([^']*)'")


@dataclass(frozen=True)
class _Found:
    """One problem, described, before it is placed in the file."""

    path: tuple[str, ...]
    message: str
    missing: bool = False
    """A required field that is absent."""
    stands_for: tuple[tuple[str, ...], ...] = ()
    """For an unknown key: the fields it is likely meant as (a typo of one, a trial's
    field out of place), whose absence is then no mistake of its own."""


def to_spec_error(
    exc: ValidationError,
    data: Mapping[str, Any],
    *,
    source: str,
    lines: LineMap,
    overrides: Mapping[tuple[str, ...], str],
    root: type[BaseModel] = JobSpec,
) -> SpecError:
    """Every error of ``exc`` as one :class:`SpecError`.

    Args:
        exc: From validating ``data``.
        data: The document that was validated (after ``--set``).
        source: Name of the spec file.
        lines: Line of each field path in ``source``.
        overrides: Paths set by ``--set`` → the item that set them.
        root: The model ``data`` was validated as (a command job, a sweep).
    """
    found: list[_Found] = []
    for error in exc.errors(include_url=False):
        found.extend(_describe(error, data, root))
    problems = [_place(one, source, lines, overrides) for one in _one_per_mistake(found)]
    # Problems without a line (a missing top-level field, --set) concern the whole
    # document and come first; sorted() is stable, so pydantic's order breaks ties.
    return SpecError.of(sorted(problems, key=lambda problem: problem.line or 0))


def _describe(error: ErrorDetails, data: Mapping[str, Any], root: type[BaseModel]) -> list[_Found]:
    kind = error["type"]
    raw_loc = tuple(error["loc"])
    ctx = error.get("ctx") or {}
    if kind == USER_ERROR_TYPE and "loc" in ctx:
        path: tuple[str, ...] = tuple(ctx["loc"])
    else:
        path = _field_path(raw_loc, data, keep_last=kind == "missing")
    if kind == "union_tag_not_found":
        return _untagged(path, _node_at(data, path))
    if kind == "union_tag_invalid":
        path = (*path, "type")
    if kind == "extra_forbidden":
        key = str(raw_loc[-1])
        if root is SweepSpec and len(raw_loc) == 1 and key in TRIAL_FIELDS:
            message = (
                f"{key} belongs under trial: in a sweep job (trial: is the command job each "
                "trial runs); move it there"
            )
            return [_Found(path, message, stands_for=(("trial",), ("trial", key)))]
        model = _model_at(raw_loc[:-1], root)
        message, close = _unknown_key(key, _known_keys(model) if model is not None else [])
        return [_Found(path, message, stands_for=((*path[:-1], close),) if close else ())]
    return [_Found(path, _message(error, raw_loc, path, root), missing=kind == "missing")]


def _untagged(path: tuple[str, ...], node: Any) -> list[_Found]:
    """A ``distribution:`` without ``type:``.

    pydantic cannot tell which model the mapping is for, so it reports nothing
    about its keys; those that no distribution knows are reported here, so
    that a misspelt ``tpye:`` reads as the typo it is.
    """
    found = [
        _Found(
            (*path, "type"),
            f"missing; add type: with one of {', '.join(_DISTRIBUTIONS)}",
            missing=True,
        )
    ]
    if isinstance(node, dict):
        known = list(dict.fromkeys(k for m in _DISTRIBUTIONS.values() for k in _known_keys(m)))
        for key in map(str, node):
            if key not in known:
                message, close = _unknown_key(key, known)
                stands_for = ((*path, close),) if close else ()
                found.append(_Found((*path, key), message, stands_for=stands_for))
    return found


def _one_per_mistake(found: list[_Found]) -> list[_Found]:
    """``found`` without a missing field that an unknown key is a near miss of
    (the typo is the mistake), and without repeats."""
    meant = {field for one in found for field in one.stands_for}
    kept: list[_Found] = []
    seen: set[tuple[tuple[str, ...], str]] = set()
    for one in found:
        if one.missing and one.path in meant:
            continue
        if (one.path, one.message) not in seen:
            seen.add((one.path, one.message))
            kept.append(one)
    return kept


def _place(
    one: _Found, source: str, lines: LineMap, overrides: Mapping[tuple[str, ...], str]
) -> SpecProblem:
    """The problem at its line in ``source``, or at the ``--set`` item that gave it."""
    field = ".".join(one.path) or None
    for set_path, item in overrides.items():
        if one.path[: len(set_path)] == set_path:
            return SpecProblem(
                f"{one.message} (from --set {clip(item, SET_ITEM_CHARS)})",
                field=field,
                source="--set",
            )
    return SpecProblem(one.message, field=field, source=source, line=_line(one.path, lines))


def _node_at(data: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if not isinstance(data, dict) or step not in data:
            return None
        data = data[step]
    return data


def _field_path(loc: tuple[Any, ...], data: Any, *, keep_last: bool) -> tuple[str, ...]:
    """``loc`` without the union tags pydantic inserts (``distribution.pytorch.x``).

    A tag is any location step that is not in the document; a missing field's
    own name is kept.
    """
    path: list[str] = []
    node = data
    for depth, step in enumerate(loc):
        in_dict = isinstance(node, dict) and step in node
        in_list = isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
        if in_dict or in_list:
            node = node[step]
        elif not (keep_last and depth == len(loc) - 1):
            continue
        path.append(str(step))
    return tuple(path)


def _line(path: tuple[str, ...], lines: LineMap) -> int | None:
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def _model_at(loc: tuple[Any, ...], root: type[BaseModel] = JobSpec) -> type[BaseModel] | None:
    """The model that validates the mapping at ``loc`` (a location with union tags) of a
    document validated as ``root``."""
    if not loc:
        return root
    if root is SweepSpec:
        if loc[0] == "trial":  # a command job's fields
            return _model_at(loc[1:]) if len(loc) > 1 else TrialSpec
        if len(loc) == 1 and isinstance(loc[0], str):
            return _SWEEP_BLOCKS.get(loc[0])
        if loc[0] == "early_termination" and len(loc) == 2:
            return POLICY_MODELS.get(str(loc[1]))
        if loc[0] == "search_space" and len(loc) == 3:
            return DISTRIBUTION_MODELS.get(str(loc[2]))
    if len(loc) == 1 and isinstance(loc[0], str):
        return _BLOCKS.get(loc[0])
    if loc[0] == "distribution" and len(loc) == 2:
        return _DISTRIBUTIONS.get(str(loc[1]))
    if loc[0] == "inputs" and len(loc) == 3 and loc[2] == "input":
        return InputSpec
    if loc[0] == "outputs" and len(loc) == 2:
        return OutputSpec
    if loc == ("environment", "inline"):
        return EnvironmentSpec
    return None


def _known_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _one_of(choices: list[str], value: object) -> str:
    message = f"must be one of {', '.join(choices)}; got {show(value)}"
    close = suggest(value, choices) if isinstance(value, str) else None
    return f"{message}; did you mean '{close}'?" if close else message


def _unknown_key(key: str, known: list[str]) -> tuple[str, str | None]:
    """The message for an unknown ``key``, and the known field it is a near miss of."""
    close = suggest(key, known)
    if close:
        return f"unknown field '{clip(key)}'; did you mean '{close}'?", close
    if known:
        return f"unknown field '{clip(key)}'; known fields: {', '.join(known)}", None
    return f"unknown field '{clip(key)}'; remove it", None


def _message(
    error: ErrorDetails, loc: tuple[Any, ...], path: tuple[str, ...], root: type[BaseModel]
) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error["input"]
    if kind == USER_ERROR_TYPE:
        return str(ctx["message"])
    if kind == "missing":
        name = path[-1] if path else ""
        return f"required but missing; {_MISSING_HINTS.get(name, f'add {name}:')}"
    if kind == "literal_error":
        return _one_of(_QUOTED_RE.findall(str(ctx.get("expected", ""))), value)
    if kind == "union_tag_invalid":
        return _one_of(_QUOTED_RE.findall(str(ctx.get("expected_tags", ""))), ctx.get("tag"))
    if kind == "input_value":
        return f"{error['msg']}; got {show(value)}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer; got {show(value)}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number; got {show(value)}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false; got {show(value)}"
    if kind == "string_type":
        return f"must be a string; got {show(value)}"
    if kind == "dict_type":
        return f"must be a mapping of key: value pairs; got {show(value)}"
    if kind in ("model_type", "model_attributes_type"):
        model = _model_at(loc, root)
        keys = f" with keys {', '.join(_known_keys(model))}" if model is not None else ""
        return f"must be a mapping{keys}; got {show(value)}"
    if kind == "list_type":
        return f"must be a list; got {show(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}; got {show(value)}"
    if kind == "greater_than":
        return f"must be more than {ctx['gt']}; got {show(value)}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}; got {show(value)}"
    if kind == "string_too_long":
        return f"is {len(str(value))} characters long; at most {ctx['max_length']}"
    if kind == "too_long":
        return f"has {ctx.get('actual_length')} items; at most {ctx['max_length']}"
    return f"{error['msg']}; got {show(value)}"
