"""Where a job's nodes run: this machine (:mod:`~phalanx.compute.local`) or a Ray
cluster (:mod:`~phalanx.compute.ray`), both behind the contract of
:mod:`~phalanx.compute.base`; :func:`~phalanx.compute.targets.open_compute` picks one
for a target."""

from phalanx.compute.base import Compute, Node
from phalanx.compute.local import LocalCompute, LocalNode

__all__ = ["Compute", "LocalCompute", "LocalNode", "Node"]
