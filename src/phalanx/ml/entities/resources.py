"""Datastores and compute targets as the SDK returns them (what ``phalanx datastore
show`` and ``phalanx compute show`` print, as objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(kw_only=True)
class AccountKeyConfiguration:
    """An Azure Storage account key (``AzureBlobDatastore(credentials=...)``)."""

    account_key: str = field(repr=False)


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
    """A compute target: ``local`` (this machine) or a Ray cluster.

    ``hosts`` is what it has (``host``, ``gpus``, ``cpus``, ``memory`` each),
    ``running`` what holds it, ``queued`` its queue in order.
    """

    name: str
    type: str
    settings: dict[str, Any] = field(default_factory=dict)
    where: str | None = None
    hosts: list[dict[str, Any]] = field(default_factory=list)
    running: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)

    @property
    def max_instances(self) -> int:
        """Nodes it has (Azure ML's ``AmlCompute.max_instances``); 0 when not read yet."""
        return len(self.hosts)


class AmlCompute(Compute):
    """Azure ML's name for a cluster; phalanx's targets are :class:`Compute`."""
