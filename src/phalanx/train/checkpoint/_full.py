"""A save that ran out of disk: telling it from other failures, and the error it becomes.

``torch.save`` hides a full disk: its zip writer fails on the next record with
``RuntimeError: [enforce fail at inline_container.cc:…] . unexpected pos …``,
and the ``OSError`` that says "No space left on device" is only in the
exception's ``__context__``. DCP wraps it in a ``CheckpointException`` that
lists each rank's failure. :func:`disk_full_errno` looks through all of that;
:func:`reraise_if_full` turns such a failure into :class:`CheckpointDiskFull`,
one line that says what happened and where.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from phalanx.errors import PhalanxError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
"""A full file system, or this user's quota on it."""

_MESSAGES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
}

LOW_SPACE = 64 << 20
"""Free bytes below which torch's "unexpected pos" (a short write whose errno
was lost) is taken for a full disk: a write of one chunk
(:data:`~._fs._CHUNK`) did not fit."""


FOLDER_HINT = "; the unfinished checkpoint is removed: free space there or lower keep_last"
"""What a local (or shared) folder's message adds: the state it is left in, the fix."""


class CheckpointDiskFull(PhalanxError, OSError):
    """A checkpoint did not fit on its disk; the unfinished one is already removed.

    An :class:`OSError` (``errno`` is ``ENOSPC`` or ``EDQUOT``) and a
    :class:`~phalanx.errors.PhalanxError`: the user fixes it (free space, a
    bigger disk, a lower ``keep_last``), and a rank that dies of it shows its
    message, one line, as the job's root cause. The error it came from is its
    ``__cause__``.

    Attributes:
        step: The step being saved.
        where: The folder (or URI) it was saved to.
    """

    __module__ = "phalanx.train.checkpoint"  # where it is exported: tracebacks name that

    def __init__(self, code: int, step: int, where: str, hint: str = "") -> None:
        self.step = step
        self.where = where
        what = _MESSAGES.get(code, "no space left on device")
        message = f"{what} while saving checkpoint step {step} to {where}"
        super().__init__(code, message + hint)

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled across ranks (DCP, broadcast): rebuilt from its own arguments.
        return (_rebuild, (self.errno, self.strerror, self.step, self.where))


def _rebuild(code: int, message: str, step: int, where: str) -> CheckpointDiskFull:
    error = CheckpointDiskFull(code, step, where)
    error.strerror = message
    return error


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception it holds: causes, contexts, group members and
    DCP's per-rank failures; each once."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        members = getattr(current, "exceptions", None)  # an exception group (3.11+)
        if isinstance(members, tuple):
            todo += [e for e in members if isinstance(e, BaseException)]
        failures = getattr(current, "failures", None)  # DCP's CheckpointException
        if isinstance(failures, dict):
            for failure in failures.values():
                inner = failure[0] if isinstance(failure, tuple) and failure else failure
                if isinstance(inner, BaseException):
                    todo.append(inner)


def disk_full_errno(error: BaseException, folder: Path | None = None) -> int | None:
    """``ENOSPC`` or ``EDQUOT`` if ``error`` comes from a full disk, else ``None``.

    The errno of any ``OSError`` in the chain decides. Without one, the text
    does ("No space left on device", "Disk quota exceeded"); torch's "unexpected
    pos" (a short write) counts only when ``folder``, still holding the
    unfinished checkpoint, has less than :data:`LOW_SPACE` free.
    """
    chain = list(_chain(error))
    for e in chain:
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return e.errno
    text = "\n".join(str(e) for e in chain)
    if "No space left on device" in text:
        return errno.ENOSPC
    if "Disk quota exceeded" in text:
        return errno.EDQUOT
    if "unexpected pos" in text and folder is not None:
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            return None
        if free < LOW_SPACE:
            return errno.ENOSPC
    return None


@contextmanager
def reraise_if_full(step: int, where: str, folder: Path, hint: str = "") -> Iterator[None]:
    """Raise :class:`CheckpointDiskFull` for a full-disk failure in the block.

    Used inside the code that removes the unfinished checkpoint, so the free
    space is measured while it still takes its room.

    Args:
        step: The step being saved.
        where: The folder (or URI) named in the message.
        folder: Where the files were being written (its free space is checked).
        hint: Appended to the message.
    """
    try:
        yield
    except CheckpointDiskFull:
        raise
    except BaseException as error:
        code = disk_full_errno(error, folder)
        if code is None:
            raise
        raise CheckpointDiskFull(code, step, where, hint) from error
