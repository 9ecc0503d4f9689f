"""Where every verb goes: this machine's workspace, or a phalanx server.

Each function returns an object with the same calls either way (a class of
:mod:`phalanx.service` on the workspace, or a ``Remote…`` class of
:mod:`phalanx.client`), so the CLI and the SDK (:mod:`phalanx.ml`) write each
verb once. The server is the one ``PHALANX_SERVER`` (or ``phalanx login``)
names; see :mod:`phalanx.client.config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from phalanx.client.config import ServerConfig, server_config

if TYPE_CHECKING:
    from phalanx.service.data import DataAssets
    from phalanx.service.datastores import Datastores
    from phalanx.service.environments import Environments
    from phalanx.service.jobs import Jobs
    from phalanx.service.models import Models
    from phalanx.service.secrets import Secrets
    from phalanx.service.targets import Targets
    from phalanx.service.tokens import Tokens


def remote() -> ServerConfig | None:
    """The server the verbs go to, or ``None`` for this machine's workspace."""
    return server_config()


def local_home() -> Path | None:
    """This machine's workspace folder (``PHALANX_HOME``) when the verbs go to it;
    ``None`` when a server answers them."""
    if server_config() is not None:
        return None
    from phalanx.workspace import phalanx_home

    return phalanx_home()


def jobs_backend() -> Jobs:
    """The server's jobs when one is configured, else this machine's."""
    config = server_config()
    if config is None:
        from phalanx.service.jobs import LocalJobs

        return LocalJobs()
    from phalanx.client.jobs import RemoteJobs

    return RemoteJobs(config)


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


def environments() -> Environments:
    config = server_config()
    if config is None:
        from phalanx.service.environments import WorkspaceEnvironments
        from phalanx.workspace import Workspace

        return WorkspaceEnvironments(Workspace())
    from phalanx.client.environments import RemoteEnvironments

    return RemoteEnvironments(config)


def tokens() -> Tokens:
    """The server's API tokens (an admin's token) when one is configured, else the
    workspace's own (``phalanx server token …`` on the server's machine)."""
    config = server_config()
    if config is None:
        from phalanx.service.tokens import WorkspaceTokens
        from phalanx.workspace import Workspace
        from phalanx.workspace.layout import server_home

        # The workspace `phalanx server start` owns by default, not always this user's own.
        return WorkspaceTokens(Workspace(server_home()))
    from phalanx.client.tokens import RemoteTokens

    return RemoteTokens(config)


def secrets() -> Secrets:
    """The caller's secrets on the server when one is configured, else this machine's."""
    config = server_config()
    if config is None:
        from phalanx.service.secrets import WorkspaceSecrets
        from phalanx.workspace import Workspace

        return WorkspaceSecrets(Workspace())
    from phalanx.client.secrets import RemoteSecrets

    return RemoteSecrets(config)
