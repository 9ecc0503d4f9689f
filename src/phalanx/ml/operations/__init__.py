"""The operation groups of :class:`~phalanx.ml.MLClient`, one module per kind of thing."""

from phalanx.ml.operations.assets import DataOperations, ModelOperations
from phalanx.ml.operations.jobs import CancelPoller, JobOperations
from phalanx.ml.operations.resources import (
    ComputeOperations,
    DatastoreOperations,
    EnvironmentOperations,
)

__all__ = [
    "CancelPoller",
    "ComputeOperations",
    "DataOperations",
    "DatastoreOperations",
    "EnvironmentOperations",
    "JobOperations",
    "ModelOperations",
]
