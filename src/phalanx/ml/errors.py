"""The SDK's one-line errors: what the CLI would say, with the field named as the
caller wrote it (``command(): inputs.data.mode: …``)."""

from __future__ import annotations

from collections.abc import Mapping

from phalanx.errors import PhalanxError, SpecError, SpecProblem

#: What errors about a ``command(...)`` argument name as their source.
COMMAND = "command()"

# The YAML loader's words for where relative paths start, and the SDK's.
_RELATIVE_TO = (
    ("code: is relative to the spec file's folder", "code is relative to the current folder"),
    ("the path is relative to the spec file", "the path is relative to the current folder"),
)


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


def from_spec_error(error: SpecError, renames: Mapping[str, str]) -> MLError:
    """The spec's problems, each with the field as the SDK caller wrote it.

    The YAML the SDK builds has lines nobody wrote; they are dropped. ``renames``
    maps a spec field's dotted prefix to the caller's name for it
    (``resources.instance_count`` → ``instance_count`` for ``command(instance_count=…)``).
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
        problems.append(SpecProblem(message, field=field, source=COMMAND))
    made = MLError.of(problems)
    assert isinstance(made, MLError)
    return made
