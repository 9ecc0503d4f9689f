"""Small value rules shared by the spec models: names, scalars, durations, paths.

Validators raise :func:`user_error` rather than ``ValueError`` so that the message
reaches the user verbatim (no "Value error, " prefix) and, where a check spans
fields, so that it can name the field it is about (``loc``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

from phalanx.limits import tags_problem, text_problem

#: Error type of every message written by phalanx itself (not by pydantic).
USER_ERROR_TYPE = "phalanx"

#: Azure ML's rule for job names.
#: Input and output names: what ``${{inputs.<name>}}`` can refer to.
IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Names a POSIX shell accepts as environment variables.
ENV_VAR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The longest URL kept (``$schema``).
MAX_URL = 2048
#: The largest block phalanx only records (``identity``, ``services``), as JSON.
MAX_RECORDED = 16 << 10
#: The longest duration (timeouts, grace periods): a year.
MAX_DURATION_S = 365 * 86400
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_DURATION_UNITS = (86400, 3600, 60, 1)
# A scheme of one letter is a Windows drive ("C:\data"), not a URI.
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]+):")
_FILE_PREFIX = "file://"


def user_error(message: str, loc: tuple[str, ...] | None = None) -> PydanticCustomError:
    """A validation error whose message is shown to the user as written.

    Args:
        message: What is wrong and how to fix it.
        loc: Field the error is about, when it is not the field being validated
            (a check in a model validator, or on one key of a mapping).
    """
    context: dict[str, Any] = {"message": message}
    if loc is not None:
        context["loc"] = loc
    return PydanticCustomError(USER_ERROR_TYPE, "{message}", context)


def show(value: object) -> str:
    """How a user's value is quoted in a message: ``'two'``, ``3``, ``a mapping``."""
    if isinstance(value, bool):
        return render_literal(value)
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def render_literal(value: bool | int | float | str) -> str:
    """The text a literal value becomes in a command line or an environment variable.

    Booleans render as ``true``/``false`` (as YAML wrote them), not Python's
    ``True``/``False``; everything else is ``str(value)``.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def coerce_str_mapping(value: Any, field: str) -> Any:
    """Turn scalar values of a mapping into strings (``3`` → ``"3"``, null → ``""``).

    Non-mappings are returned unchanged for the type check to report; a list or
    mapping value is an error.
    """
    if not isinstance(value, dict):
        return value
    out: dict[Any, str] = {}
    for key, item in value.items():
        if item is None:
            out[key] = ""
        elif isinstance(item, (bool, int, float, str)):
            out[key] = render_literal(item)
        else:
            raise user_error(
                f"must be a string or a number; got {show(item)}", loc=(field, str(key))
            )
    return out


def limited(value: str | None, limit: int) -> str | None:
    """``value`` when it has at most ``limit`` characters and no control character.

    Raises:
        PydanticCustomError: saying which.
    """
    if value is None:
        return None
    problem = text_problem(value, limit)
    if problem is not None:
        raise user_error(problem)
    return value


def limited_tags(value: Any, field: str) -> Any:
    """Tags (a mapping) within :mod:`phalanx.limits`' count and sizes; others unchanged.

    Raises:
        PydanticCustomError: naming the tag.
    """
    if not isinstance(value, dict):
        return value
    found = tags_problem(value)
    if found is not None:
        key, problem = found
        raise user_error(problem, loc=(field,) if key is None else (field, key))
    return value


def recorded(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A block phalanx only records (``identity``, ``services``), at most
    :data:`MAX_RECORDED` characters as JSON.

    Raises:
        PydanticCustomError: it is larger.
    """
    if value is None:
        return None
    size = len(json.dumps(value, default=str))
    if size > MAX_RECORDED:
        raise user_error(
            f"is {size} characters as JSON; phalanx only records it, and takes at most "
            f"{MAX_RECORDED}"
        )
    return value


def parse_duration(value: Any) -> int:
    """Seconds from an int (Azure ML style) or a duration string like ``1h30m``.

    Raises:
        PydanticCustomError: ``value`` is neither, is not positive, or is more than
            :data:`MAX_DURATION_S`.
    """
    hint = "a number of seconds or a duration like '90s', '30m', '2h', '1h30m'"
    if isinstance(value, bool):
        raise user_error(f"must be {hint}; got {show(value)}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, float) and value.is_integer():
        seconds = int(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        match = _DURATION_RE.match(text)
        if text.isdigit():
            seconds = int(text)
        elif text and match:
            parts = zip(match.groups(), _DURATION_UNITS, strict=True)
            seconds = sum(int(n) * unit for n, unit in parts if n)
        else:
            raise user_error(f"must be {hint}; got {show(value)}")
    else:
        raise user_error(f"must be {hint}; got {show(value)}")
    if seconds <= 0:
        raise user_error(f"must be more than 0 seconds; got {show(value)}")
    if seconds > MAX_DURATION_S:
        raise user_error(f"must be at most a year ({MAX_DURATION_S} seconds); got {show(value)}")
    return seconds


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URI phalanx keeps as written (``azureml://``, ``s3://``, …)."""
    match = _SCHEME_RE.match(path)
    return match is not None and match.group(1).lower() != "file"


def strip_file_scheme(path: str) -> str:
    """``file:///data/x`` → ``/data/x``; ``file://data`` → ``data``; others unchanged."""
    return path[len(_FILE_PREFIX) :] if path.lower().startswith(_FILE_PREFIX) else path


def base_dir_of(info: ValidationInfo) -> Path | None:
    """The folder relative paths resolve against, when the loader gave one.

    Without it (re-validating a stored record) paths are kept as written.
    """
    context = info.context
    if isinstance(context, dict):
        base = context.get("base_dir")
        if isinstance(base, Path):
            return base
    return None


def resolve_local(path: str, base_dir: Path) -> str:
    """An absolute local path for ``path``; URIs with another scheme are kept as written."""
    if is_remote(path):
        return path
    local = os.path.expanduser(strip_file_scheme(path))
    return os.path.normpath(os.path.join(base_dir, local))
