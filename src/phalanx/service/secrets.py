"""A user's secrets, for their jobs' environment variables: set, list, delete.

A spec names a secret as ``${{secrets.NAME}}`` instead of pasting its value
(:mod:`phalanx.storage.usersecrets`). Each caller keeps its own: a member sets,
lists and deletes its secrets and nobody else's (an admin too: a secret is its
owner's, and a job gets its owner's); a viewer, who runs no job, keeps none.
Values go in and never come out: :meth:`Secrets.list_names` gives names only.
On this machine the workspace's own user keeps them; with ``PHALANX_SERVER``
set, the server's secrets file keeps them (:mod:`phalanx.client.secrets`).
"""

from __future__ import annotations

from typing import Protocol

from phalanx.errors import PhalanxError
from phalanx.service.access import LOCAL, Caller
from phalanx.storage.datastore_records import secrets_of
from phalanx.storage.usersecrets import UserSecrets, check_name
from phalanx.workspace import Workspace


class Secrets(Protocol):
    """The secret verbs, on this machine's workspace or a server's."""

    def set(self, name: str, value: str) -> None: ...
    def list_names(self) -> list[str]: ...
    def delete(self, name: str) -> None: ...


class WorkspaceSecrets:
    """The caller's own secrets in a workspace on this machine."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

    def _mine(self) -> UserSecrets:
        return UserSecrets(secrets_of(self.ws), self.caller.user)

    def set(self, name: str, value: str) -> None:
        """Keep ``value`` as the caller's secret ``name`` (replacing one of that name).

        Raises:
            PhalanxError: an invalid name, or an empty, too long or NUL-holding value.
            Forbidden: a viewer.
        """
        self.caller.require_member("secret set")
        self._mine().set(name, value)

    def list_names(self) -> list[str]:
        """The names of the caller's secrets (never a value)."""
        return self._mine().names()

    def delete(self, name: str) -> None:
        """Forget the caller's secret ``name``; jobs naming it fail to start from now on.

        Raises:
            PhalanxError: the caller has no such secret.
            Forbidden: a viewer.
        """
        self.caller.require_member("secret delete")
        if not self._mine().delete(check_name(name)):
            raise PhalanxError(f"no secret {name!r} of yours; `phalanx secret list` names them")
