"""A Ray target's settings: a cluster phalanx places jobs on, named by its address, and
the checks of an address.

A cluster is named inline in a job spec, ``compute: ray://HOST:PORT`` (Ray Client)
or ``compute: HOST:PORT`` (the cluster's GCS address, from a machine of the
cluster), or registered once with ``phalanx compute create --type ray`` and named.
A registered target keeps its Ray token as a reference (an environment variable,
or the workspace's 0600 secrets file), never its value.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from phalanx.compute.kind import TargetSettings
from phalanx.errors import PhalanxError
from phalanx.storage.secrets import SecretRef, SecretStore, resolve
from phalanx.workspace import Workspace

RAY = "ray"
RAY_ADDRESS_RE = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
LOW_PRIORITY_RESOURCE = "phalanx_low_priority"
"""The Ray resource a low-priority node type carries (``resources: {phalanx_low_priority:
1}``): a low-priority target's bundles ask for a sliver of it, so its jobs are placed, and
its nodes added, only there; its nodes are told from the others by it."""
MARKER_SHARE = 0.001
"""How much of the marker one bundle asks for: a node holds many bundles (``pack``)."""


class RayTarget(TargetSettings):
    """A Ray cluster phalanx places jobs on."""

    name: str
    type: Literal["ray"] = "ray"
    address: str
    """``ray://HOST:PORT`` (Ray Client) or ``HOST:PORT`` (GCS, from inside the cluster)."""
    token: SecretRef | None = None
    """The cluster's auth token (Ray's ``RAY_AUTH_MODE=token``), as a reference."""
    placement: Literal["spread", "pack"] = "spread"
    """``spread``: one node per bundle (STRICT_SPREAD); ``pack``: as few as possible."""
    cpus_per_node: float | None = Field(default=None, gt=0)
    """CPUs a node's bundle reserves; the job's processes per node when absent."""
    gpus_per_node: float = Field(default=0, ge=0)
    """GPUs a node's bundle reserves."""
    files: Literal["local", "shared"] = "local"
    """``local``: each node keeps the job's files in a folder of its own and ships them to
    the workspace; ``shared``: every node sees the workspace at the same path."""
    max_nodes: int | None = Field(default=None, ge=1, le=10_000)
    """Elastic: the most worker nodes the cluster's autoscaler may grow to for phalanx's
    queue (``None``: the cluster's size is its own business, read as it is)."""
    min_nodes: int = Field(default=0, ge=0, le=10_000)
    """Elastic: the worker nodes kept however empty the queue."""
    idle_time_before_scale_down: int = Field(default=120, ge=0, le=7 * 24 * 3600)
    """Elastic: seconds the nodes are kept asked for after the last job ends."""
    node_cpus: float | None = Field(default=None, gt=0, le=100_000, allow_inf_nan=False)
    """Elastic: the CPUs of one machine of the worker node type the autoscaler adds."""
    node_gpus: float = Field(default=0, ge=0, le=1024, allow_inf_nan=False)
    """Elastic: the GPUs of one machine of that node type (a whole number)."""
    tier: Literal["dedicated", "low_priority"] = "dedicated"
    """``low_priority``: the nodes may be taken away (spot VMs, preemptible pods); they
    carry :data:`LOW_PRIORITY_RESOURCE`, only ``job_tier: spot`` jobs are queued here, and
    a node lost under a job is a preemption of it, not a failure."""

    @field_validator("tier", mode="before")
    @classmethod
    def _tier_as_azure_spells_it(cls, value: object) -> object:
        """``LowPriority``, ``low-priority`` and ``low_priority`` are one tier."""
        if isinstance(value, str):
            flat = value.strip().lower().replace("-", "").replace("_", "")
            return {"lowpriority": "low_priority", "dedicated": "dedicated"}.get(flat, value)
        return value

    @model_validator(mode="after")
    def _elastic_needs_a_node_shape(self) -> RayTarget:
        if self.max_nodes is None:
            return self
        if not float(self.node_gpus).is_integer():
            raise ValueError(
                f"node_gpus: {self.node_gpus:g} is not a whole number of GPUs; a machine of "
                "the node type has 0, 1, 2, ..."
            )
        if self.node_cpus is None:
            raise ValueError(
                "node_cpus: an elastic target (max_nodes) needs the size of the machines its "
                "cluster adds: --node-cpus N [--node-gpus G], as its worker node type has"
            )
        if self.min_nodes > self.max_nodes:
            raise ValueError(
                f"min_nodes: {self.min_nodes} is more than max_nodes ({self.max_nodes}); give "
                "at most as many"
            )
        bundle_cpus = self.cpus_per_node or 0
        if bundle_cpus > self.node_cpus or self.gpus_per_node > self.node_gpus:
            raise ValueError(
                f"a job node's bundle ({bundle_cpus:g} CPUs, {self.gpus_per_node:g} GPUs: "
                f"--cpus-per-node/--gpus-per-node) does not fit one machine of the node type "
                f"({self.node_cpus:g} CPUs, {self.node_gpus:g} GPUs: --node-cpus/--node-gpus)"
            )
        return self

    @property
    def low_priority(self) -> bool:
        return self.tier == "low_priority"

    def marker(self) -> dict[str, float]:
        """What each of the target's bundles asks for beyond CPUs and GPUs: the
        low-priority node type's resource, so nothing of it lands elsewhere."""
        return {LOW_PRIORITY_RESOURCE: MARKER_SHARE} if self.low_priority else {}

    @property
    def elastic(self) -> bool:
        """Whether phalanx asks the cluster's autoscaler for the nodes its queue needs."""
        return self.max_nodes is not None

    def token_value(self, ws: Workspace) -> str | None:
        """The token, resolved now (``None`` for a cluster without authentication)."""
        if self.token is None:
            return None
        return resolve(self.token, SecretStore(ws.home), f"compute {self.name!r}: token")


def check_address(address: str) -> str:
    """``address`` if it looks like a Ray address, else a one-line error."""
    if not RAY_ADDRESS_RE.match(address):
        raise PhalanxError(
            f"Ray address {address!r} is not HOST:PORT or ray://HOST:PORT; give the head "
            "node's client port (ray://HOST:10001) or its GCS address (HOST:6379)"
        )
    return address


def check_driver_here(address: str) -> None:
    """Refuse a GCS address (``HOST:PORT``) on a machine that runs no Ray node.

    Ray lets a driver join a cluster by its GCS address only from one of the cluster's
    own machines: the driver attaches to the raylet running beside it, and elsewhere Ray
    waits a minute for one and fails without saying why. Ray Client (``ray://``) works
    from anywhere.

    Raises:
        PhalanxError: ``address`` is a GCS address and no raylet runs on this machine.
    """
    if address.startswith("ray://") or _runs_raylet():
        return
    host = address.rpartition(":")[0]
    raise PhalanxError(
        f"Ray address {address} is the cluster's GCS address, which only a machine running "
        f"a Ray node of that cluster may use, and this one runs none; give the head's Ray "
        f"Client address (ray://{host}:10001) instead"
    )


def _runs_raylet() -> bool:
    import psutil

    return any(proc.info["name"] == "raylet" for proc in psutil.process_iter(["name"]))
