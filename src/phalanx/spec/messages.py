"""A pydantic ``ValidationError`` → one :class:`SpecError` in plain English.

Only the first problem is reported in full (the user fixes it and runs again);
the count of the rest is appended. The error names the field by its dotted
YAML path and points at its line, or at the ``--set`` item that gave it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from phalanx.errors import SpecError
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
from phalanx.spec.values import USER_ERROR_TYPE, show, suggest
from phalanx.spec.yamldoc import LineMap

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
_MISSING_HINTS = {
    "command": "add e.g. command: python train.py",
    "path": "give the data's local path or URI",
}
_QUOTED_RE = re.compile(r"'([^']*)'")


def to_spec_error(
    exc: ValidationError,
    data: Mapping[str, Any],
    *,
    source: str,
    lines: LineMap,
    overrides: Mapping[tuple[str, ...], str],
) -> SpecError:
    """The first error of ``exc`` as a :class:`SpecError`.

    Args:
        exc: From validating ``data``.
        data: The document that was validated (after ``--set``).
        source: Name of the spec file.
        lines: Line of each field path in ``source``.
        overrides: Paths set by ``--set`` → the item that set them.
    """
    errors = exc.errors(include_url=False)
    first = errors[0]
    raw_loc = tuple(first["loc"])
    ctx = first.get("ctx") or {}
    if first["type"] == USER_ERROR_TYPE and "loc" in ctx:
        path: tuple[str, ...] = tuple(ctx["loc"])
    else:
        path = _field_path(raw_loc, data, keep_last=first["type"] == "missing")
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        path = (*path, "type")
    message = _message(first, raw_loc, path)
    if len(errors) > 1:
        more = len(errors) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    field = ".".join(path) or None

    for set_path, item in overrides.items():
        if path[: len(set_path)] == set_path:
            return SpecError(f"{message} (from --set {item})", field=field, source="--set")
    return SpecError(message, field=field, source=source, line=_line(path, lines))


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


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that validates the mapping at ``loc`` (a location with union tags)."""
    if not loc:
        return JobSpec
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


def _message(error: ErrorDetails, loc: tuple[Any, ...], path: tuple[str, ...]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error["input"]
    if kind == USER_ERROR_TYPE:
        return str(ctx["message"])
    if kind == "missing":
        name = path[-1] if path else ""
        return f"required but missing; {_MISSING_HINTS.get(name, f'add {name}:')}"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        known = _known_keys(model) if model is not None else []
        close = suggest(key, known)
        if close:
            return f"unknown field '{key}'; did you mean '{close}'?"
        if known:
            return f"unknown field '{key}'; known fields: {', '.join(known)}"
        return f"unknown field '{key}'; remove it"
    if kind == "literal_error":
        return _one_of(_QUOTED_RE.findall(str(ctx.get("expected", ""))), value)
    if kind == "union_tag_invalid":
        return _one_of(_QUOTED_RE.findall(str(ctx.get("expected_tags", ""))), ctx.get("tag"))
    if kind == "union_tag_not_found":
        return f"missing; add type: with one of {', '.join(_DISTRIBUTIONS)}"
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
        model = _model_at(loc)
        keys = f" with keys {', '.join(_known_keys(model))}" if model is not None else ""
        return f"must be a mapping{keys}; got {show(value)}"
    if kind == "list_type":
        return f"must be a list; got {show(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}; got {show(value)}"
    if kind == "greater_than":
        return f"must be more than {ctx['gt']}; got {show(value)}"
    return f"{error['msg']}; got {show(value)}"
