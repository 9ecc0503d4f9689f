"""``ml_client.datastores``, ``ml_client.compute`` and ``ml_client.environments``.

Datastores and compute targets call :class:`phalanx.service.datastores.Datastores`
and :class:`phalanx.service.targets.Targets`, as ``phalanx datastore`` and
``phalanx compute`` do. Creating either keeps to the CLI, which reads
credentials from a variable or stdin so they never sit in a script.
Environments are given inline to ``command(environment=...)``; phalanx has no
registry of named environments yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

from phalanx.ml.entities.assets import Environment
from phalanx.ml.entities.resources import AzureBlobDatastore, Compute, Datastore
from phalanx.ml.errors import MLError
from phalanx.service.datastores import Datastores
from phalanx.service.targets import Targets

_STORED = ("name", "type", "description", "credentials")


def _datastore(data: dict[str, Any]) -> Datastore:
    cls = AzureBlobDatastore if data.get("type") == "azure_blob" else Datastore
    return cls(
        name=data["name"],
        type=data["type"],
        description=data.get("description"),
        credentials=data.get("credentials"),
        properties={k: v for k, v in data.items() if k not in _STORED},
    )


class DatastoreOperations:
    """The datastore verbs of :class:`~phalanx.ml.MLClient` (read and delete)."""

    def __init__(self, backend: Datastores) -> None:
        self._stores = backend

    def get(self, name: str) -> Datastore:
        return _datastore(self._stores.show(name))

    def get_default(self) -> Datastore:
        """``default``: the workspace's own folder."""
        return self.get("default")

    def list(self) -> Iterator[Datastore]:
        return iter([_datastore(d) for d in self._stores.list_all()])

    def delete(self, name: str) -> None:
        self._stores.delete(name)

    def create_or_update(self, datastore: Any) -> NoReturn:
        raise MLError(
            "phalanx creates datastores with `phalanx datastore create`, which reads credentials "
            "from an environment variable or stdin rather than a script",
            field="datastore",
            source="ml_client.datastores.create_or_update()",
        )


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
