"""The server's API tokens: create, list, revoke; an admin's verbs only.

A token opens the server with its role, so making or revoking one is an
admin's. On the server's own machine, ``phalanx server token …`` without
``PHALANX_SERVER`` acts on the workspace directly (its user is the admin of
its own files); with ``PHALANX_SERVER`` it goes through the server with an
admin's token (:mod:`phalanx.client.tokens`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

from phalanx.service.access import LOCAL, Caller, Role, parse_role
from phalanx.workspace import Workspace
from phalanx.workspace.tokens import TokenInfo, create_token, list_tokens, revoke_token

WHY = "a token opens the server with its role"


class Tokens(Protocol):
    """The token verbs, on this machine's workspace or a server's."""

    def create(
        self, user: str, name: str | None, role: str | None
    ) -> tuple[dict[str, Any], str]: ...
    def list_all(self) -> list[dict[str, Any]]: ...
    def revoke(self, name: str) -> None: ...


def token_json(info: TokenInfo) -> dict[str, Any]:
    """A token's record as the API shows it (never the token)."""
    return asdict(info)


class WorkspaceTokens:
    """The tokens of a workspace on this machine, as ``caller`` (an admin) may use them."""

    def __init__(self, ws: Workspace, caller: Caller = LOCAL) -> None:
        self.ws = ws
        self.caller = caller

    def create(self, user: str, name: str | None, role: str | None) -> tuple[dict[str, Any], str]:
        """A new token for ``user``: its record, and the token (shown only now).

        ``role`` defaults to ``admin`` while the workspace has no admin token (a single
        user's first), else ``member``.

        Raises:
            PhalanxError: an invalid user, name or role, or a taken name.
            Forbidden: the caller is no admin.
        """
        self.caller.require_admin("token create", WHY)
        if role is None:
            has_admin = any(t.role == Role.ADMIN.value for t in list_tokens(self.ws))
            role = Role.MEMBER.value if has_admin else Role.ADMIN.value
        info, token = create_token(self.ws, user, name, parse_role(role).value)
        return token_json(info), token

    def list_all(self) -> list[dict[str, Any]]:
        """Every token's name, user, role and times (never a token)."""
        self.caller.require_admin("token list", WHY)
        return [token_json(t) for t in list_tokens(self.ws)]

    def revoke(self, name: str) -> None:
        """Forget a token; the server refuses it from the next request on.

        Raises:
            PhalanxError: no token has that name.
            Forbidden: the caller is no admin.
        """
        self.caller.require_admin("token revoke", WHY)
        revoke_token(self.ws, name)
