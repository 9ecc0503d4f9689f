"""What ``phalanx bench train`` runs (a grid of nodes × processes) and what it found.

Scaling efficiency of a point with N processes in all is its total images/sec
over N times the images/sec of one process alone, the 1 × 1 point of the same
run (weak scaling: every process keeps its batch size). The 1 × 1 point always
runs first, added to the grid when it is not in it, so every efficiency has a
baseline measured the same way, minutes apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.bench.workload import PRECISIONS
from phalanx.errors import PhalanxError
from phalanx.nets import ARCHS


def parse_counts(raw: str, option: str) -> tuple[int, ...]:
    """``"1,2,4"`` → ``(1, 2, 4)``: distinct whole numbers ≥ 1, in the order given.

    Raises:
        PhalanxError: naming ``option`` when an item is not such a number.
    """
    counts: list[int] = []
    for item in raw.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < 1:
            raise PhalanxError(
                f"{option} {raw!r}: {item!r} is not a whole number ≥ 1; "
                "give one or more separated by commas, e.g. 1,2"
            )
        if int(item) not in counts:
            counts.append(int(item))
    return tuple(counts)


@dataclass(frozen=True)
class GridPoint:
    """One configuration: ``nodes`` × ``procs`` processes."""

    nodes: int
    procs: int

    @property
    def processes(self) -> int:
        return self.nodes * self.procs

    @property
    def label(self) -> str:
        """``2×4``: nodes × processes per node, as the chart's axis shows it."""
        return f"{self.nodes}×{self.procs}"

    @property
    def slug(self) -> str:
        """``2x4``, for file names."""
        return f"{self.nodes}x{self.procs}"


BASELINE = GridPoint(1, 1)


@dataclass(frozen=True, kw_only=True)
class TrainBenchConfig:
    """Everything ``phalanx bench train`` was asked for; validated on creation."""

    model: str = "resnet50"
    """A :data:`phalanx.nets.ARCHS` name."""
    batch_size: int = 64
    """Images per process per step (weak scaling: the same at every point)."""
    image_size: int = 224
    steps: int = 50
    """Timed steps per point."""
    warmup: int = 10
    """Untimed steps before them."""
    precision: str = "auto"
    """``auto``, ``fp32``, ``amp`` or ``bf16``; see :mod:`phalanx.bench.workload`."""
    nodes: tuple[int, ...] = (1,)
    procs_per_node: tuple[int, ...] = (1,)
    compute: str = "local"
    """Passed to each job spec's ``compute:``."""
    out: Path = Path("bench-results")

    def __post_init__(self) -> None:
        if self.model not in ARCHS:
            raise PhalanxError(f"--model {self.model!r}: not one of {', '.join(ARCHS)}")
        if self.precision not in PRECISIONS:
            raise PhalanxError(f"--precision {self.precision!r}: not one of {PRECISIONS}")
        for option, value, least in (
            ("--batch-size", self.batch_size, 1),
            ("--image-size", self.image_size, 32),
            ("--steps", self.steps, 1),
            ("--warmup", self.warmup, 0),
        ):
            if value < least:
                raise PhalanxError(f"{option} {value}: must be at least {least}")
        if not self.nodes or not self.procs_per_node:
            raise PhalanxError("--nodes and --procs-per-node need at least one number each")

    def points(self) -> list[GridPoint]:
        """The baseline first, then the grid by processes in all, then by nodes."""
        grid = {GridPoint(n, p) for n in self.nodes for p in self.procs_per_node}
        rest = sorted(grid - {BASELINE}, key=lambda g: (g.processes, g.nodes))
        return [BASELINE, *rest]

    def in_grid(self, point: GridPoint) -> bool:
        """Whether the user's grid has ``point`` (the baseline may have been added)."""
        return point.nodes in self.nodes and point.procs in self.procs_per_node


@dataclass(frozen=True, kw_only=True)
class PointResult:
    """One point's figures, from its job's result JSON."""

    point: GridPoint
    job: str
    img_per_sec_total: float
    img_per_sec_per_process: float
    efficiency: float
    """``img_per_sec_total / (processes × baseline)``; 1.0 for the baseline itself."""
    in_grid: bool
    raw: dict[str, Any]
    """The workload's result JSON as written."""


def with_efficiency(
    runs: list[tuple[GridPoint, str, dict[str, Any]]], config: TrainBenchConfig
) -> list[PointResult]:
    """Attach scaling efficiency against the baseline run (which must be among ``runs``)."""
    base = next(raw for point, _, raw in runs if point == BASELINE)["img_per_sec_total"]
    return [
        PointResult(
            point=point,
            job=job,
            img_per_sec_total=raw["img_per_sec_total"],
            img_per_sec_per_process=raw["img_per_sec_total"] / point.processes,
            efficiency=raw["img_per_sec_total"] / (point.processes * base),
            in_grid=config.in_grid(point),
            raw=raw,
        )
        for point, job, raw in runs
    ]
