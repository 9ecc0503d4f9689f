"""A sweep's search space as Optuna sees it, and each value as its trial gets it.

Optuna samples a space of its own (``internal`` values); each dimension turns
one into the value the trial's command gets. Most are the same value; a
quantised distribution rounds it to a multiple of ``q``, and the normal family
is sampled as a quantile in (0, 1) and mapped through the inverse normal
distribution, so every sampler (random, Sobol, TPE) can draw it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from phalanx.spec.sweep import (
    Choice,
    LogNormal,
    LogUniform,
    Normal,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    RandInt,
    SweepSpec,
)

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

Value = bool | int | float | str
_EDGE = 1e-9  # a quantile of exactly 0 or 1 has no normal value


@dataclass(frozen=True)
class Dimension:
    """One name of the search space."""

    name: str
    dist: Any  # one of the spec's distribution models

    def optuna(self) -> BaseDistribution:
        """The distribution Optuna samples for it."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        d = self.dist
        if isinstance(d, Choice):
            return CategoricalDistribution(tuple(d.values))
        if isinstance(d, RandInt):
            return IntDistribution(0, d.upper - 1)
        if isinstance(d, (LogUniform, QLogUniform)):
            return FloatDistribution(math.exp(d.min_value), math.exp(d.max_value), log=True)
        if isinstance(d, Normal):  # and its log and quantised kin
            return FloatDistribution(0.0, 1.0)
        return FloatDistribution(float(d.min_value), float(d.max_value))

    def value(self, internal: Any) -> Value:
        """What the trial's command gets for Optuna's ``internal`` value."""
        d = self.dist
        if isinstance(d, Choice):
            return internal
        if isinstance(d, RandInt):
            return int(internal)
        x = float(internal)
        if isinstance(d, Normal):
            x = NormalDist(float(d.mu), float(d.sigma)).inv_cdf(min(max(x, _EDGE), 1 - _EDGE))
            if isinstance(d, (LogNormal, QLogNormal)):
                x = math.exp(x)
        if isinstance(d, (QUniform, QLogUniform, QNormal, QLogNormal)):
            return _quantise(x, d.q)
        return x

    def grid(self) -> list[Value]:
        """Every internal value, for grid sampling (choice and randint only)."""
        if isinstance(self.dist, Choice):
            return list(self.dist.values)
        if isinstance(self.dist, RandInt):
            return list(range(self.dist.upper))
        raise ValueError(f"{self.name}: {self.dist.type} has no grid")


def _quantise(x: float, q: float) -> int | float:
    """``round(x / q) * q``; an int when ``q`` is a whole number (``--batch 32``, not
    ``32.0``, which an ``int`` argument would refuse)."""
    rounded = round(x / q) * q
    if float(q).is_integer():
        return round(rounded)
    return round(rounded, 12)


def dimensions(spec: SweepSpec) -> list[Dimension]:
    """The search space's dimensions, in the spec's order."""
    return [Dimension(name, dist) for name, dist in spec.search_space.items()]


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    """Optuna's distribution of each name."""
    return {d.name: d.optuna() for d in dimensions(spec)}


def values_of(spec: SweepSpec, internal: dict[str, Any]) -> dict[str, Value]:
    """The values a trial's command gets for Optuna's ``internal`` values."""
    return {d.name: d.value(internal[d.name]) for d in dimensions(spec)}
