"""Compute targets of a workspace (create, list, show, delete) and the queue of each.

A Ray target's token is kept as a reference: ``token_env`` names a variable of
the environment where the workspace is (the server's, when the CLI talks to
one), and a token piped in for ``--store-token`` arrives in
:attr:`TargetCreate.token`, goes to the 0600 secrets file and is never returned.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from phalanx.compute.targets import (
    LOCAL,
    LocalTarget,
    RayTarget,
    Target,
    check_address,
    check_driver_here,
    create_target,
    delete_target,
    get_target,
    list_targets,
    parse_devices,
    resolve_target,
    secret_key,
)
from phalanx.errors import PhalanxError
from phalanx.service.access import LOCAL as LOCAL_CALLER
from phalanx.service.access import Caller
from phalanx.storage.errors import check_port
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

_TEXT = Field(default=None, max_length=4096)


class TargetCreate(BaseModel):
    """What ``phalanx compute create`` asks for (its options, by name)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    type: Literal["ray", "local"] = "ray"
    address: str | None = _TEXT
    gpus: str | None = _TEXT
    cpus: float | None = None
    memory: str | None = _TEXT
    token_env: str | None = _TEXT
    store_token: bool = False
    token: SecretStr | None = None
    """A token read from the user's stdin for ``--store-token``; write-only."""
    placement: Literal["spread", "pack"] = "spread"
    cpus_per_node: float | None = None
    gpus_per_node: float = 0
    files: Literal["local", "shared"] = "local"
    min_nodes: int | None = None
    max_nodes: int | None = None
    idle_time_before_scale_down: str | int | None = Field(default=None)
    """Seconds, or a duration such as ``2m``."""
    node_cpus: float | None = None
    node_gpus: float | None = None
    tier: str | None = Field(default=None, max_length=64)
    """``dedicated`` (the default) or ``low_priority`` (Azure ML's ``tier``)."""
    no_check: bool = False

    def wire(self) -> dict[str, Any]:
        """The JSON body, the piped token in clear (for the request only)."""
        body = self.model_dump(mode="json", exclude={"token"})
        body["token"] = self.token.get_secret_value() if self.token else None
        return body


class Targets(Protocol):
    """The compute verbs and the queue, on this machine's workspace or a server's."""

    def create(self, req: TargetCreate) -> dict[str, Any]: ...
    def list_all(self) -> list[dict[str, Any]]: ...
    def show(self, name: str) -> dict[str, Any]: ...
    def delete(self, name: str) -> None: ...
    def queue(self, name: str | None) -> list[dict[str, Any]]: ...


def settings_json(target: Target) -> dict[str, object]:
    """A target's settings; a Ray token as where it comes from, never its value."""
    if isinstance(target, LocalTarget):
        return target.model_dump()
    data = target.model_dump(exclude={"token"}, exclude_none=True)
    data["token"] = target.token.where if target.token else None
    return data


