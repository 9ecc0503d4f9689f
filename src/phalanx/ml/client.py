"""``MLClient``: the entry point of the SDK, as in Azure ML.

Which workspace it reaches is phalanx's choice, not the arguments': the
server ``PHALANX_SERVER`` (or ``phalanx login``) names when there is one, else
this machine's workspace (``PHALANX_HOME``). Azure ML's arguments are accepted
so a script runs unchanged: ``workspace_name`` and the others are kept as
attributes (a note says once which phalanx workspace serves the name), and the
credential is not used (a note says so once): a server's token comes from
``PHALANX_TOKEN`` or ``phalanx login``.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from phalanx.client import backends
from phalanx.client.config import ServerConfig
from phalanx.ml.entities.assets import Data, Environment, Model
from phalanx.ml.entities.job import Command
from phalanx.ml.entities.resources import AzureBlobDatastore, Compute
from phalanx.ml.entities.sweep_job import SweepJob
from phalanx.ml.errors import MLError, argument_error, unknown_keywords
from phalanx.ml.notes import note_once
from phalanx.ml.operations import (
    ComputeOperations,
    DataOperations,
    DatastoreOperations,
    EnvironmentOperations,
    JobOperations,
    ModelOperations,
)
from phalanx.ml.operations.pollers import DonePoller
from phalanx.ml.operations.workspaces import WorkspaceOperations

CONFIG_FILE = "config.json"

# Azure ML's MLClient keywords beyond the named ones (its transport, its cloud…): accepted
# and not used. Any other keyword is a typo.
_AZURE_KEYWORDS = (
    "credential", "subscription_id", "resource_group_name", "workspace_name", "registry_name",
    "cloud", "show_progress", "enable_telemetry", "user_agent", "connection_timeout",
    "read_timeout", "logging_enable", "retry_total", "transport", "credential_scopes",
    "api_version", "base_url",
)  # fmt: skip


class MLClient:
    """The jobs, data, models, datastores and compute of one phalanx workspace.

    Args:
        credential: Accepted and not used (e.g. ``DefaultAzureCredential()``,
            which contacts nothing until asked for a token; phalanx never asks).
        subscription_id: Kept as an attribute.
        resource_group_name: Kept as an attribute.
        workspace_name: Kept as an attribute; the workspace is the server's, or
            ``PHALANX_HOME``'s.
    """

    def __init__(
        self,
        credential: Any = None,
        subscription_id: str | None = None,
        resource_group_name: str | None = None,
        workspace_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        unknown_keywords("MLClient()", kwargs, _AZURE_KEYWORDS)
        self.subscription_id = subscription_id
        self.resource_group_name = resource_group_name
        self.workspace_name = workspace_name
        self._server: ServerConfig | None = backends.remote()
        if credential is not None:
            note_once(
                "credential",
                "phalanx.ml does not use the credential; a phalanx server's token comes from "
                "PHALANX_TOKEN or `phalanx login`",
            )
        if workspace_name is not None and workspace_name != self.workspace_folder_name:
            note_once(
                "workspace",
                f"workspace_name {workspace_name!r} is served by the phalanx workspace at "
                f"{self.where} (PHALANX_SERVER or PHALANX_HOME chooses it)",
            )

    @classmethod
    def from_config(
        cls,
        credential: Any = None,
        *,
        path: str | os.PathLike[str] | None = None,
        file_name: str | None = None,
        **kwargs: Any,
    ) -> MLClient:
        """A client from Azure ML's ``config.json`` (``subscription_id``, ``resource_group``,
        ``workspace_name``): ``path`` if it is a file, else ``file_name`` in the folder
        ``path`` or its ``.azureml/``; without ``path``, in the current folder, its
        ``.azureml/`` folder or a parent's, as Azure ML looks.

        Raises:
            MLError: no such file, or not a JSON object.
        """
        found = _find_config(None if path is None else Path(path), file_name or CONFIG_FILE)
        where = "MLClient.from_config()"
        try:
            config = json.loads(found.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MLError(f"cannot read {found}: {exc}", field="path", source=where) from None
        if not isinstance(config, dict):
            raise MLError(f"{found} is not a JSON object", field="path", source=where)
        return cls(
            credential,
            subscription_id=config.get("subscription_id"),
            resource_group_name=config.get("resource_group"),
            workspace_name=config.get("workspace_name"),
            **kwargs,
        )

    @property
    def where(self) -> str:
        """The server's URL, or this machine's workspace folder."""
        if self._server is not None:
            return self._server.url
        from phalanx.workspace.layout import phalanx_home

        return str(phalanx_home())

    @property
    def workspace_folder_name(self) -> str | None:
        """The name of ``PHALANX_HOME``'s folder (``None`` through a server)."""
        return None if self._server is not None else Path(self.where).name

    @cached_property
    def jobs(self) -> JobOperations:
        return JobOperations(
            backends.jobs_backend(),
            None if self._server is None else self._server.url,
            backends.targets,
        )

    @cached_property
    def data(self) -> DataOperations:
        return DataOperations(backends.data_assets())

    @cached_property
    def models(self) -> ModelOperations:
        return ModelOperations(backends.models())

    @cached_property
    def datastores(self) -> DatastoreOperations:
        return DatastoreOperations(backends.datastores())

    @cached_property
    def compute(self) -> ComputeOperations:
        return ComputeOperations(backends.targets())

    @cached_property
    def workspaces(self) -> WorkspaceOperations:
        from phalanx.workspace.layout import phalanx_home

        return WorkspaceOperations(self._server, phalanx_home())

    @cached_property
    def environments(self) -> EnvironmentOperations:
        return EnvironmentOperations(backends.environments())

    def create_or_update(self, entity: Any, **kwargs: Any) -> Any:
        """Create or update ``entity`` with the operations of its kind, as Azure ML's
        ``MLClient.create_or_update`` does: a job (``command(...)``), ``Data``, ``Model``,
        ``AzureBlobDatastore`` or ``AmlCompute``.

        Raises:
            MLError: an object of another kind (``Environment``: no registry yet).
        """
        return self.begin_create_or_update(entity, **kwargs).result()

    def begin_create_or_update(self, entity: Any, **kwargs: Any) -> DonePoller[Any]:
        """:meth:`create_or_update` as a poller (phalanx's is done when it returns)."""
        kind = self._kind(entity, "MLClient.create_or_update()")
        if kind == "jobs":  # the only kind with keywords of its own
            return DonePoller(self.jobs.create_or_update(entity, **kwargs))
        unknown_keywords("MLClient.create_or_update()", kwargs, ("entity",))
        if kind == "compute":
            return self.compute.begin_create_or_update(entity)
        return DonePoller(getattr(self, kind).create_or_update(entity))

    @staticmethod
    def _kind(entity: Any, where: str) -> str:
        kinds = ((Command, "jobs"), (SweepJob, "jobs"), (Data, "data"), (Model, "models"),
                 (AzureBlobDatastore, "datastores"), (Compute, "compute"),
                 (Environment, "environments"))  # fmt: skip
        for cls, kind in kinds:
            if isinstance(entity, cls):
                return kind
        raise argument_error(
            where, "entity", "must be a job (command(...)), Data, Model, AzureBlobDatastore or "
            f"AmlCompute; got {type(entity).__name__}",
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"MLClient(workspace={self.where!r})"


def _find_config(path: Path | None, file_name: str) -> Path:
    """``path`` itself (a file), or ``file_name`` in the folder ``path`` or its ``.azureml/``;
    without ``path``, in the current folder, its ``.azureml/`` or a parent's."""
    if path is not None and path.is_file():
        return path
    start = (path or Path.cwd()).absolute()
    folders = [start] if path is not None else [start, *start.parents]
    for folder in folders:
        for candidate in (folder / file_name, folder / ".azureml" / file_name):
            if candidate.is_file():
                return candidate
    where = f"{start} or its .azureml/ folder" + ("" if path is not None else ", nor in a parent")
    raise MLError(
        f"no {file_name} in {where}; write one with workspace_name (or construct MLClient(...))",
        field="path",
        source="MLClient.from_config()",
    )
