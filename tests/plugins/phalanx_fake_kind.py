"""A compute kind that lives outside phalanx: ``fake``, whose nodes are processes of
this machine, one per host of a fixed size.

It is what a third party writes to add a kind (docs/compute-kinds.md): this module and
an entry point, nothing in phalanx. The tests copy it into a temporary folder with a
``*.dist-info/entry_points.txt`` naming ``fake = phalanx_fake_kind:KIND``
(tests/fakekind.py) and put that folder on ``PYTHONPATH``, so every phalanx process (the
CLI, the server, the scheduler, a job's supervisor) finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from phalanx.compute.kind import Capabilities, ComputeKind, Description, TargetSettings
from phalanx.errors import PhalanxError
from phalanx.scheduler.model import Capacity, Host, QueuedJob, Request
from phalanx.scheduler.request import check_counts, on_hosts, refuse_unfit

if TYPE_CHECKING:
    from phalanx.compute.base import Compute
    from phalanx.spec import JobSpec
    from phalanx.workspace import Workspace

OWN_OPTIONS = frozenset({"name", "type", "cpus", "hosts"})
# What compute create's request always carries (its defaults): not asked for.
ALWAYS = frozenset({"placement", "gpus_per_node", "files", "store_token", "no_check", "token"})


class FakeTarget(TargetSettings):
    """``hosts`` machines of ``cpus`` CPU slots each, all of them this one."""

    type: Literal["fake"] = "fake"
    cpus: float = Field(default=2, gt=0, le=64)
    hosts: int = Field(default=2, ge=1, le=8)


class FakeKind(ComputeKind):
    name = "fake"
    settings = FakeTarget
    example: ClassVar[Mapping[str, Any]] = {"cpus": 2}

    def build(self, options: Mapping[str, Any]) -> FakeTarget:
        for key, value in options.items():
            if key not in OWN_OPTIONS | ALWAYS and value is not None:
                flag = key.replace("_", "-")
                raise PhalanxError(f"--{flag} is not an option of --type fake (it takes --cpus)")
        given = {k: options[k] for k in ("cpus", "hosts") if options.get(k) is not None}
        return FakeTarget(name=options["name"], **given)

    def capabilities(self, target: TargetSettings) -> Capabilities:
        return Capabilities(shared_files=True, containers=False)

    def describe(self, ws: Workspace, target: TargetSettings) -> Description:
        fake = _fake(target)
        return Description(
            where=f"{fake.hosts} fake hosts of {fake.cpus:g} CPU slots (processes here)",
            nodes=str(fake.hosts),
        )

    def open(self, target: TargetSettings, ws: Workspace, cancelled: Callable[[], bool]) -> Compute:
        from phalanx.compute.local import LocalCompute

        return LocalCompute(gpus=())

    def capacity(self, ws: Workspace, target: TargetSettings) -> Capacity:
        fake = _fake(target)
        hosts = tuple(Host(f"{fake.name}-{i}", (), fake.cpus) for i in range(fake.hosts))
        return Capacity(fake.name, hosts, spread=True)

    def request(self, spec: JobSpec, target: TargetSettings, capacity: Capacity | None) -> Request:
        assert capacity is not None
        check_counts(spec, target, capacity)
        return refuse_unfit(on_hosts(spec, capacity), capacity)

    def capacity_now(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> Capacity:
        return self.capacity(ws, target)

    def queue_view(self, ws: Workspace, target: TargetSettings) -> dict[str, Any]:
        hosts = [
            {"host": h.name, "gpus": [], "cpus": h.cpus, "memory": 0}
            for h in self.capacity(ws, target).hosts
        ]
        return {"capacity": {"hosts": hosts}}


def _fake(target: TargetSettings) -> FakeTarget:
    assert isinstance(target, FakeTarget)
    return target


KIND = FakeKind()
