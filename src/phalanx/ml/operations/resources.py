"""``ml_client.datastores``, ``ml_client.compute`` and ``ml_client.environments``.

Datastores and compute targets call :class:`phalanx.service.datastores.Datastores`
and :class:`phalanx.service.targets.Targets`, as ``phalanx datastore`` and
``phalanx compute`` do. ``datastores.create_or_update`` registers an Azure
Blob container with its key or SAS token kept in the secrets file, as
``phalanx datastore create --store`` does; compute targets are registered with
``phalanx compute create``.
Environments are given inline to ``command(environment=...)``; phalanx has no
registry of named environments yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

from pydantic import SecretStr

from phalanx.ml.entities.assets import Environment
from phalanx.ml.entities.resources import (
    AccountKeyConfiguration,
    AzureBlobDatastore,
    Compute,
    Datastore,
    SasTokenConfiguration,
)
from phalanx.ml.errors import MLError, argument_error
from phalanx.service.datastores import DatastoreCreate, Datastores
from phalanx.service.targets import Targets

_STORED = ("name", "type", "description", "credentials")


def _datastore(data: dict[str, Any]) -> Datastore | AzureBlobDatastore:
    if data.get("type") == "azure_blob":
        return AzureBlobDatastore(
            name=data["name"],
            account_name=data["account_name"],
            container_name=data["container_name"],
            endpoint=data.get("endpoint", "core.windows.net"),
            protocol=data.get("protocol", "https"),
            description=data.get("description"),
            credentials=data.get("credentials"),
        )
    return Datastore(
        name=data["name"],
        type=data["type"],
        description=data.get("description"),
        credentials=data.get("credentials"),
        properties={k: v for k, v in data.items() if k not in _STORED},
    )


def _blob_request(store: AzureBlobDatastore, where: str) -> DatastoreCreate:
    """What ``phalanx datastore create --type azure_blob --store`` sends for ``store``."""
    creds = store.credentials
    piped: dict[str, SecretStr] = {}
    if isinstance(creds, AccountKeyConfiguration):
        auth, piped = "account_key", {"account_key": SecretStr(creds.account_key)}
    elif isinstance(creds, SasTokenConfiguration):
        auth, piped = "sas_token", {"sas_token": SecretStr(creds.sas_token)}
    elif creds is None:
        auth = "anonymous"
    else:
        raise argument_error(
            where, "credentials", "must be AccountKeyConfiguration(account_key=...), "
            f"SasTokenConfiguration(sas_token=...) or None; got {type(creds).__name__}",
        )  # fmt: skip
    endpoint = store.endpoint
    if "://" not in endpoint and store.protocol == "http":
        endpoint = f"http://{store.account_name}.blob.{endpoint.strip('.')}"
    return DatastoreCreate(
        name=store.name,
        type="azure_blob",
        description=store.description,
        account_name=store.account_name,
        container_name=store.container_name,
        endpoint=endpoint,
        auth=auth,
        store=bool(piped),
        piped=piped,
    )


class DatastoreOperations:
    """The datastore verbs of :class:`~phalanx.ml.MLClient`."""

    def __init__(self, backend: Datastores) -> None:
        self._stores = backend

    def get(self, name: str) -> Datastore | AzureBlobDatastore:
        return _datastore(self._stores.show(name))

    def get_default(self) -> Datastore | AzureBlobDatastore:
        """``default``: the workspace's own folder."""
        return self.get("default")

    def list(self) -> Iterator[Datastore | AzureBlobDatastore]:
        """Every datastore, ``default`` first."""
        return iter([_datastore(entry["show"]) for entry in self._stores.list_all()])

    def delete(self, name: str) -> None:
        self._stores.delete(name)

    def create_or_update(self, datastore: AzureBlobDatastore) -> Datastore | AzureBlobDatastore:
        """Register an Azure Blob container, after listing it once (a wrong key fails here).

        The credential is kept in the workspace's secrets file (0600; the server's,
        through a server), as ``phalanx datastore create --store`` keeps it. S3 and
        local datastores, and credentials kept in an environment variable, are
        ``phalanx datastore create``'s.

        Raises:
            MLError: not an ``AzureBlobDatastore``, or a credential of another kind.
            PhalanxError: the name is taken, or the container cannot be listed.
        """
        where = "ml_client.datastores.create_or_update()"
        if not isinstance(datastore, AzureBlobDatastore):
            raise argument_error(
                where, "datastore", "phalanx.ml creates AzureBlobDatastore(...) only; create "
                "S3 and local datastores with `phalanx datastore create`",
            )  # fmt: skip
        self._stores.create(_blob_request(datastore, where))
        return self.get(datastore.name)


class ComputeOperations:
    """The compute targets of :class:`~phalanx.ml.MLClient`, with what each has."""

    def __init__(self, backend: Targets) -> None:
        self._targets = backend

    def get(self, name: str) -> Compute:
        """The target, its hosts (GPUs, CPU slots, memory), what runs on it and its queue."""
        view = self._targets.show(name)
        settings = view.get("settings", {})
        capacity = view.get("capacity") or {}
        return Compute(
            name=view.get("target", name),
            type=str(settings.get("type", "local")),
            settings=settings,
            where=settings.get("address"),
            hosts=list(capacity.get("hosts") or []),
            running=list(view.get("running") or []),
            queued=list(view.get("queued") or []),
        )

    def list(self) -> Iterator[Compute]:
        """Every target (``local`` first), each as :meth:`get` reads it."""
        names = [t["settings"]["name"] for t in self._targets.list_all()]
        return iter([self.get(n) for n in names])

    def begin_create_or_update(self, compute: Any) -> NoReturn:
        raise MLError(
            "phalanx registers compute targets with `phalanx compute create` (a Ray cluster's "
            "token is read from a variable or stdin)",
            field="compute",
            source="ml_client.compute.begin_create_or_update()",
        )


_NO_REGISTRY = (
    "phalanx has no registry of named environments yet (it comes with issue 17); pass "
    "Environment(image=..., conda_file=...) to command(environment=...) instead"
)


class EnvironmentOperations:
    """``ml_client.environments``: every call says named environments are not kept yet."""

    def create_or_update(self, environment: Environment) -> NoReturn:
        raise MLError(_NO_REGISTRY, field="environment",
                      source="ml_client.environments.create_or_update()")  # fmt: skip

    def get(self, name: str, version: str | None = None, label: str | None = None) -> NoReturn:
        raise MLError(_NO_REGISTRY, field="name", source="ml_client.environments.get()")

    def list(self, name: str | None = None) -> NoReturn:
        raise MLError(_NO_REGISTRY, field="name", source="ml_client.environments.list()")
