"""Compute targets of a workspace (create, list, show, delete) and the queue of each.

What a target is, and what ``compute create``'s options mean for it, its kind says
(:mod:`phalanx.compute.kind`): this module checks who may do what, and keeps the
request's shape for every kind. A token piped in for ``--store-token`` arrives in
:attr:`TargetCreate.token`; the kind keeps it (as a reference), and it is never
returned.
"""

from __future__ import annotations

import os
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from phalanx.compute.registry import builtin, kind, kind_of
from phalanx.compute.targets import (
    Target,
    builtins,
    create_target,
    delete_target,
    get_target,
    list_targets,
    resolve_target,
)
from phalanx.errors import PhalanxError
from phalanx.service.access import LOCAL as LOCAL_CALLER
from phalanx.service.access import Caller
from phalanx.workspace import Workspace

_TEXT = Field(default=None, max_length=4096)


class TargetCreate(BaseModel):
    """What ``phalanx compute create`` asks for (its options, by name); which of them a
    kind takes, and what they mean, is the kind's (:meth:`ComputeKind.build`)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256)
    type: str = Field(default="ray", max_length=64)
    """The kind (``local``, ``ray``, or one a plug-in registers)."""
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

    def options(self) -> dict[str, Any]:
        """The options as a kind reads them (the token still a secret)."""
        return {**self.model_dump(exclude={"token"}), "token": self.token}


class Targets(Protocol):
    """The compute verbs and the queue, on this machine's workspace or a server's."""

    def create(self, req: TargetCreate) -> dict[str, Any]: ...
    def list_all(self) -> list[dict[str, Any]]: ...
    def show(self, name: str) -> dict[str, Any]: ...
    def delete(self, name: str) -> None: ...
    def queue(self, name: str | None) -> list[dict[str, Any]]: ...


def settings_json(target: Target) -> dict[str, object]:
    """A target's settings; a secret as where it comes from, never its value."""
    return kind_of(target).public(target)


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
            PhalanxError: an option that does not fit the kind, a bad address, nothing
                listening there (unless ``no_check``), or a taken name or GPU.
            Forbidden: the caller is no admin.
        """
        ws = self.ws
        self.caller.require_admin("compute create", "targets decide where everyone's jobs run")
        of_kind = kind(req.type)
        options = req.options()
        target = of_kind.prepare(ws, of_kind.build(options), options)
        create_target(ws, target, owner=self.caller.user)
        of_kind.created(ws, target)
        return {"name": req.name, "type": req.type, "where": of_kind.describe(ws, target).where}

    def list_all(self) -> list[dict[str, Any]]:
        """Every target (the built-in ones first when not registered): settings, where,
        and what ``compute list`` shows of it."""
        targets = list_targets(self.ws)
        registered = {t.name for t in targets}
        targets[:0] = [resolve_target(n, self.ws) for n in builtins() if n not in registered]
        listed = []
        for t in targets:
            described = kind_of(t).describe(self.ws, t)
            listed.append({"settings": settings_json(t), "where": described.where,
                           "placement": described.placement, "nodes": described.nodes,
                           "token": described.token})  # fmt: skip
        return listed

    def show(self, name: str) -> dict[str, Any]:
        """A target's settings, what it has, what runs on it where, and its queue."""
        from phalanx.service.queue import queue_view

        own = builtin(name) is not None
        target = resolve_target(name, self.ws) if own else get_target(self.ws, name)
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
            registered = {t.name for t in targets}
            targets[:0] = [resolve_target(n, self.ws) for n in builtins() if n not in registered]
        return [queue_view(self.ws, t) for t in targets]


def check_request(req: TargetCreate) -> Target:
    """The settings ``req`` describes, with the checks that need no workspace (the CLI
    makes them before sending a request).

    Raises:
        PhalanxError: an unknown kind, an option that does not fit it, or a malformed value.
    """
    return kind(req.type).build(req.options())


_SCALING_KEYS = ("min_nodes", "max_nodes", "idle_time_before_scale_down", "node_cpus",
                 "node_gpus")  # fmt: skip
"""A compute YAML's keys that ask for a cluster that grows."""


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
        elif any(options.get(k) is not None for k in _SCALING_KEYS):
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
