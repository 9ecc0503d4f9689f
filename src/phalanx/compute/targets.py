"""Compute targets: where a job's nodes come from.

``compute: local`` (the default) runs every node on this machine, with the
GPUs and CPU cores it finds; ``phalanx compute create --type local --name
local --gpus 0-3 --cpus 16`` changes what the built-in target may use, and a
local target of another name (``--name team-a --gpus 4-7``) is a second queue
on this machine: GPUs of its own, and a share of the CPU slots and memory that
every local target's jobs draw from together (the built-in target's ``--cpus``
and ``--memory`` are the machine's: :mod:`phalanx.scheduler.capacity`). A Ray
cluster is named inline, ``compute: ray://HOST:PORT`` (Ray Client) or
``compute: HOST:PORT`` (the cluster's GCS address, from a machine of the
cluster), or registered once with ``phalanx compute create --type ray`` and
named (``compute: gpu-cluster`` or Azure ML's ``compute: azureml:gpu-cluster``).
A registered target keeps its Ray token as a reference (an environment
variable, or the workspace's 0600 secrets file), never its value.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from phalanx.errors import PhalanxError, UnknownName
from phalanx.storage.secrets import SecretRef, SecretStore, resolve
from phalanx.workspace import Workspace

if TYPE_CHECKING:
    from phalanx.compute.base import Compute

TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RAY_ADDRESS_RE = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
LOCAL = "local"
LOW_PRIORITY_RESOURCE = "phalanx_low_priority"
"""The Ray resource a low-priority node type carries (``resources: {phalanx_low_priority:
1}``): a low-priority target's bundles ask for a sliver of it, so its jobs are placed, and
its nodes added, only there; its nodes are told from the others by it."""
MARKER_SHARE = 0.001
"""How much of the marker one bundle asks for: a node holds many bundles (``pack``)."""


class LocalTarget(BaseModel):
    """A part of this machine (or all of it) that jobs are scheduled on."""

    model_config = ConfigDict(extra="forbid")

    name: str = LOCAL
    type: Literal["local"] = "local"
    gpus: tuple[str, ...] | None = None
    """GPU ids jobs may be given (``CUDA_VISIBLE_DEVICES`` values); found with
    ``nvidia-smi`` when ``None``."""
    cpus: float | None = Field(default=None, gt=0)
    """CPU slots: for the built-in ``local``, this machine's, which every local target's
    jobs share (its cores when ``None``); for another, the most of them its jobs hold at
    once (all when ``None``)."""
    memory: int | None = Field(default=None, gt=0)
    """Bytes of memory jobs may ask for, the same way: the machine's for ``local`` (all of
    it when ``None``), a share of it for another."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _parse_gpus(cls, value: object) -> object:
        return parse_devices(value) if isinstance(value, str) else value


def parse_devices(text: str) -> tuple[str, ...]:
    """``0-3,6`` → ``("0", "1", "2", "3", "6")``; ``none`` or empty → no GPUs.

    Raises:
        ValueError: a part is neither a number, a range nor a device UUID.
    """
    text = text.strip()
    if text.lower() in ("", "none"):
        return ()
    devices: list[str] = []
    for part in text.split(","):
        part = part.strip()
        first, dash, last = part.partition("-")
        if dash and first.isdigit() and last.isdigit() and int(first) <= int(last):
            devices.extend(str(i) for i in range(int(first), int(last) + 1))
        elif part.isdigit() or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z/-]+", part):
            devices.append(part)
        else:
            raise ValueError(
                f"--gpus {text!r}: {part!r} is not a device number, a range (0-3) or a GPU UUID"
            )
    if len(set(devices)) != len(devices):
        raise ValueError(f"--gpus {text!r} names a device twice")
    return tuple(devices)


class RayTarget(BaseModel):
    """A Ray cluster phalanx places jobs on."""

    model_config = ConfigDict(extra="forbid")

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


Target = LocalTarget | RayTarget


def resolve_target(compute: str, ws: Workspace) -> Target:
    """The target a spec's ``compute`` names: this machine's, a registered one, or a Ray address.

    Raises:
        PhalanxError: an unknown target name.
    """
    name = compute.removeprefix("azureml:")
    if compute.startswith("ray://") or ":" in name:  # a target's name has no colon
        return RayTarget(name=compute, address=check_address(compute))
    if name == LOCAL:
        rows = ws.query("SELECT config_json FROM computes WHERE name = :name", {"name": LOCAL})
        return _load(rows[0]["config_json"]) if rows else LocalTarget()
    return get_target(ws, name)


def target_for(compute: str, ws: Workspace) -> RayTarget | None:
    """The Ray target a spec's ``compute`` names; ``None`` for this machine.

    Raises:
        PhalanxError: an unknown target name.
    """
    target = resolve_target(compute, ws)
    return target if isinstance(target, RayTarget) else None


def open_compute(
    target: Target, ws: Workspace, *, cancelled: Callable[[], bool] = lambda: False
) -> Compute:
    """The compute that runs a job's nodes on ``target`` (its token resolved now).

    Args:
        cancelled: Polled while waiting for a cluster to place the nodes.

    Raises:
        PhalanxError: the target's token cannot be read.
    """
    if isinstance(target, LocalTarget):
        from phalanx.compute.local import LocalCompute

        return LocalCompute(target)
    from phalanx.compute.ray import RayCompute

    return RayCompute(target, target.token_value(ws), cancelled=cancelled)


