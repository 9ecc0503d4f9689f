"""Errors a user can fix, as opposed to bugs.

The CLI prints a :class:`PhalanxError` as one line and exits with
:attr:`PhalanxError.exit_code` (2); any other exception is a bug and keeps its
traceback. ``PHALANX_DEBUG=1`` shows the traceback for user errors too.
"""

from __future__ import annotations


class PhalanxError(Exception):
    """A problem with the user's input or environment, with the fix in its message."""

    exit_code: int = 2


class PreparationCanceled(PhalanxError):
    """The job was canceled while it was being prepared (inputs, its environment)."""


class SpecError(PhalanxError):
    """A job spec that does not validate.

    Args:
        message: What is wrong and how to fix it.
        field: Dotted path of the offending field (``resources.instance_count``),
            or ``None`` for the document as a whole.
        source: The file the spec came from, if any.
        line: 1-based line of the field in ``source``, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.field = field
        self.source = source
        self.line = line
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.source or "job spec"
        if self.line is not None:
            where = f"{where}:{self.line}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


class JobNotFoundError(PhalanxError):
    """No job of that name exists in the workspace."""

    def __init__(self, name: str) -> None:
        super().__init__(f"job {name!r} not found; `phalanx job list` shows the jobs")