class WorkspaceTargets:
    """The compute targets and queues of a workspace on this machine, as ``caller`` may
    use them: all read; only an admin makes or deletes a target (it decides where every
    user's jobs run, and may name a variable of the server's environment)."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL_CALLER) -> None:
        self.ws = ws
        self.caller = caller

    def create(self, req: TargetCreate) -> dict[str, Any]:
        """Register a target; what it is (``where``: this machine's part, or the address).

        Raises:
            PhalanxError: an option that does not fit the type, a bad address, nothing
                listening there (unless ``no_check``), or a taken name or GPU.
            Forbidden: the caller is no admin.
        """
        ws = self.ws
        self.caller.require_admin("compute create", "targets decide where everyone's jobs run")
        if req.type == "local":
            local = local_target(req)
            check_within_machine(ws, local)
            create_target(ws, local, owner=self.caller.user)
            return {"name": req.name, "type": "local", "where": describe_local(ws, req.name)}
        address = ray_address(req)
        if not req.no_check:
            _probe(address)
        token: SecretRef | None = None
        if req.store_token:
            if req.token_env:
                value = os.environ.get(req.token_env, "")
            else:
                value = req.token.get_secret_value() if req.token else ""
            if not value:
                raise PhalanxError(
                    "--store-token: no token on stdin (or in --token-env); pipe it in"
                )
            SecretStore(ws.home).put(secret_key(req.name), value)
            token = SecretRef(secret=secret_key(req.name))
        elif req.token_env:
            token = SecretRef(env=req.token_env)
        target = ray_target(req, address, token)
        _check_one_tier(ws, target)
        if target.elastic:
            _check_sole_scaler(ws, target)
        create_target(ws, target, owner=self.caller.user)
        if target.elastic and target.min_nodes:
            from phalanx.scheduler.process import ensure_running

            ensure_running(ws.home, ws.child_env())  # it asks for the minimum at once
        return {"name": req.name, "type": "ray", "where": address}

    def list_all(self) -> list[dict[str, Any]]:
        """Every target (``local`` first when not registered): settings and where."""
        targets = list_targets(self.ws)
        if not any(t.name == LOCAL for t in targets):
            targets.insert(0, LocalTarget())
        return [
            {
                "settings": settings_json(t),
                "where": describe_local(self.ws, t.name)
                if isinstance(t, LocalTarget)
                else t.address,
            }
            for t in targets
        ]

    def show(self, name: str) -> dict[str, Any]:
        """A target's settings, what it has, what runs on it where, and its queue."""
        from phalanx.service.queue import queue_view

        target = resolve_target(name, self.ws) if name == LOCAL else get_target(self.ws, name)
        return {"settings": settings_json(target), **queue_view(self.ws, target)}

    def delete(self, name: str) -> None:
        self.caller.require_admin("compute delete", "targets decide where everyone's jobs run")
        delete_target(self.ws, name)

    def queue(self, name: str | None) -> list[dict[str, Any]]:
        """The queue view of every target (or of ``name``); starts the scheduler if it is
        not running: the command to run after a reboot."""
        from phalanx.scheduler.process import ensure_running
        from phalanx.service.queue import queue_view

        ensure_running(self.ws.home, self.ws.child_env())
        if name is not None:
            targets = [resolve_target(name, self.ws)]
        else:
            targets = list_targets(self.ws)
            if not any(t.name == LOCAL for t in targets):
                targets.insert(0, resolve_target(LOCAL, self.ws))
        return [queue_view(self.ws, t) for t in targets]


def _probe(address: str) -> None:
    """Fail fast when nothing listens at the address (Ray's own connect retries for long)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    check_port(
        host.strip("[]"),
        int(port),
        "for the Ray cluster",
        "check the head node's address and port, or pass --no-check to record it anyway",
    )
    check_driver_here(address)


def check_request(req: TargetCreate) -> None:
    """The checks that need no workspace (the CLI makes them before sending a request).

    Raises:
        PhalanxError: an option that does not fit the type, or a malformed value.
    """
    if req.type == "local":
        local_target(req)
    else:
        ray_target(req, ray_address(req))


ELASTIC_OPTIONS = ("min_nodes", "max_nodes", "idle_time_before_scale_down", "node_cpus",
                   "node_gpus")  # fmt: skip


def ray_target(req: TargetCreate, address: str, token: SecretRef | None = None) -> RayTarget:
    """The Ray target ``req`` describes.

    Raises:
        PhalanxError: a scaling option without ``--max-nodes``, or values that do not fit
            together, naming the option.
    """
    given = [k for k in ELASTIC_OPTIONS if getattr(req, k) is not None and k != "max_nodes"]
    if req.max_nodes is None and given:
        raise PhalanxError(
            f"--{given[0].replace('_', '-')} is for an elastic target: give --max-nodes N (the "
            "most worker nodes the cluster's autoscaler may add) and --node-cpus"
        )
    scaling: dict[str, Any] = {
        k: getattr(req, k) for k in ELASTIC_OPTIONS if getattr(req, k) is not None
    }
    if req.idle_time_before_scale_down is not None:
        scaling["idle_time_before_scale_down"] = idle_seconds(req.idle_time_before_scale_down)
    try:
        return RayTarget(
            name=req.name,
            address=address,
            token=token,
            placement=req.placement,
            cpus_per_node=req.cpus_per_node,
            gpus_per_node=req.gpus_per_node,
            files=req.files,
            **({"tier": req.tier} if req.tier is not None else {}),
            **scaling,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if not first["loc"]:  # a check across fields: its message names them
            raise PhalanxError(message) from None
        field = ".".join(str(p) for p in first["loc"])
        raise PhalanxError(f"--{field.replace('_', '-')}: {message}") from None


def idle_seconds(value: str | int) -> int:
    """``--idle-time-before-scale-down``: seconds from ``120``, ``90s``, ``2m`` or ``0``.

    Raises:
        PhalanxError: anything else, in one line.
    """
    from pydantic_core import PydanticCustomError

    from phalanx.spec.values import parse_duration

    if re.fullmatch(r"0+\s*[smhd]?", str(value).strip().lower()):
        return 0
    try:
        return parse_duration(value)
    except PydanticCustomError as exc:
        raise PhalanxError(f"--idle-time-before-scale-down: {exc.message()}") from None


def _check_sole_scaler(ws: Workspace, target: RayTarget) -> None:
    """Ray's autoscaler keeps one resource request per cluster: two elastic targets on
    one cluster would overwrite each other's."""
    for other in list_targets(ws):
        if isinstance(other, RayTarget) and other.elastic and other.address == target.address:
            raise PhalanxError(
                f"--max-nodes: compute {other.name!r} already scales the cluster at "
                f"{target.address} (its autoscaler takes one request at a time); use that "
                "target, or delete it first"
            )


def _check_one_tier(ws: Workspace, target: RayTarget) -> None:
    """A cluster is dedicated or low-priority: a dedicated target on the cluster of a
    low-priority one would run dedicated jobs on nodes that may be taken away."""
    for other in list_targets(ws):
        if (
            isinstance(other, RayTarget)
            and other.address == target.address
            and other.name != target.name
            and other.low_priority != target.low_priority
        ):
            raise PhalanxError(
                f"--tier: compute {other.name!r} is {other.tier} on the cluster at "
                f"{target.address}; a cluster is dedicated or low-priority, not both: use "
                "another cluster for the other tier"
            )


def ray_address(req: TargetCreate) -> str:
    """The Ray target's address, checked.

    Raises:
        PhalanxError: local-only options, or no or a malformed address.
    """
    if req.gpus is not None or req.cpus is not None or req.memory is not None:
        raise PhalanxError(
            "--gpus/--cpus/--memory are for --type local; a Ray target has --gpus-per-node"
        )
    if req.address is None:
        raise PhalanxError("--address is required for --type ray: ray://HEAD:10001 or HEAD:6379")
    return check_address(req.address)


def local_target(req: TargetCreate) -> LocalTarget:
    """The local target ``req`` describes.

    Raises:
        PhalanxError: an address, or malformed GPUs, CPUs or memory.
    """
    from phalanx.sizes import parse_size

    if req.address is not None:
        raise PhalanxError("--address is for --type ray; a local target is this machine")
    if req.tier is not None and req.tier.strip().lower() != "dedicated":
        raise PhalanxError(
            f"--tier {req.tier}: this machine is not taken away; a low-priority target is a "
            "Ray cluster with a low-priority node type (--type ray --address ...)"
        )
    scaling = [k for k in ELASTIC_OPTIONS if getattr(req, k) is not None]
    if scaling:
        raise PhalanxError(
            f"--{scaling[0].replace('_', '-')} is for --type ray: this machine does not grow; "
            "register a Ray cluster with an autoscaler to scale"
        )
    cpus, memory = req.cpus, req.memory
    if cpus is not None and not (math.isfinite(cpus) and cpus > 0):
        raise PhalanxError(f"--cpus {cpus:g}: give a number of CPU slots above 0, e.g. 16")
    try:
        devices = parse_devices(req.gpus) if req.gpus is not None else None
    except ValueError as exc:
        raise PhalanxError(str(exc)) from None
    try:
        size = parse_size(memory) if memory is not None else None
    except ValueError as exc:
        raise PhalanxError(f"--memory: {exc}") from None
    if size is not None and size <= 0:
        raise PhalanxError(f"--memory {memory}: give a size above 0, e.g. 200G")
    return LocalTarget(name=req.name, gpus=devices, cpus=cpus, memory=size)


def check_within_machine(ws: Workspace, target: LocalTarget) -> None:
    """Every local target's jobs draw from this machine's one pool of CPU slots and memory
    (:mod:`phalanx.scheduler.capacity`): a target may hold at most what the machine has,
    and the built-in ``local``, whose settings are the machine's, may not leave it less
    than a target was given.

    Raises:
        PhalanxError: naming the flag, the machine's size and the fix.
    """
    from phalanx.compute.machine import detect_cpus, detect_memory
    from phalanx.scheduler.capacity import local_machine
    from phalanx.scheduler.model import gib

    if target.name != LOCAL:
        machine = local_machine(ws)
        declared = resolve_target(LOCAL, ws)
        assert isinstance(declared, LocalTarget)
        if target.cpus is not None and target.cpus > machine.cpus:
            whence = (
                "as compute 'local' declares"
                if declared.cpus is not None
                else "its cores; compute 'local' --cpus N declares another number"
            )
            raise PhalanxError(
                f"--cpus {target.cpus:g}: this machine has {machine.cpus:g} CPU slots "
                f"({whence}), which every local target's jobs share; give --cpus "
                f"{machine.cpus:g} or less"
            )
        if target.memory is not None and target.memory > machine.memory:
            whence = "as compute 'local' declares" if declared.memory is not None else "all of it"
            raise PhalanxError(
                f"--memory {gib(target.memory)}: this machine has {gib(machine.memory)} of "
                f"memory ({whence}), which every local target's jobs share; give at most "
                f"{gib(machine.memory)}"
            )
        return
    cpus = target.cpus if target.cpus is not None else detect_cpus()
    memory = target.memory if target.memory is not None else detect_memory()
    for other in list_targets(ws):
        if not isinstance(other, LocalTarget) or other.name == LOCAL:
            continue
        if other.cpus is not None and other.cpus > cpus:
            given = (
                f"--cpus {cpus:g}"
                if target.cpus is not None
                else f"without --cpus (this machine's {cpus:g} cores)"
            )
            raise PhalanxError(
                f"{given}: compute {other.name!r} may hold {other.cpus:g} of this machine's CPU "
                f"slots, more than this leaves the machine; give --cpus {other.cpus:g} or "
                f"more, or `phalanx compute delete {other.name}` first"
            )
        if other.memory is not None and other.memory > memory:
            given = (
                f"--memory {gib(memory)}"
                if target.memory is not None
                else f"without --memory (this machine's {gib(memory)})"
            )
            raise PhalanxError(
                f"{given}: compute {other.name!r} may hold {gib(other.memory)} of this "
                f"machine's memory, more than this leaves the machine; give at least "
                f"{gib(other.memory)}, or `phalanx compute delete {other.name}` first"
            )


def describe_local(ws: Workspace, name: str) -> str:
    """What a local target has: its GPUs, CPU slots and memory."""
    from phalanx.scheduler.capacity import local_capacity
    from phalanx.scheduler.model import gib

    target = resolve_target(name, ws)
    assert isinstance(target, LocalTarget)
    capacity = local_capacity(target, ws)
    host, machine = capacity.hosts[0], capacity.machine
    assert machine is not None
    gpus = ",".join(host.gpus) if host.gpus else "none"
    cpus = (
        f"{host.cpus:g}" if host.cpus == machine.cpus else f"{host.cpus:g} of its {machine.cpus:g}"
    )
    memory = (
        gib(host.memory)
        if host.memory == machine.memory
        else f"{gib(host.memory)} of its {gib(machine.memory)}"
    )
    shared = sum(isinstance(t, LocalTarget) and t.name != name for t in list_targets(ws))
    also = (
        f", shared with {shared} other local target{'s' if shared != 1 else ''}" if shared else ""
    )
    return f"this machine: GPUs {gpus}, {cpus} CPU slots, {memory} memory{also}"


RAY_ADDRESS_ENV = "PHALANX_RAY_ADDRESS"
"""The Ray cluster an ``AmlCompute`` (SDK or compute YAML) without an address scales on."""
# Azure ML's compute keys that name what phalanx does not choose (the VM size, region,
# identity, network): accepted in a compute YAML and not used.
_AZURE_ONLY = frozenset({
    "$schema", "size", "location", "description", "tags", "identity",
    "ssh_public_access_enabled", "ssh_settings", "network_settings", "enable_node_public_ip",
})  # fmt: skip
_YAML_KEYS = {
    "name": "name", "type": "type", "address": "address", "min_instances": "min_nodes",
    "max_instances": "max_nodes", "min_nodes": "min_nodes", "max_nodes": "max_nodes",
    "idle_time_before_scale_down": "idle_time_before_scale_down", "node_cpus": "node_cpus",
    "node_gpus": "node_gpus", "cpus_per_node": "cpus_per_node",
    "gpus_per_node": "gpus_per_node", "placement": "placement", "files": "files",
    "gpus": "gpus", "cpus": "cpus", "memory": "memory", "tier": "tier",
}  # fmt: skip


def options_from_yaml(path: str) -> dict[str, Any]:
    """``compute create -f``'s options from a compute YAML in Azure ML's shape.

    ``type: amlcompute`` is a Ray target at ``address`` (else ``$PHALANX_RAY_ADDRESS``),
    or, with neither and no scaling keys, a local target over none of this machine's
    GPUs, as the SDK's ``AmlCompute`` makes it.

    Raises:
        PhalanxError: the file cannot be read, is not a mapping, or has a key phalanx
            does not know (named, with the file).
    """
    from phalanx.spec.yamldoc import load_yaml, read_text

    try:
        data = load_yaml(read_text(path, path), path)
    except OSError as exc:
        raise PhalanxError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise PhalanxError(f"{path}: a compute YAML is a mapping (name: ..., type: ...)")
    options: dict[str, Any] = {}
    for key, value in data.items():
        if key in _AZURE_ONLY:
            continue
        if key not in _YAML_KEYS:
            known = ", ".join(sorted(k for k in _YAML_KEYS if k not in ("min_nodes", "max_nodes")))
            raise PhalanxError(f"{path}: {key}: not a compute key phalanx knows ({known})")
        options[_YAML_KEYS[key]] = value
    kind = str(options.get("type") or "ray").lower()
    if kind in ("amlcompute", "computeinstance"):
        address = options.get("address") or os.environ.get(RAY_ADDRESS_ENV)
        if address:
            options.update(type="ray", address=address)
        elif any(options.get(k) is not None for k in ELASTIC_OPTIONS):
            raise PhalanxError(
                f"{path}: max_instances: scaling needs a Ray cluster with an autoscaler; give "
                f"address: ray://HEAD:10001 (or set {RAY_ADDRESS_ENV})"
            )
        else:
            if str(options.get("tier") or "dedicated").strip().lower() == "dedicated":
                options.pop("tier", None)  # what every local target is
            options.update(type="local", gpus="none")
    else:
        options["type"] = kind
    if "name" not in options:
        raise PhalanxError(f"{path}: name: a compute YAML names its target (name: gpu-cluster)")
    return options
