"""``ml_client.workspaces``: the one workspace a client reaches, in Azure ML's shape.

Azure ML users point MLflow at their workspace with
``mlflow.set_tracking_uri(ml_client.workspaces.get(name).mlflow_tracking_uri)``;
the same line works here. The URI is the server's URL (it serves MLflow's API
under ``/api/2.0/mlflow``), or, for this machine's workspace, the address of
``phalanx studio``, which serves the same API while it runs. Through a server,
``get()`` also sets ``MLFLOW_TRACKING_TOKEN`` to the client's token in this
process (unless set), as Azure's MLflow plug-in brings the workspace's
credential along.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from phalanx.client.config import ServerConfig
from phalanx.studio.urls import STUDIO_PORT


@dataclass(frozen=True)
class Workspace:
    """A phalanx workspace, with the fields of Azure ML's ``Workspace`` that apply."""

    name: str
    mlflow_tracking_uri: str
    description: str = ""


class WorkspaceOperations:
    def __init__(self, server: ServerConfig | None, home: Path) -> None:
        self._server, self._home = server, home

    def get(self, name: str | None = None) -> Workspace:
        """The client's workspace (``name`` is Azure ML's; any name gives the one there is)."""
        if self._server is not None:
            if self._server.token and "MLFLOW_TRACKING_TOKEN" not in os.environ:
                os.environ["MLFLOW_TRACKING_TOKEN"] = self._server.token
            return Workspace(
                name=name or self._server.url,
                mlflow_tracking_uri=self._server.url,
                description=f"the workspace served by {self._server.url}",
            )
        return Workspace(
            name=name or self._home.name,
            mlflow_tracking_uri=f"http://127.0.0.1:{STUDIO_PORT}",
            description=f"this machine's workspace at {self._home} "
            "(its MLflow API is served while `phalanx studio` runs)",
        )

    def list(self) -> Iterator[Workspace]:
        yield self.get()
