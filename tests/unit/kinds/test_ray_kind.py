"""The Ray kind's answers for an elastic and a low-priority target, from the workspace's
records alone (a probe's reading, the scaling row): no cluster, no probe started."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from phalanx.compute.registry import kind
from phalanx.compute.targets import create_target, get_target
from phalanx.errors import PhalanxError
from phalanx.kinds.ray.settings import LOW_PRIORITY_RESOURCE, RayTarget
from phalanx.scheduler import ledger
from phalanx.scheduler.model import TIERS, QueuedJob, Request
from phalanx.spec import JobSpec
from phalanx.workspace import Workspace

ADDRESS = "ray://127.0.0.1:10001"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "home")


def spec(nodes: int, compute: str = "elastic") -> JobSpec:
    return JobSpec.model_validate(
        {"command": "python -c pass", "compute": compute, "resources": {"instance_count": nodes}}
    )


def queued(name: str, tier: int = TIERS["standard"]) -> QueuedJob:
    return QueuedJob(name, Request(nodes=1, cpus=1.0), submitted=0.0, tier=tier)


def test_an_elastic_target_is_sized_at_its_largest_and_refuses_more(ws: Workspace) -> None:
    ray = kind("ray")
    target = RayTarget(name="elastic", address=ADDRESS, max_nodes=2, node_cpus=1,
                       cpus_per_node=1)  # fmt: skip
    create_target(ws, target)
    assert ray.capabilities(target).elastic and ray.capabilities(target).prepares_on_nodes
    largest = ray.capacity(ws, target)
    assert largest is not None and len(largest.hosts) == 2
    assert ray.request(spec(2), target, largest) == Request(nodes=2, gpus=0, cpus=1.0)
    with pytest.raises(PhalanxError) as refused:
        ray.request(spec(3), target, largest)
    line = str(refused.value)
    assert "asks for 3 nodes" in line and "2 nodes of 1 CPUs" in line and "--max-nodes" in line
    assert ray.describe(ws, target).nodes == "0-2 (elastic)"


def test_a_reading_and_the_scaling_row_make_the_rounds_capacity(ws: Workspace) -> None:
    ray = kind("ray")
    target = RayTarget(name="elastic", address=ADDRESS, max_nodes=3, node_cpus=1)
    create_target(ws, target)
    ledger.record_capacity(ws, "elastic", [
        {"host": "a", "cpus": 1.0, "gpus": 0, "low_priority": False},
        {"host": "head", "cpus": 0.0, "gpus": 0, "low_priority": False},
    ])  # fmt: skip
    ledger.record_request(ws, "elastic", 1, time.time(), {"trouble": "quota"})
    capacity = ray.capacity_now(ws, target, [queued("j")])
    assert capacity is not None and capacity.growth is not None
    assert [h.name for h in capacity.hosts] == ["a", "head"]
    assert (capacity.growth.live, capacity.growth.requested) == (1, 1)
    assert capacity.growth.trouble == "quota"
    view = ray.queue_view(ws, target)
    assert [h["host"] for h in view["capacity"]["hosts"]] == ["a", "head"]
    assert view["scaling"]["nodes"] == 1 and view["scaling"]["trouble"] == "quota"


def test_a_low_priority_cluster_admits_and_keeps_only_spot_jobs(ws: Workspace) -> None:
    ray = kind("ray")
    spot = RayTarget(name="spot", address=ADDRESS, tier="low_priority")
    create_target(ws, spot)
    same = RayTarget(name="same", address=ADDRESS)  # the cluster under another name
    assert list(spot.marker()) == [LOW_PRIORITY_RESOURCE]
    ray.admit(ws, spot, TIERS["spot"])
    for target, where in ((spot, "'spot' is low-priority"), (same, "'same' is the cluster")):
        with pytest.raises(PhalanxError, match=f"queue_settings.job_tier: compute {where}"):
            ray.admit(ws, target, TIERS["standard"])
    refused = ray.screen(ws, same, [queued("std"), queued("cheap", TIERS["spot"])])
    assert list(refused) == ["std"] and "became low-priority" in refused["std"]
    assert get_target(ws, "spot") == spot
