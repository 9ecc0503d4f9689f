"""Datastores and compute targets as the SDK returns them (what ``phalanx datastore
show`` and ``phalanx compute show`` print, as objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(kw_only=True)
class Datastore:
    """A datastore of the workspace: ``default`` (a local folder), ``azure_blob`` or ``s3``.

    ``credentials`` says where each credential comes from (an environment
    variable or the secrets file), never its value.
    """

    name: str
    type: str
    description: str | None = None
    credentials: dict[str, str] | str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    """Every other setting (``path``; ``account_name``, ``container_name``,
    ``endpoint``; ``bucket``, ``endpoint_url``…)."""

    def __getattr__(self, key: str) -> Any:
        # account_name, container_name, bucket… as attributes, as Azure ML's classes have.
        properties = self.__dict__.get("properties", {})
        if key in properties:
            return properties[key]
        raise AttributeError(key)


class AzureBlobDatastore(Datastore):
    """An ``azure_blob`` datastore (Azure ML's ``AzureBlobDatastore``)."""


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
