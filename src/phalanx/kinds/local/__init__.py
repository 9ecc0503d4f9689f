"""The ``local`` compute kind: this machine, or a part of it, as a queue of its own.

``compute: local`` (the default) runs every node on this machine, with the GPUs and
CPU cores it finds; ``phalanx compute create --type local --name local --gpus 0-3
--cpus 16`` changes what the built-in target may use, and a local target of another
name (``--name team-a --gpus 4-7``) is a second queue on this machine: GPUs of its
own, and a share of the CPU slots and memory that every local target's jobs draw from
together (:mod:`~phalanx.kinds.local.capacity`).
"""

from phalanx.kinds.local.kind import LocalKind

KIND = LocalKind()
"""The object the ``phalanx.compute_kinds`` entry point ``local`` names."""

__all__ = ["KIND", "LocalKind"]
