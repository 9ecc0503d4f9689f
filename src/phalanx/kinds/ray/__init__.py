"""The ``ray`` compute kind: a Ray cluster, named inline (``compute: ray://HOST:PORT``)
or registered with ``phalanx compute create --type ray``. Ray owns the cluster, its
autoscaler and node-failure detection; phalanx places one agent per job node in a
placement group (:mod:`~phalanx.kinds.ray.compute`) and reads the cluster's nodes for
the scheduler in a probe process of its own (:mod:`~phalanx.kinds.ray.probe`), so
nothing but a job's supervisor and that probe imports Ray.
"""

from phalanx.kinds.ray.kind import RayKind

KIND = RayKind()
"""The object the ``phalanx.compute_kinds`` entry point ``ray`` names."""

__all__ = ["KIND", "RayKind"]
