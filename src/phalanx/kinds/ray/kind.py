"""The ``ray`` kind's answers to :class:`~phalanx.compute.kind.ComputeKind`."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from phalanx.compute.kind import Capabilities, ComputeKind, Description, TargetSettings
from phalanx.compute.targets import list_targets
from phalanx.errors import PhalanxError
from phalanx.kinds.ray.create import (
    check_one_tier,
    check_sole_scaler,
    probe,
    ray_address,
    ray_target,
    token_ref,
)
from phalanx.kinds.ray.scaling import count_nodes, growth, largest, of_tier, unbounded
from phalanx.kinds.ray.settings import RAY, RayTarget, check_address
from phalanx.scheduler import ledger
from phalanx.scheduler.model import TIERS, Capacity, Host, QueuedJob, Request
from phalanx.scheduler.request import check_counts, refuse_unfit

if TYPE_CHECKING:
    from phalanx.compute.base import Compute
    from phalanx.spec import JobSpec
    from phalanx.workspace import Workspace

FRESH_S = 30.0
"""A probe's reading older than this is not trusted (it died, or the cluster does not
answer)."""


class RayKind(ComputeKind):
    """A Ray cluster: nodes are Ray actors in a placement group; an elastic target grows
    by the cluster's autoscaler; a low-priority one's nodes may be taken away."""

    name = RAY
    settings = RayTarget
    example: ClassVar[Mapping[str, Any]] = {"address": "ray://127.0.0.1:10001", "cpus_per_node": 1}

    def __init__(self) -> None:
        self._probe_started: dict[tuple[str, str], float] = {}
        """(Workspace, target) → when (monotonic) this process last started its probe."""

    def build(self, options: Mapping[str, Any]) -> RayTarget:
        return ray_target(options, ray_address(options))

    def inline(self, compute: str) -> RayTarget | None:
        name = compute.removeprefix("azureml:")
        if compute.startswith("ray://") or ":" in name:  # a target's name has no colon
            return RayTarget(name=compute, address=check_address(compute))
        return None

    def public(self, target: TargetSettings) -> dict[str, Any]:
        ray = _ray(target)
        data = ray.model_dump(exclude={"token"}, exclude_none=True)
        data["token"] = ray.token.where if ray.token else None
        return data

    def capabilities(self, target: TargetSettings) -> Capabilities:
        ray = _ray(target)
        return Capabilities(
            elastic=ray.elastic,
            low_priority=ray.low_priority,
            shared_files=ray.files == "shared",
            containers=True,
            prepares_on_nodes=True,
            takes_token=True,
        )

    def prepare(
        self, ws: Workspace, target: TargetSettings, options: Mapping[str, Any]
    ) -> TargetSettings:
        ray = _ray(target)
        if not options.get("no_check"):
            probe(ray.address)
        ray = ray.model_copy(update={"token": token_ref(ws, options)})
        others = _targets(ws)
        check_one_tier(others, ray)
        if ray.elastic:
            check_sole_scaler(others, ray)
        return ray

    def check_record(self, ws: Workspace, target: TargetSettings) -> None:
        check_address(_ray(target).address)

    def created(self, ws: Workspace, target: TargetSettings) -> None:
        ray = _ray(target)
        if ray.elastic and ray.min_nodes:
            from phalanx.scheduler.process import ensure_running

            ensure_running(ws.home, ws.child_env())  # it asks for the minimum at once

    def describe(self, ws: Workspace, target: TargetSettings) -> Description:
        ray = _ray(target)
        nodes = f"{ray.min_nodes}-{ray.max_nodes} (elastic)" if ray.max_nodes else "-"
        if ray.low_priority:
            nodes = f"{nodes} low-priority"
        token = ray.token.where if ray.token else "none"
        return Description(where=ray.address, placement=ray.placement, nodes=nodes, token=token)

    def open(self, target: TargetSettings, ws: Workspace, cancelled: Callable[[], bool]) -> Compute:
        from phalanx.kinds.ray.compute import RayCompute

        ray = _ray(target)
        return RayCompute(ray, ray.token_value(ws), cancelled=cancelled)

    def check_open(self, ws: Workspace, target: TargetSettings) -> None:
        _ray(target).token_value(ws)

    def admit(self, ws: Workspace, target: TargetSettings, tier: int) -> None:
        """A job that is not ``job_tier: spot`` never runs where nodes may be taken away:
        on a low-priority target, or on its cluster under another name (its address)."""
        ray = _ray(target)
        if tier <= TIERS["spot"]:
            return
        owner = low_priority_owner(ws, ray)
        if owner is None:
            return
        where = f"compute {owner.name!r} is low-priority"
        if owner is not ray:
            where = f"compute {ray.name!r} is the cluster of {where}"
        raise PhalanxError(
            f"queue_settings.job_tier: {where} (its nodes may be taken away) and runs only "
            "job_tier: spot jobs; set queue_settings: {job_tier: spot} (the job resumes from "
            "its checkpoints when a node goes), or choose a dedicated compute"
        )

    def capacity(self, ws: Workspace, target: TargetSettings) -> Capacity | None:
        ray = _ray(target)
        return largest(ray) if ray.elastic else None  # another cluster's size is unknown

    def request(self, spec: JobSpec, target: TargetSettings, capacity: Capacity | None) -> Request:
        ray = _ray(target)
        check_counts(spec, ray, capacity)
        resources = spec.resources
        asked = (
            resources.gpus_per_instance,
            resources.cpus_per_instance,
            resources.memory_per_instance,
        )
        if any(value is not None for value in asked):
            raise PhalanxError(
                "resources.gpus_per_instance / cpus_per_instance / memory_per_instance: a Ray "
                "target's nodes get what its bundles reserve; set --gpus-per-node / "
                "--cpus-per-node on the target"
            )
        procs = spec.process_count_per_instance
        cpus = ray.cpus_per_node if ray.cpus_per_node is not None else float(procs)
        request = Request(
            nodes=spec.instance_count, gpus=math.ceil(ray.gpus_per_node), cpus=cpus, memory=0
        )
        hint = ""
        if ray.elastic:
            node_gpus = f" + {ray.node_gpus:g} GPUs" if ray.node_gpus else ""
            hint = (
                f" at its largest ({ray.max_nodes} nodes of {ray.node_cpus:g} CPUs{node_gpus}: "
                "--max-nodes, --node-cpus); ask for less or raise the target's --max-nodes"
            )
        return refuse_unfit(request, capacity, hint)

    def capacity_now(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> Capacity:
        """The cluster's nodes, as its probe last read them; until a fresh reading exists,
        its jobs start in queue order (Ray queues what it cannot place)."""
        ray = _ray(target)
        reading = self._read(ws, ray)
        if reading is None and ray.elastic:
            # Its probe is starting: nothing is given before it reads the nodes, but what
            # the queue wants is ready for the probe's first request.
            spread = ray.placement == "spread"
            return Capacity(ray.name, (), spread, growth(ws, ray, ()))
        return reading or unbounded(ray.name, queued)

    def screen(
        self, ws: Workspace, target: TargetSettings, queued: list[QueuedJob]
    ) -> dict[str, str]:
        """Jobs that are not spot on a cluster whose nodes may be taken away (its target
        became low-priority after they were queued)."""
        owner = low_priority_owner(ws, _ray(target))
        if owner is None:
            return {}
        return {
            job.name: f"queue_settings.job_tier: compute {owner.name!r} became low-priority "
            "(its nodes may be taken away) while the job was queued, and runs only job_tier: "
            "spot jobs; submit it again with queue_settings: {job_tier: spot}, or to a "
            "dedicated compute"
            for job in queued
            if job.tier > TIERS["spot"]
        }

    def idle(self, ws: Workspace, target: TargetSettings) -> None:
        """An elastic target without work whose cluster is asked for other than its
        minimum gets a probe if it has none: one still asked for more (its probe died, or
        ended with its server) has the request withdrawn after the idle time rather than
        never; one never asked for its ``min_nodes`` (just made) gets them."""
        ray = _ray(target)
        if not ray.elastic:
            return
        scaling = ledger.scaling_of(ws, ray.name)
        asked = scaling.requested if scaling is not None else None
        if (asked or 0) > ray.min_nodes or (asked is None and ray.min_nodes > 0):
            self._read(ws, ray)  # starts a probe where no fresh reading is

    def queue_view(self, ws: Workspace, target: TargetSettings) -> dict[str, Any]:
        ray = _ray(target)
        view: dict[str, Any] = {"capacity": None}
        read: list[dict[str, Any]] | None = None
        reading = ledger.capacity_reading(ws, ray.name)
        if reading is not None:
            hosts, read_at = reading
            read = hosts = of_tier(hosts, ray)
            view["capacity"] = {
                "hosts": [
                    {"host": h["host"], "gpus": [str(i) for i in range(h["gpus"])],
                     "cpus": h["cpus"], "memory": h.get("memory", 0)}
                    for h in hosts
                ],
                "read_s_ago": round(time.time() - read_at, 1),
            }  # fmt: skip
        if ray.elastic:
            view["scaling"] = scaling_view(ws, ray, read)
        return view

    def _read(self, ws: Workspace, target: RayTarget) -> Capacity | None:
        """The cluster's nodes from a fresh probe reading; starts a probe when there is none."""
        reading = ledger.capacity_reading(ws, target.name)
        if reading is not None and time.time() - reading[1] < FRESH_S:
            hosts = tuple(
                Host(
                    h["host"],
                    tuple(str(i) for i in range(int(h["gpus"]))),
                    float(h["cpus"]),
                    int(h.get("memory", 0)),
                )
                for h in of_tier(reading[0], target)
            )
            grows = growth(ws, target, hosts) if target.elastic else None
            return Capacity(target.name, hosts, target.placement == "spread", grows)
        key = (str(ws.home), target.name)
        last = self._probe_started.get(key, -math.inf)
        if time.monotonic() - last > FRESH_S:
            self._probe_started[key] = time.monotonic()
            start_probe(ws, target.name)
        return None


