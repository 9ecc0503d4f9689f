"""The ``local`` kind's answers to :class:`~phalanx.compute.kind.ComputeKind`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from phalanx.compute.kind import Capabilities, ComputeKind, Description, TargetSettings
from phalanx.errors import PhalanxError
from phalanx.kinds.local.capacity import local_capacity
from phalanx.kinds.local.create import (
    check_disjoint,
    check_within_machine,
    describe_local,
    local_target,
)
from phalanx.kinds.local.settings import LOCAL, LocalTarget
from phalanx.scheduler.request import check_counts, on_hosts, refuse_unfit

if TYPE_CHECKING:
    from phalanx.compute.base import Compute
    from phalanx.scheduler.model import Capacity, QueuedJob, Request
    from phalanx.spec import JobSpec
    from phalanx.workspace import Workspace

log = logging.getLogger("phalanx.scheduler")

MAX_LOCAL_HOSTS = 254
"""Loopback addresses local compute gives MPI/TensorFlow nodes (127.0.0.1 … 127.0.0.254)."""


class LocalKind(ComputeKind):
    """This machine: one host, its GPUs, CPU slots and memory, shared by every local
    target; nodes are processes here."""

    name = LOCAL
    settings = LocalTarget
    builtin = LOCAL
    example: ClassVar[Mapping[str, Any]] = {"gpus": "none", "cpus": 1}

    def build(self, options: Mapping[str, Any]) -> LocalTarget:
        return local_target(options)

    def capabilities(self, target: TargetSettings) -> Capabilities:
        return Capabilities(shared_files=True, containers=True)

    def prepare(
        self, ws: Workspace, target: TargetSettings, options: Mapping[str, Any]
    ) -> TargetSettings:
        check_within_machine(ws, _local(target))
        return target

    def check_record(self, ws: Workspace, target: TargetSettings) -> None:
        check_disjoint(ws, _local(target))

    def describe(self, ws: Workspace, target: TargetSettings) -> Description:
        return Description(where=describe_local(ws, _local(target)))

    def open(self, target: TargetSettings, ws: Workspace, cancelled: Callable[[], bool]) -> Compute:
        from phalanx.compute.local import LocalCompute

        return LocalCompute(_local(target).gpus)

    def capacity(self, ws: Workspace, target: TargetSettings) -> Capacity:
        return local_capacity(_local(target), ws)

    def request(self, spec: JobSpec, target: TargetSettings, capacity: Capacity | None) -> Request:
        if capacity is None:
            raise ValueError("a local target's capacity is always known")
        check_counts(spec, target, capacity)
        per_node_hosts = spec.distribution_type in ("mpi", "tensorflow")
        if per_node_hosts and spec.instance_count > MAX_LOCAL_HOSTS:
            raise PhalanxError(
                f"local compute gives each node of an {spec.distribution_type} job a loopback "
                f"address, at most {MAX_LOCAL_HOSTS}; lower resources.instance_count"
            )
        return refuse_unfit(on_hosts(spec, capacity), capacity)

    def capacity_now(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> Capacity | None:
        try:
            return local_capacity(_local(target), ws, waiting=True)
        except PhalanxError as exc:  # nvidia-smi failing: wait, say why, try again
            log.error("compute %s: %s", target.name, exc)
            return None

    def queue_view(self, ws: Workspace, target: TargetSettings) -> dict[str, Any]:
        cap = local_capacity(_local(target), ws)
        hosts = [
            {"host": h.name, "gpus": list(h.gpus), "cpus": h.cpus, "memory": h.memory}
            for h in cap.hosts
        ]
        return {"capacity": {"hosts": hosts}}


def _local(target: TargetSettings) -> LocalTarget:
    """``target`` as what the registry guarantees it is: this kind's settings."""
    assert isinstance(target, LocalTarget)
    return target
