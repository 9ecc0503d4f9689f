"""The search-space distributions of Azure ML's ``azure.ai.ml.sweep``: what replaces a
command's input to sweep it (``job(lr=Uniform(min_value=0.001, max_value=0.1))``).

Each is the ``search_space.<name>`` mapping a sweep ``job.yml`` holds
(:mod:`phalanx.spec.sweep` checks it). They take their arguments by position too,
as Azure ML's do (``Choice([16, 32])``, ``Uniform(0.01, 0.1)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from phalanx.ml.errors import checked_keywords


class SweepDistribution:
    """What a search-space value is; ``type`` is its name in a sweep ``job.yml``."""

    type: str = ""

    def _to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return {"type": self.type, **{k: v for k, v in values.items() if v is not None}}

    def _representative(self) -> Any:
        """A value it can give, to check the trial's command before the sweep runs."""
        raise NotImplementedError


@checked_keywords
@dataclass
class Choice(SweepDistribution):
    """One of ``values`` (numbers, strings, booleans)."""

    values: list[Any] | None = None

    type = "choice"

    def _to_dict(self) -> dict[str, Any]:
        values = list(self.values) if isinstance(self.values, (list, tuple, range)) else self.values
        return {"type": self.type, "values": values}

    def _representative(self) -> Any:
        return self.values[0] if isinstance(self.values, (list, tuple)) and self.values else 0


@checked_keywords
@dataclass
class Randint(SweepDistribution):
    """An integer from 0 to ``upper`` - 1."""

    upper: int | None = None

    type = "randint"

    def _representative(self) -> Any:
        return 0


@dataclass
class _Bounded(SweepDistribution):
    min_value: float | None = None
    max_value: float | None = None

    def _representative(self) -> Any:
        if isinstance(self.min_value, (int, float)) and isinstance(self.max_value, (int, float)):
            return (self.min_value + self.max_value) / 2
        return 0.0


@checked_keywords
@dataclass
class Uniform(_Bounded):
    """A float between ``min_value`` and ``max_value``."""

    type = "uniform"


@checked_keywords
@dataclass
class LogUniform(_Bounded):
    """``exp(uniform(min_value, max_value))``: the bounds are natural logarithms, as in
    Azure ML (``LogUniform(-6, -1)`` spans 0.0025 to 0.37)."""

    type = "loguniform"


@checked_keywords
@dataclass
class QUniform(_Bounded):
    """``round(uniform(min_value, max_value) / q) * q``."""

    q: float | None = None

    type = "quniform"


@checked_keywords
@dataclass
class QLogUniform(_Bounded):
    """``round(exp(uniform(min_value, max_value)) / q) * q``."""

    q: float | None = None

    type = "qloguniform"


@dataclass
class _Gaussian(SweepDistribution):
    mu: float | None = None
    sigma: float | None = None

    def _representative(self) -> Any:
        return self.mu if isinstance(self.mu, (int, float)) else 0.0


@checked_keywords
@dataclass
class Normal(_Gaussian):
    """A float from the normal distribution with mean ``mu`` and deviation ``sigma``."""

    type = "normal"


@checked_keywords
@dataclass
class LogNormal(_Gaussian):
    """``exp(normal(mu, sigma))``."""

    type = "lognormal"


@checked_keywords
@dataclass
class QNormal(_Gaussian):
    """``round(normal(mu, sigma) / q) * q``."""

    q: float | None = None

    type = "qnormal"


@checked_keywords
@dataclass
class QLogNormal(_Gaussian):
    """``round(exp(normal(mu, sigma)) / q) * q``."""

    q: float | None = None

    type = "qlognormal"


_CLASSES: dict[str, type[SweepDistribution]] = {
    cls.type: cls
    for cls in (Choice, Randint, Uniform, LogUniform, QUniform, QLogUniform, Normal, LogNormal,
                QNormal, QLogNormal)
}  # fmt: skip


def distribution_from_dict(data: dict[str, Any]) -> SweepDistribution | dict[str, Any]:
    """The class of a stored ``search_space.<name>`` mapping (the mapping if unknown)."""
    cls = _CLASSES.get(str(data.get("type", "")).lower())
    if cls is None:
        return data
    return cls(**{k: v for k, v in data.items() if k != "type"})
