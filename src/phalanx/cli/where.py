"""Where the verbs other than ``job`` go: this machine's workspace, or a phalanx server.

Each returns an object with the same calls either way (a ``Workspace…`` class of
:mod:`phalanx.service`, or a ``Remote…`` class of :mod:`phalanx.client`), so
every command is written once. The server is the one ``PHALANX_SERVER`` (or
``phalanx login``) names; see :mod:`phalanx.client.config`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from phalanx.client.config import ServerConfig, server_config

if TYPE_CHECKING:
    from phalanx.service.data import DataAssets
    from phalanx.service.datastores import Datastores
    from phalanx.service.models import Models
    from phalanx.service.targets import Targets


def remote() -> ServerConfig | None:
    """The server the CLI talks to, or ``None`` for this machine's workspace."""
    return server_config()


def datastores() -> Datastores:
    config = server_config()
    if config is None:
        from phalanx.service.datastores import WorkspaceDatastores
        from phalanx.workspace import Workspace

        return WorkspaceDatastores(Workspace())
    from phalanx.client.datastores import RemoteDatastores

    return RemoteDatastores(config)


def data_assets() -> DataAssets:
    config = server_config()
    if config is None:
        from phalanx.service.data import WorkspaceData
        from phalanx.workspace import Workspace

        return WorkspaceData(Workspace())
    from phalanx.client.data import RemoteData

    return RemoteData(config)


def models() -> Models:
    config = server_config()
    if config is None:
        from phalanx.service.models import WorkspaceModels
        from phalanx.workspace import Workspace

        return WorkspaceModels(Workspace())
    from phalanx.client.models import RemoteModels

    return RemoteModels(config)


def targets() -> Targets:
    config = server_config()
    if config is None:
        from phalanx.service.targets import WorkspaceTargets
        from phalanx.workspace import Workspace

        return WorkspaceTargets(Workspace())
    from phalanx.client.targets import RemoteTargets

    return RemoteTargets(config)