def create_target(ws: Workspace, target: Target, *, owner: str | None = None) -> None:
    """Record ``target``; a Ray target's token must already be a reference. ``owner``:
    the server's admin who made it (``None`` on this machine).

    Raises:
        PhalanxError: the name is invalid or taken, or ``local`` is not a local target,
            or a local target's GPUs are another local target's too.
    """
    from phalanx.tracking.protocol import OUTSIDE_TARGET
    from phalanx.workspace.trials import SWEEP_TARGET

    # OUTSIDE_TARGET marks the runs a notebook makes, which their makers write from
    # outside: a target of that name would let its jobs' owners write into running jobs.
    # SWEEP_TARGET marks sweep jobs, which the scheduler never places.
    if (
        not TARGET_NAME_RE.fullmatch(target.name)
        or (target.name == LOCAL and not isinstance(target, LocalTarget))
        or target.name.lower() in (OUTSIDE_TARGET, SWEEP_TARGET)
    ):
        raise PhalanxError(
            f"compute name {target.name!r} is invalid or reserved: use letters, digits, '_' "
            "and '-' ('local' only with --type local, for this machine's own settings; "
            f"'{OUTSIDE_TARGET}' is MLflow runs made outside any job, '{SWEEP_TARGET}' "
            "sweep jobs)"
        )
    if isinstance(target, RayTarget):
        check_address(target.address)
    else:
        _check_disjoint(ws, target)
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    try:
        with ws.transaction() as tx:
            tx.execute(
                "INSERT INTO computes (name, type, config_json, created_at, owner)"
                " VALUES (:name, :type, :config, :now, :owner)",
                {"name": target.name, "type": target.type,
                 "config": target.model_dump_json(exclude_none=True), "now": time.time(),
                 "owner": owner},
            )  # fmt: skip
    except IntegrityError as exc:
        raise PhalanxError(
            f"compute {target.name!r} already exists; `phalanx compute delete` it first"
        ) from exc


def get_target(ws: Workspace, name: str) -> Target:
    """The registered target ``name``.

    Raises:
        UnknownName: no such target.
    """
    rows = ws.query("SELECT config_json FROM computes WHERE name = :name", {"name": name})
    if not rows:
        known = [LOCAL, *(t.name for t in list_targets(ws))]
        raise UnknownName("compute target", name, known, "`phalanx compute list` shows them")
    return _load(rows[0]["config_json"])


def low_priority_at(ws: Workspace, address: str) -> RayTarget | None:
    """The registered low-priority target on the Ray cluster at ``address``, if one is: the
    cluster's nodes may be taken away, so it is nobody's dedicated compute."""
    for target in list_targets(ws):
        if isinstance(target, RayTarget) and target.low_priority and target.address == address:
            return target
    return None


def list_targets(ws: Workspace) -> list[Target]:
    return [
        _load(r["config_json"]) for r in ws.query("SELECT config_json FROM computes ORDER BY name")
    ]


def delete_target(ws: Workspace, name: str) -> None:
    """Forget a target and its stored token; the built-in ``local`` is then what it is
    when nothing was registered for it (so deleting it again does nothing).

    Raises:
        UnknownName: no such target.
    """
    if name != LOCAL:
        get_target(ws, name)
    with ws.transaction() as tx:
        tx.execute("DELETE FROM computes WHERE name = :name", {"name": name})
        # What its probe read and asked: a target made again under the name starts afresh.
        tx.execute("DELETE FROM scaling WHERE target = :name", {"name": name})
    SecretStore(ws.home).delete_prefix(secret_key(name))


def secret_key(name: str) -> str:
    """Where a target's stored token lives in the secrets file."""
    return f"compute/{name}/token"


def _check_disjoint(ws: Workspace, target: LocalTarget) -> None:
    """Two local targets never share a GPU: each is its own queue over its devices.

    Only the built-in ``local`` may leave its GPUs unsaid (it then has every GPU
    no other local target was given); any other local target names its own.
    """
    if target.name != LOCAL and target.gpus is None:
        raise PhalanxError(
            f"compute {target.name!r}: a local target other than 'local' needs --gpus (the "
            "GPUs it owns, e.g. --gpus 4-7, or --gpus none); 'local' keeps the rest"
        )
    if not target.gpus:
        return
    for other in list_targets(ws):
        if isinstance(other, LocalTarget) and other.name != target.name and other.gpus:
            shared = sorted(set(other.gpus) & set(target.gpus), key=_device_order)
            if shared:
                raise PhalanxError(
                    f"--gpus: device(s) {','.join(shared)} already belong to compute "
                    f"{other.name!r}; give each local target its own GPUs"
                )


def _device_order(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)


def _load(config_json: str) -> Target:
    data = json.loads(config_json)
    try:
        if data.get("type") == "local":
            return LocalTarget.model_validate(data)
        return RayTarget.model_validate(data)
    except ValidationError as exc:
        raise PhalanxError(f"a compute target record cannot be read: {exc}") from exc
