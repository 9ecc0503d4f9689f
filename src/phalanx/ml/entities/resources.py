"""Datastores and compute targets as the SDK returns them (what ``phalanx datastore
show`` and ``phalanx compute show`` print, as objects)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from phalanx.ml.errors import checked_keywords, unknown_keywords


@checked_keywords
@dataclass(kw_only=True)
class AccountKeyConfiguration:
    """An Azure Storage account key (``AzureBlobDatastore(credentials=...)``)."""

    account_key: str = field(repr=False)


@checked_keywords
@dataclass(kw_only=True)
class SasTokenConfiguration:
    """An Azure Storage SAS token (``AzureBlobDatastore(credentials=...)``)."""

    sas_token: str = field(repr=False)


@dataclass(kw_only=True)
class Datastore:
    """A datastore of the workspace as read back: ``default`` (a local folder),
    ``azure_blob`` or ``s3``.

    ``credentials`` says where each credential comes from (an environment
    variable or the secrets file), never its value.
    """

    name: str
    type: str
    description: str | None = None
    credentials: dict[str, str] | str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    """Every other setting (``path``; ``bucket``, ``endpoint_url``…)."""

    def __getattr__(self, key: str) -> Any:
        # path, bucket… as attributes, as Azure ML's classes have them.
        properties = self.__dict__.get("properties", {})
        if key in properties:
            return properties[key]
        raise AttributeError(key)


@checked_keywords
@dataclass(kw_only=True)
class AzureBlobDatastore:
    """An Azure Blob container (Azure ML's ``AzureBlobDatastore``).

    ``endpoint`` is the storage suffix (``core.windows.net``) or, phalanx's own,
    the whole Blob service URL (``http://127.0.0.1:10000/devstoreaccount1`` for
    Azurite). ``credentials``: :class:`AccountKeyConfiguration`,
    :class:`SasTokenConfiguration`, or ``None`` for anonymous access. Given to
    ``ml_client.datastores.create_or_update``, the credential goes into the
    workspace's secrets file (0600), never into its database; read back, it is
    where the credential comes from.
    """

    name: str
    account_name: str
    container_name: str
    endpoint: str = "core.windows.net"
    protocol: str = "https"
    description: str | None = None
    credentials: AccountKeyConfiguration | SasTokenConfiguration | dict[str, str] | str | None = (
        None
    )
    type: str = "azure_blob"
    tags: dict[str, str] | None = None


@dataclass(kw_only=True)
class Compute:
    """A compute target: ``local`` (this machine), a local target over a part of it,
    or a Ray cluster.

    ``hosts`` is what it has (``host``, ``gpus``, ``cpus``, ``memory`` each),
    ``running`` what holds it, ``queued`` its queue in order. An elastic Ray target
    has ``min_instances``, ``max_instances`` and ``idle_time_before_scale_down``
    (seconds) and its ``scaling`` state; a Ray target its ``tier`` (``dedicated`` or
    ``low_priority``); ``size`` and Azure's other attributes are ``None``.
    """

    name: str
    type: str = "local"
    settings: dict[str, Any] = field(default_factory=dict)
    where: str | None = None
    hosts: list[dict[str, Any]] = field(default_factory=list)
    running: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    size: str | None = None
    location: str | None = None
    description: str | None = None
    tags: dict[str, str] | None = None
    min_instances: int | None = None
    max_instances: int | None = None
    """An elastic target's most worker nodes; else the nodes it has (its hosts, once read)."""
    idle_time_before_scale_down: int | None = None
    tier: str | None = None
    scaling: dict[str, Any] | None = None
    """An elastic target's size now: nodes up, wanted, asked of its autoscaler, trouble."""


# Azure ML's AmlCompute keywords beyond Compute's: accepted, and left out (a note says so).
AML_ONLY = (
    "size", "location", "identity", "ssh_public_access_enabled", "ssh_settings",
    "network_settings", "enable_node_public_ip", "tags", "description", "resource_id",
    "provisioning_state", "provisioning_errors", "created_on",
)  # fmt: skip
SCALING = ("min_instances", "max_instances", "idle_time_before_scale_down")
"""Azure ML's scaling keywords: an elastic Ray target's ``--min-nodes``, ``--max-nodes``
and ``--idle-time-before-scale-down``."""
PHALANX_ONLY = ("address", "node_cpus", "node_gpus", "gpus_per_node", "cpus_per_node",
                "token_env", "tier")  # fmt: skip
"""phalanx's keywords for the Ray cluster an AmlCompute scales on (``compute create``'s)."""


class AmlCompute(Compute):
    """Azure ML's cluster, as ``ml_client.compute.begin_create_or_update`` takes it.

    With ``max_instances`` it is an elastic Ray target, as ``phalanx compute create
    --type ray --max-nodes …`` makes it: ``address`` (else ``$PHALANX_RAY_ADDRESS``)
    is the cluster's Ray Client address, ``node_cpus``/``node_gpus`` one machine of
    its worker node type, ``min_instances`` and ``idle_time_before_scale_down``
    (seconds) as Azure ML's, and ``tier="low_priority"`` for nodes that may be taken
    away (only ``job_tier: spot`` jobs run there; a node lost is a preemption).
    Without, it is a local target of that name: jobs run on this machine, in a queue
    of their own, without GPUs of their own. ``size``, ``ssh_*`` and the rest of
    Azure ML's keywords are accepted and not kept (a note says so once).

    Raises:
        MLError: a keyword Azure ML's ``AmlCompute`` does not take (with "did you mean").
    """

    def __init__(self, *, name: str, type: str = "amlcompute", **kwargs: Any) -> None:
        unknown_keywords(
            "AmlCompute()", kwargs, ("name", "type", *AML_ONLY, *SCALING, *PHALANX_ONLY)
        )
        known = {f.name for f in fields(Compute)}
        super().__init__(name=name, type=type, **{k: v for k, v in kwargs.items() if k in known})
        self.azure = {k: v for k, v in kwargs.items() if v is not None}
        """The Azure ML keywords given, as given."""
