"""``compute create --type ray``: the settings its options describe, and the checks
against the workspace and the cluster before it is recorded.

A token is kept as a reference: ``--token-env`` names a variable of the environment
where the workspace is (the server's, when the CLI talks to one), and a token piped
in for ``--store-token`` goes to the 0600 secrets file and is never returned.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from phalanx.errors import PhalanxError
from phalanx.kinds.ray.settings import RayTarget, check_address, check_driver_here
from phalanx.storage.secrets import SecretRef, SecretStore
from phalanx.workspace import Workspace

ELASTIC_OPTIONS = ("min_nodes", "max_nodes", "idle_time_before_scale_down", "node_cpus",
                   "node_gpus")  # fmt: skip


def secret_key(name: str) -> str:
    """Where a target's stored token lives in the secrets file."""
    return f"compute/{name}/token"


def ray_target(
    options: Mapping[str, Any], address: str, token: SecretRef | None = None
) -> RayTarget:
    """The Ray target ``options`` describe.

    Raises:
        PhalanxError: a scaling option without ``--max-nodes``, or values that do not fit
            together, naming the option.
    """
    given = [k for k in ELASTIC_OPTIONS if options.get(k) is not None and k != "max_nodes"]
    if options.get("max_nodes") is None and given:
        raise PhalanxError(
            f"--{given[0].replace('_', '-')} is for an elastic target: give --max-nodes N (the "
            "most worker nodes the cluster's autoscaler may add) and --node-cpus"
        )
    scaling: dict[str, Any] = {
        k: options.get(k) for k in ELASTIC_OPTIONS if options.get(k) is not None
    }
    if options.get("idle_time_before_scale_down") is not None:
        scaling["idle_time_before_scale_down"] = idle_seconds(
            options["idle_time_before_scale_down"]
        )
    given_too = {
        k: options[k]
        for k in ("placement", "cpus_per_node", "gpus_per_node", "files", "tier")
        if options.get(k) is not None
    }
    try:
        return RayTarget(name=options["name"], address=address, token=token, **given_too,
                         **scaling)  # fmt: skip
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


def ray_address(options: Mapping[str, Any]) -> str:
    """The Ray target's address, checked.

    Raises:
        PhalanxError: local-only options, or no or a malformed address.
    """
    if any(options.get(k) is not None for k in ("gpus", "cpus", "memory")):
        raise PhalanxError(
            "--gpus/--cpus/--memory are for --type local; a Ray target has --gpus-per-node"
        )
    if options.get("address") is None:
        raise PhalanxError("--address is required for --type ray: ray://HEAD:10001 or HEAD:6379")
    return check_address(str(options["address"]))


def probe(address: str) -> None:
    """Fail fast when nothing listens at the address (Ray's own connect retries for long)."""
    from phalanx.storage.errors import check_port

    host, _, port = address.removeprefix("ray://").rpartition(":")
    check_port(
        host.strip("[]"),
        int(port),
        "for the Ray cluster",
        "check the head node's address and port, or pass --no-check to record it anyway",
    )
    check_driver_here(address)


def token_ref(ws: Workspace, options: Mapping[str, Any]) -> SecretRef | None:
    """Where the target's token comes from: a variable, or the secrets file, where a
    token given for ``--store-token`` is put now.

    Raises:
        PhalanxError: ``--store-token`` with no token given.
    """
    name, token_env = options["name"], options.get("token_env")
    if options.get("store_token"):
        if token_env:
            value = os.environ.get(token_env, "")
        else:
            token = options.get("token")
            value = token.get_secret_value() if token is not None else ""
        if not value:
            raise PhalanxError("--store-token: no token on stdin (or in --token-env); pipe it in")
        SecretStore(ws.home).put(secret_key(name), value)
        return SecretRef(secret=secret_key(name))
    return SecretRef(env=token_env) if token_env else None


def check_sole_scaler(others: list[RayTarget], target: RayTarget) -> None:
    """Ray's autoscaler keeps one resource request per cluster: two elastic targets on
    one cluster would overwrite each other's."""
    for other in others:
        if other.elastic and other.address == target.address:
            raise PhalanxError(
                f"--max-nodes: compute {other.name!r} already scales the cluster at "
                f"{target.address} (its autoscaler takes one request at a time); use that "
                "target, or delete it first"
            )


def check_one_tier(others: list[RayTarget], target: RayTarget) -> None:
    """A cluster is dedicated or low-priority: a dedicated target on the cluster of a
    low-priority one would run dedicated jobs on nodes that may be taken away."""
    for other in others:
        if (
            other.address == target.address
            and other.name != target.name
            and other.low_priority != target.low_priority
        ):
            raise PhalanxError(
                f"--tier: compute {other.name!r} is {other.tier} on the cluster at "
                f"{target.address}; a cluster is dedicated or low-priority, not both: use "
                "another cluster for the other tier"
            )
