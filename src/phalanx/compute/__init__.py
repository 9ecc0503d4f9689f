"""Where a job's nodes run: the contract every compute meets
(:mod:`~phalanx.compute.base`), the contract of a compute *kind* and the registry of
kinds (:mod:`~phalanx.compute.kind`, :mod:`~phalanx.compute.registry`), the workspace's
targets (:mod:`~phalanx.compute.targets`), and what a node runs on any kind (the agent,
inputs, shipping). This machine's compute (:mod:`~phalanx.compute.local`) lives here
too: every kind's jobs clean up their processes with it. The kinds themselves are
packages of :mod:`phalanx.kinds` or of a plug-in."""

from phalanx.compute.base import Compute, Node
from phalanx.compute.local import LocalCompute, LocalNode

__all__ = ["Compute", "LocalCompute", "LocalNode", "Node"]