def scaling_view(ws: Workspace, target: RayTarget, read: list[dict[str, Any]] | None) -> dict:
    """An elastic target's size: worker nodes up (of its probe's reading ``read``), wanted
    by its queue, asked of its autoscaler (and how long ago), its range, and the
    autoscaler's trouble if any."""
    row = ledger.scaling_of(ws, target.name)
    report = row.report if row is not None else {}
    asked_at = row.requested_at if row is not None else None
    return {
        "nodes": count_nodes(read, target) if read is not None else None,
        "min_nodes": target.min_nodes,
        "max_nodes": target.max_nodes,
        "tier": target.tier,
        "idle_time_before_scale_down": target.idle_time_before_scale_down,
        "wanted": row.wanted if row is not None else 0,
        "requested": row.requested if row is not None else None,
        "requested_s_ago": round(time.time() - asked_at, 1) if asked_at else None,
        "adding": report.get("pending", 0),
        "trouble": report.get("trouble"),
    }


def low_priority_owner(ws: Workspace, target: RayTarget) -> RayTarget | None:
    """``target`` if it is low-priority, else the registered low-priority target on its
    cluster (its address), if one is: the cluster's nodes may be taken away, so it is
    nobody's dedicated compute."""
    if target.low_priority:
        return target
    return next((t for t in _targets(ws) if t.low_priority and t.address == target.address), None)


def start_probe(ws: Workspace, target: str) -> None:
    """A reader of a Ray cluster's nodes (:mod:`phalanx.kinds.ray.probe`), detached."""
    from phalanx.kinds.ray import probe as probe_module

    with open(ws.home / "scheduler.log", "ab") as log_file:
        subprocess.Popen(
            [sys.executable, "-m", probe_module.__name__, target],
            env={**os.environ, **ws.child_env()},
            cwd=ws.home,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _targets(ws: Workspace) -> list[RayTarget]:
    """The registered Ray targets."""
    return [t for t in list_targets(ws) if isinstance(t, RayTarget)]


def _ray(target: TargetSettings) -> RayTarget:
    """``target`` as what the registry guarantees it is: this kind's settings."""
    assert isinstance(target, RayTarget)
    return target
