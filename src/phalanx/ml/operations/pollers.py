"""What Azure ML's ``begin_*`` calls return: a poller. phalanx's verbs are done when
they return, so its pollers are done already."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class DonePoller(Generic[T]):
    """A finished operation's poller (Azure's ``LROPoller``): ``result()`` is its value."""

    def __init__(self, value: T) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> T:
        """What the operation made."""
        return self._value

    def wait(self, timeout: float | None = None) -> None:
        """Returns at once; the operation is done."""

    def done(self) -> bool:
        return True

    def status(self) -> str:
        return "Succeeded"

    def __repr__(self) -> str:
        return f"DonePoller({self._value!r})"
