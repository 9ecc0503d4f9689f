"""Rank-aware logging, configured in this one place.

``get_logger(name)`` returns a standard :class:`logging.Logger` whose lines
read ``[rank 1/4] 12:00:01 WARNING train: ...`` and go to stdout, flushed at
every line: phalanx (like Azure ML) captures each rank's stdout to its own file,
``user_logs/std_log_process_<rank>.txt``, and a line that sits in a buffer is a
line missing from the log of a rank that later hangs or dies.

What each rank prints:

* rank 0 prints INFO and above;
* every other rank prints WARNING and above only, so N ranks do not repeat
  the same progress line N times, but a problem seen by any rank is seen;
* ``PHALANX_LOG_ALL_RANKS=1`` makes every rank print INFO too.

The rank comes from ``RANK``/``WORLD_SIZE`` in the environment, read when each
line is written, so a logger made before :func:`phalanx.train.init` is right.
"""

from __future__ import annotations

import logging
import os
import sys

from phalanx.storage.redact import RedactingFormatter

__all__ = ["ALL_RANKS_ENV", "get_logger"]

ALL_RANKS_ENV = "PHALANX_LOG_ALL_RANKS"
"""Set to ``1`` to print INFO lines on every rank, not only rank 0."""

_FORMAT = "[rank %(rank)s/%(world_size)s] %(asctime)s %(levelname)s %(name)s: %(message)s"
_DATEFMT = "%H:%M:%S"


def _env_int(name: str, default: int) -> int:
    # Logging must never be the thing that fails: a malformed value falls back
    # to the default, and phalanx.train.init reports it properly.
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class _RankFilter(logging.Filter):
    """Stamps the rank on every record and drops INFO and below off rank 0."""

    def filter(self, record: logging.LogRecord) -> bool:
        rank = _env_int("RANK", 0)
        record.rank = rank
        record.world_size = _env_int("WORLD_SIZE", 1)
        if rank == 0 or record.levelno >= logging.WARNING:
            return True
        return os.environ.get(ALL_RANKS_ENV, "").strip().lower() in {"1", "true", "yes"}


class _StdoutHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stdout`` is now.

    Looking ``sys.stdout`` up at each line (rather than once) keeps working when
    it is replaced later, as test runners and notebooks do. ``StreamHandler``
    flushes after every record.
    """

    def emit(self, record: logging.LogRecord) -> None:
        # Assigned, not setStream(): that flushes the old stream, which a test
        # runner may already have closed.
        if self.stream is not sys.stdout:
            self.stream = sys.stdout
        super().emit(record)


_handler: _StdoutHandler | None = None


def _shared_handler() -> _StdoutHandler:
    global _handler
    if _handler is None:
        handler = _StdoutHandler(sys.stdout)
        # Masks any datastore credential this rank resolved (a `direct` input, the loader).
        handler.setFormatter(RedactingFormatter(_FORMAT, datefmt=_DATEFMT))
        handler.addFilter(_RankFilter())
        _handler = handler
    return _handler


def get_logger(name: str = "phalanx") -> logging.Logger:
    """A logger whose lines carry ``[rank R/W]`` and follow the rank rules above.

    Idempotent: calling it again with the same name returns the same logger
    with still one handler. The logger does not propagate to the root logger,
    so a script that also calls ``logging.basicConfig`` does not see each line
    twice. A level set on the logger by the caller is kept; otherwise it is INFO.

    Args:
        name: The logger's name, shown on each line (e.g. ``"train"``).

    Returns:
        The configured :class:`logging.Logger`.
    """
    logger = logging.getLogger(name)
    handler = _shared_handler()
    if handler not in logger.handlers:
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger
