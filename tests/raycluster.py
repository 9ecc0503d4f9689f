"""The two-node Ray cluster the Ray tests run on (started by ``phalanx.bench.raycluster``)."""

from phalanx.bench.raycluster import RayCluster, start_cluster, stop_cluster

__all__ = ["RayCluster", "start_cluster", "stop_cluster"]
