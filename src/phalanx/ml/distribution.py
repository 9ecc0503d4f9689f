"""Distribution classes of Azure ML's SDK, and their ``distribution:`` mapping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(kw_only=True)
class PyTorchDistribution:
    """PyTorch DDP: ``process_count_per_instance`` workers per node (torchrun)."""

    process_count_per_instance: int | None = None

    type = "pytorch"

    def _to_dict(self) -> dict[str, Any]:
        return _without_none(
            type="pytorch", process_count_per_instance=self.process_count_per_instance
        )


@dataclass(kw_only=True)
class MpiDistribution:
    """MPI (Horovod, mpi4py): one ``mpirun`` starts every node's ranks."""

    process_count_per_instance: int | None = None

    type = "mpi"

    def _to_dict(self) -> dict[str, Any]:
        return _without_none(type="mpi", process_count_per_instance=self.process_count_per_instance)


@dataclass(kw_only=True)
class TensorFlowDistribution:
    """TensorFlow: a process per worker and parameter server, each with its ``TF_CONFIG``."""

    worker_count: int | None = None
    parameter_server_count: int | None = None

    type = "tensorflow"

    def _to_dict(self) -> dict[str, Any]:
        return _without_none(
            type="tensorflow",
            worker_count=self.worker_count,
            parameter_server_count=self.parameter_server_count,
        )


Distribution = PyTorchDistribution | MpiDistribution | TensorFlowDistribution
"""What ``command(distribution=...)`` takes, besides a dict with ``type``."""

_CLASSES: dict[str, type[Distribution]] = {
    "pytorch": PyTorchDistribution,
    "mpi": MpiDistribution,
    "tensorflow": TensorFlowDistribution,
}


def _without_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def distribution_from_dict(data: dict[str, Any]) -> Distribution | dict[str, Any]:
    """The class for a stored ``distribution:`` mapping (the mapping when its type is unknown)."""
    kind = str(data.get("type", "")).lower()
    cls = _CLASSES.get(kind)
    if cls is None:
        return data
    return cls(**{k: v for k, v in data.items() if k != "type"})
