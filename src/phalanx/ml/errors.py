"""The SDK's one-line errors: what the CLI would say, with the field named as the
caller wrote it (``command(): inputs.data.mode: …``)."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any, ParamSpec, TypeVar

from phalanx.errors import PhalanxError, SpecError, SpecProblem

T = TypeVar("T", bound=type)
P = ParamSpec("P")
R = TypeVar("R")

#: What errors about a ``command(...)`` argument name as their source.
COMMAND = "command()"
#: What errors about a sweep job (``job.sweep(...)``, a ``SweepJob``) name as their source.
SWEEP = "sweep()"

# The YAML loader's words for where relative paths start, and the SDK's.
_RELATIVE_TO = (
    ("code: is relative to the spec file's folder", "code is relative to the current folder"),
    ("the path is relative to the spec file", "the path is relative to the current folder"),
)

# Fixes the CLI words for a shell or a job.yml, and the same fixes in Python, for the
# messages and notes the backends send (the service layer words them once, for the CLI).
_IN_PYTHON = (
    ("`phalanx job list` shows the jobs", "ml_client.jobs.list() shows the jobs"),
    ("(phalanx environment list)", "(ml_client.environments.list())"),
    ("register it with `phalanx environment create -f env.yml`, or give environment: "
     "{image: …} or {pip_file: requirements.txt}",
     "register it with ml_client.environments.create_or_update(Environment(name=..., "
     "image=...)), or give environment=Environment(image=...) or "
     "environment=Environment(pip_file='requirements.txt')"),
    ("give another --version or leave it out", "give another version= or leave it out"),
    ("`phalanx compute list` shows them", "ml_client.compute.list() shows them"),
    ("`phalanx datastore list` shows them", "ml_client.datastores.list() shows them"),
    ("`phalanx environment list` shows them", "ml_client.environments.list() shows them"),
    ("`phalanx model list` shows them", "ml_client.models.list() shows them"),
    ("`phalanx data list` shows them", "ml_client.data.list() shows them"),
)  # fmt: skip


def in_python(text: str) -> str:
    """A backend's message or note with the fixes it gives for the CLI given for Python."""
    for cli_words, python_words in _IN_PYTHON:
        text = text.replace(cli_words, python_words)
    return text


class MLError(SpecError):
    """An argument of the SDK that phalanx cannot take: one line, the field named.

    A :class:`~phalanx.errors.SpecError` (and so a :class:`~phalanx.errors.PhalanxError`):
    ``field`` is the argument or the dotted path inside it, ``source`` the call
    (``command()``, ``Input()``, ``ml_client.data``…), ``line`` is ``None``.
    """


class JobFailed(PhalanxError):
    """``ml_client.jobs.stream()`` saw the job end Failed or Canceled (Azure ML raises too)."""

    def __init__(self, name: str, status: str, cause: str | None) -> None:
        self.name = name
        self.status = status
        why = f": {cause}" if cause else ""
        super().__init__(f"job {name} ended {status}{why}")


def argument_error(source: str, field: str, message: str) -> MLError:
    """An :class:`MLError` about one argument."""
    return MLError(message, field=field, source=source)


def unknown_keywords(
    source: str, given: Collection[str], known: Collection[str], *, what: str = "keyword argument"
) -> None:
    """Refuse the first of ``given`` not in ``known``, with the closest known one.

    Raises:
        MLError: ``Data(): paht: is not a keyword argument of Data(); did you mean 'path'?``.
    """
    from phalanx.errors import suggest

    for key in given:
        if key not in known:
            close = suggest(key, sorted(known))
            takes = ", ".join(sorted(known)) or "none"
            hint = f"; did you mean {close!r}?" if close else f"; it takes {takes}"
            raise MLError(f"is not a {what}{hint}", field=key, source=source)


def checked_keywords(cls: T) -> T:
    """``cls`` whose constructor refuses an unknown keyword with :func:`unknown_keywords`
    (a one-line :class:`MLError` with "did you mean"), not a bare ``TypeError``."""
    init: Callable[..., None] = cls.__init__  # type: ignore[misc]
    known = [p for p in inspect.signature(init).parameters if p != "self"]
    source = f"{cls.__name__}()"

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown_keywords(source, kwargs, known)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def from_spec_error(error: SpecError, renames: Mapping[str, str], source: str = COMMAND) -> MLError:
    """The spec's problems, each with the field as the SDK caller wrote it.

    The YAML the SDK builds has lines nobody wrote; they are dropped. ``renames``
    maps a spec field's dotted prefix to the caller's name for it
    (``resources.instance_count`` → ``instance_count`` for ``command(instance_count=…)``);
    ``source`` is the call named (``command()``, ``sweep()``).
    """
    problems = []
    for problem in error.problems:
        field = problem.field
        if field is not None:
            for prefix, name in renames.items():
                if field == prefix or field.startswith(prefix + "."):
                    field = name + field[len(prefix) :]
                    break
        message = problem.message
        for yaml_words, sdk_words in _RELATIVE_TO:
            message = message.replace(yaml_words, sdk_words)
        problems.append(SpecProblem(message, field=field, source=source))
    made = MLError.of(problems)
    assert isinstance(made, MLError)
    return made


def surfaced(call: Callable[P, R], source: str) -> Callable[P, R]:
    """``call`` made for a caller in Python: arguments it does not take are a one-line
    :class:`MLError` (with "did you mean"), not a ``TypeError``; and its
    :class:`~phalanx.errors.PhalanxError` reaches the caller as the CLI shows it, without
    the frames and the chain inside phalanx (a notebook or a script then shows one line
    under the caller's), its CLI fixes given in Python. ``PHALANX_DEBUG=1`` keeps the
    frames, as it does for the CLI."""
    signature = inspect.signature(call)
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [k for k, p in params.items() if k != "self" and p.kind is not p.VAR_KEYWORD]

    @functools.wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            if not takes_any:
                unknown_keywords(source, [k for k in kwargs if k not in params], named)
            raise MLError(str(exc), source=source) from None
        try:
            return call(*args, **kwargs)
        except PhalanxError as exc:
            if os.environ.get("PHALANX_DEBUG") == "1":
                raise
            exc.__cause__ = None
            exc.__suppress_context__ = True
            if len(exc.args) == 1 and isinstance(exc.args[0], str) and str(exc) == exc.args[0]:
                exc.args = (in_python(exc.args[0]),)
            raise exc.with_traceback(None) from None

    return wrapper


def surfaced_methods(group: str) -> Callable[[T], T]:
    """A class decorator: :func:`surfaced` around each public method of ``ml_client.<group>``."""

    def decorate(cls: T) -> T:
        for key, value in list(vars(cls).items()):
            if not key.startswith("_") and inspect.isfunction(value):
                setattr(cls, key, surfaced(value, f"ml_client.{group}.{key}()"))
        return cls

    return decorate
