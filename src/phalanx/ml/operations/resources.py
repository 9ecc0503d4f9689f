"""``ml_client.datastores``, ``ml_client.compute`` and ``ml_client.environments``.

Datastores and compute targets call :class:`phalanx.service.datastores.Datastores`
and :class:`phalanx.service.targets.Targets`, as ``phalanx datastore`` and
``phalanx compute`` do. ``datastores.create_or_update`` registers an Azure
Blob container with its key or SAS token kept in the secrets file, as
``phalanx datastore create --store`` does; compute targets are registered with
``phalanx compute create``.
``ml_client.environments`` registers named, versioned environments as
``phalanx environment create`` does (:class:`phalanx.service.environments.Environments`);
a job names one as ``azureml:NAME:VERSION`` or ``azureml:NAME@latest``, or takes
an :class:`Environment` inline.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr, ValidationError

from phalanx.ml.entities.assets import BuildContext, Environment
from phalanx.ml.entities.resources import (
    AccountKeyConfiguration,
    AzureBlobDatastore,
    Compute,
    Datastore,
    SasTokenConfiguration,
)
from phalanx.ml.errors import argument_error, surfaced_methods
from phalanx.ml.notes import note, note_once
from phalanx.ml.operations.pollers import DonePoller
from phalanx.service.datastores import DatastoreCreate, Datastores
from phalanx.service.environments import Environments
from phalanx.service.targets import RAY_ADDRESS_ENV, TargetCreate, Targets

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


@surfaced_methods("datastores")
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


@surfaced_methods("compute")
class ComputeOperations:
    """The compute targets of :class:`~phalanx.ml.MLClient`, with what each has."""

    def __init__(self, backend: Targets) -> None:
        self._targets = backend

    def get(self, name: str) -> Compute:
        """The target, its hosts (GPUs, CPU slots, memory), what runs on it and its queue.

        Raises:
            MLError: no such target.
        """
        self._check_known(name, "ml_client.compute.get()")
        return self._read(name)

    def _read(self, name: str) -> Compute:
        view = self._targets.show(name)
        settings = view.get("settings", {})
        capacity = view.get("capacity") or {}
        hosts = list(capacity.get("hosts") or [])
        elastic = settings.get("max_nodes") is not None
        return Compute(
            name=view.get("target", name),
            type=str(settings.get("type", "local")),
            settings=settings,
            where=settings.get("address"),
            hosts=hosts,
            running=list(view.get("running") or []),
            queued=list(view.get("queued") or []),
            min_instances=settings.get("min_nodes") if elastic else None,
            max_instances=settings["max_nodes"] if elastic else len(hosts),
            idle_time_before_scale_down=(
                settings.get("idle_time_before_scale_down") if elastic else None
            ),
            tier=settings.get("tier"),
            scaling=view.get("scaling"),
        )

    def list(self) -> Iterator[Compute]:
        """Every target (``local`` first), each as :meth:`get` reads it."""
        return iter([self._read(n) for n in self._names()])

    def begin_create_or_update(self, compute: Compute) -> DonePoller[Compute]:
        """Create ``AmlCompute(name=...)``: with a Ray cluster's ``address`` (or
        ``$PHALANX_RAY_ADDRESS``) a Ray target, elastic with ``max_instances`` (the same
        target ``phalanx compute create --type ray --max-nodes …`` makes); without, a
        local target of that name (jobs run on this machine, in a queue of their own,
        without GPUs of their own). A target that exists is kept as it is. Azure ML's
        sizes are not kept (a note says so once); ``tier="low_priority"`` makes the Ray
        target low-priority (its nodes may be taken away; spot jobs only).

        Raises:
            MLError: not an ``AmlCompute``, or a keyword that does not fit.
            PhalanxError: an invalid name, or the cluster does not answer.
        """
        where = "ml_client.compute.begin_create_or_update()"
        if not isinstance(compute, Compute):
            raise argument_error(
                where, "compute", f"must be AmlCompute(name=...); got {type(compute).__name__}"
            )
        if compute.type.lower() not in ("amlcompute", "local", "computeinstance"):
            raise argument_error(
                where, "type", f"phalanx.ml creates AmlCompute(...) as a local target; got type "
                f"{compute.type!r}; register a Ray cluster with `phalanx compute create --type "
                "ray` (its token is read from a variable or stdin)",
            )  # fmt: skip
        azure = getattr(compute, "azure", {})
        address = azure.get("address") or os.environ.get(RAY_ADDRESS_ENV)
        if compute.name in self._names():
            note(f"compute {compute.name!r} exists; it is kept as it is")
        elif address:
            self._targets.create(_ray_request(compute.name, str(address), azure, where))
        else:
            if str(azure.get("tier") or "dedicated").lower().replace("_", "") != "dedicated":
                raise argument_error(
                    where, "tier", f"{azure['tier']!r}: this machine is not taken away; a "
                    "low-priority AmlCompute is a Ray cluster's low-priority node type: pass "
                    f"address='ray://HEAD:10001' (or set {RAY_ADDRESS_ENV})",
                )  # fmt: skip
            self._targets.create(TargetCreate(name=compute.name, type="local", gpus="none"))
            note_once(
                "amlcompute",
                "phalanx makes AmlCompute(...) without a Ray cluster a local target: its jobs "
                "run on this machine, in a queue of their own, without GPUs of their own; "
                "min/max_instances and idle_time_before_scale_down scale a Ray cluster's "
                f"nodes: pass address='ray://HEAD:10001' (or set {RAY_ADDRESS_ENV}); size is "
                "Azure's and not kept",
            )
        made = self._read(compute.name)
        for key in ("size", "location", "description", "tags"):
            if azure.get(key) is not None:
                setattr(made, key, azure[key])
        if made.tier is None and azure.get("tier") is not None:
            made.tier = azure["tier"]  # a local target's "dedicated", as given
        return DonePoller(made)

    def _names(self) -> tuple[str, ...]:
        return tuple(t["settings"]["name"] for t in self._targets.list_all())

    def _check_known(self, name: str, where: str) -> None:
        if name == "local":
            return
        known = self._names()
        if name not in known:
            raise argument_error(
                where, "name", f"compute target {name!r} not found (known: "
                f"{', '.join(sorted({'local', *known}))}); create it with "
                f"ml_client.compute.begin_create_or_update(AmlCompute(name={name!r}))",
            )  # fmt: skip


@surfaced_methods("environments")
class EnvironmentOperations:
    """``ml_client.environments``: registered environments (``phalanx environment``)."""

    def __init__(self, environments: Environments) -> None:
        self._environments = environments

    def create_or_update(self, environment: Environment) -> Environment:
        """Register a new version of ``environment`` (its ``name`` is required; without a
        ``version`` the next integer); the registered one, with its version."""
        if not isinstance(environment, Environment):
            raise argument_error(
                "ml_client.environments.create_or_update()", "environment",
                f"must be an Environment(...); got {type(environment).__name__}",
            )  # fmt: skip
        if not environment.name:
            raise argument_error(
                "ml_client.environments.create_or_update()", "name",
                "a registered environment needs a name: Environment(name=..., image=...)",
            )  # fmt: skip
        document = environment._to_dict()
        for key in ("conda_file", "pip_file"):  # the caller's relative paths are from the cwd
            if isinstance(document.get(key), str):
                document[key] = os.path.abspath(document[key])
        if "path" in document.get("build", {}):
            document["build"]["path"] = os.path.abspath(document["build"]["path"])
        with tempfile.TemporaryDirectory(prefix="phalanx-environment-") as tmp:
            file = Path(tmp) / "environment.yml"
            file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
            created = self._environments.create(file, name=None, version=None)
        return _environment_of(created)

    def get(self, name: str, version: str | None = None, label: str | None = None) -> Environment:
        """One version (``label="latest"``, or no version: the newest)."""
        if version is not None and label is not None:
            raise argument_error("ml_client.environments.get()", "label",
                                 "give version or label, not both")  # fmt: skip
        if label not in (None, "latest"):
            raise argument_error("ml_client.environments.get()", "label",
                                 f"only 'latest' is a label here; got {label!r}")  # fmt: skip
        return _environment_of(self._environments.show(name, version or "latest"))

    def list(self, name: str | None = None) -> Iterator[Environment]:
        """Every registered version (of ``name``, when given)."""
        return iter([_environment_of(e) for e in self._environments.list_all(name)])


def _environment_of(shown: dict[str, Any]) -> Environment:
    """The entity of what ``environment show --json`` prints."""
    build = shown.get("build")
    return Environment(
        name=shown["name"],
        version=str(shown["version"]),
        image=shown.get("image"),
        conda_file=shown.get("conda_file"),
        pip_file=shown.get("pip_file"),
        build=BuildContext(path=build.get("path"), dockerfile_path=build.get("dockerfile_path"))
        if build
        else None,
        description=shown.get("description"),
        tags=shown.get("tags") or None,
    )


def _ray_request(name: str, address: str, azure: dict[str, Any], where: str) -> TargetCreate:
    """``compute create --type ray``'s request for an ``AmlCompute`` on a Ray cluster."""
    options = {
        "min_nodes": azure.get("min_instances"),
        "max_nodes": azure.get("max_instances"),
        "idle_time_before_scale_down": azure.get("idle_time_before_scale_down"),
        **{
            k: azure.get(k)
            for k in ("node_cpus", "node_gpus", "cpus_per_node", "token_env", "tier")
        },
    }
    if azure.get("gpus_per_node") is not None:
        options["gpus_per_node"] = azure["gpus_per_node"]
    try:
        return TargetCreate(name=name, type="ray", address=address, **options)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "compute"
        field = {"min_nodes": "min_instances", "max_nodes": "max_instances"}.get(field, field)
        raise argument_error(where, field, str(first["msg"])) from None
