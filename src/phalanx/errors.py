"""Errors a user can fix, as opposed to bugs.

The CLI prints a :class:`PhalanxError` as one line (``job validate``: a
:class:`SpecError` as a line per problem) and exits with
:attr:`PhalanxError.exit_code` (2); any other exception is a bug and keeps its
traceback. ``PHALANX_DEBUG=1`` shows the traceback for user errors too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

QUOTED = 100
"""Characters of a user's name a message quotes: a 100 KB name is not echoed back whole."""
# Longer words are no typo of a known name (and comparing them costs time).
_LONGEST_TYPO = 100


class PhalanxError(Exception):
    """A problem with the user's input or environment, with the fix in its message."""

    exit_code: int = 2

    def lines(self) -> list[str]:
        """What the CLI prints, one ``error: …`` line each."""
        return [str(self)]


class UnsetVariableError(PhalanxError):
    """A credential reference names an environment variable that is not set.

    Where it is read matters: through a server, the variable belongs to the
    server's environment, and the server words the message for that
    (:meth:`on_server`).
    """

    def __init__(self, what: str, variable: str, fix: str) -> None:
        self.what, self.variable, self.fix = what, variable, fix
        super().__init__(f"{what}: environment variable {variable} is not set; {fix}")

    def on_server(self) -> str:
        """The message as a client of a server should read it."""
        return (
            f"{self.what}: environment variable {self.variable} is not set on the server; "
            "set it in the server's environment and restart the server, or store the "
            "credential with `phalanx datastore create ... --store`"
        )


class Forbidden(PhalanxError):
    """The caller's role, or who owns the record, does not allow what was asked
    (HTTP 403; :mod:`phalanx.service.access` decides)."""


class QueueFull(PhalanxError):
    """The caller has as many jobs waiting as the server takes from one user (HTTP 429;
    ``phalanx server start --max-queued-per-user``)."""


class PreparationCanceled(PhalanxError):
    """The job was canceled while it was being prepared (inputs, its environment)."""


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a job spec.

    Args:
        message: What is wrong and how to fix it.
        field: Dotted path of the offending field (``resources.instance_count``),
            or ``None`` for the document as a whole.
        source: The file the spec came from (``--set`` for an override), if any.
        line: 1-based line of the field in ``source``, if known.
    """

    message: str
    field: str | None = None
    source: str | None = None
    line: int | None = None

    def one_line(self) -> str:
        """``job.yml:7: resources.instance_count: must be at least 1; got 0``."""
        where = self.source or "job spec"
        if self.line is not None:
            where = f"{where}:{self.line}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


class SpecError(PhalanxError):
    """A job spec that does not validate: one problem or several.

    ``str()`` is one line, the first problem and a count of the rest (what
    ``job create`` and ``run`` print); :attr:`problems` holds every one, in the
    order they are best fixed, and ``job validate`` prints each (see
    :attr:`every_problem`). ``message``, ``field``, ``source`` and ``line`` are
    those of the first problem.

    Args:
        message: What is wrong and how to fix it.
        field: Dotted path of the offending field, or ``None``.
        source: The file the spec came from, if any.
        line: 1-based line of the field in ``source``, if known.
    """

    #: Set by ``job validate``: :meth:`lines` gives every problem, not one line.
    every_problem: bool = False

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        self.problems = [SpecProblem(message, field=field, source=source, line=line)]
        super().__init__(self.one_line())

    @classmethod
    def of(cls, problems: Sequence[SpecProblem]) -> SpecError:
        """An error listing ``problems`` (at least one), the first shown first."""
        if not problems:
            raise ValueError("a SpecError needs at least one problem")
        first = problems[0]
        error = cls(first.message, field=first.field, source=first.source, line=first.line)
        error.problems = list(problems)
        error.args = (error.one_line(),)
        return error

    @property
    def message(self) -> str:
        return self.problems[0].message

    @property
    def field(self) -> str | None:
        return self.problems[0].field

    @property
    def source(self) -> str | None:
        return self.problems[0].source

    @property
    def line(self) -> int | None:
        return self.problems[0].line

    def one_line(self) -> str:
        """The first problem, and how many more there are."""
        text = self.problems[0].one_line()
        more = len(self.problems) - 1
        if more:
            text += f" (and {more} more problem{'s' if more > 1 else ''})"
        return text

    def __str__(self) -> str:
        return self.one_line()

    def lines(self) -> list[str]:
        if self.every_problem:
            return [problem.one_line() for problem in self.problems]
        return [self.one_line()]


def quote(name: str) -> str:
    """``name`` as a message quotes it: ``'cpu-cluster'``, cut to :data:`QUOTED` characters
    with ``…``, control characters escaped."""
    return repr(name if len(name) <= QUOTED else name[: QUOTED - 1] + "…")


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word``, if any is close enough to be a likely typo."""
    if len(word) > _LONGEST_TYPO:
        return None
    choices = list(choices)
    for choice in choices:
        if choice.lower() == word.lower():
            return choice
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


class UnknownName(PhalanxError):
    """A name the workspace has no record of: a job, compute target, datastore,
    environment, model or data asset.

    One line: what was not found, the known name it is a near miss of ("did you
    mean …?", as a spec's unknown fields say) and the command any member may run
    to see the names; never a fix only an admin may make. It does not say where
    the workspace is: the CLI on this machine adds that, and a server never tells
    its callers where its folders are.

    Args:
        kind: What was looked for (``compute target``).
        name: The name as given (quoted at most :data:`QUOTED` characters).
        known: The names there are; the caller may see each of them.
        listing: The command that lists them, as a sentence
            (```phalanx compute list` shows the targets``).
    """

    def __init__(self, kind: str, name: str, known: Iterable[str], listing: str) -> None:
        self.kind, self.name = kind, name
        close = suggest(name, known)
        hint = f"did you mean {close!r}? " if close else ""
        super().__init__(f"{kind} {quote(name)} not found; {hint}{listing}")


class JobNotFoundError(UnknownName):
    """No job of that name exists in the workspace."""

    def __init__(self, name: str) -> None:
        super().__init__("job", name, (), "`phalanx job list` shows the jobs")


class DatabaseUnavailable(PhalanxError):
    """The workspace database cannot be reached now: stopped, restarting, the network
    gone, or busy past the lock wait. The same request may succeed when repeated; a
    server answers it with 503 (``database unavailable, retrying``).

    Args:
        message: The one line, with the fix.
        reason: What the driver said, without any password.
    """

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason
