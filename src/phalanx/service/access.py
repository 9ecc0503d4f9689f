"""Who may do what: the caller every verb is asked by, and the checks the verbs make.

Every front end passes a :class:`Caller` to the service it calls: the CLI and
the SDK on this machine pass :data:`LOCAL` (the workspace's own user, who may
do anything to it); the server passes the user and role of the request's
token (:mod:`phalanx.server.auth`) and the limits it was started with. The
HTTP layer only authenticates; what a caller may do is decided here, once.

Roles (a token's, ``phalanx server token create --role``):

- ``viewer`` reads: jobs (records, specs, logs, metrics, files), models, data
  assets, datastores (never a credential), environments, compute targets and
  the queue.
- ``member`` also creates jobs, data assets, models, environments and
  datastores whose credentials arrive with them, and acts on what it owns:
  cancels or preempts its jobs, deletes its datastores, publishes new versions
  of the model, data and environment names it registered first.
- ``admin`` may do all of that to anyone's records, and what reaches into the
  server itself: API tokens, compute targets, datastores that name a folder of
  the server (``local``, within the roots the server was started with) or a
  variable of its environment (``--credential-env``, ``--key-env``,
  ``--secret-env``), an s3 datastore on the server's own ambient credentials
  (``--auth default``), and pruning built images.

There are no per-record shares: acting on another user's record takes an
admin. Records made before owners were kept (or on this machine, then served)
have no owner; only an admin acts on those.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.errors import Forbidden, PhalanxError

__all__ = ["LOCAL", "Caller", "Forbidden", "Role", "ServerLimits", "parse_role"]


class Role(str, enum.Enum):
    """What a token may do (see the module docstring)."""

    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"

    def __str__(self) -> str:
        return self.value


ROLES = tuple(r.value for r in Role)


DEFAULT_MAX_QUEUED = 100
"""The most jobs one user may have waiting on a server unless its admin says otherwise
(``--max-queued-per-user``): jobs queued and holding nothing yet, and sweeps not over (a
sweep's own trials are bounded by its ``max_concurrent_trials``)."""


@dataclass(frozen=True)
class ServerLimits:
    """What a server lets its callers reach on its own machine.

    Args:
        datastore_roots: The folders a ``local`` datastore may name (itself or
            inside one); none: no ``local`` datastore can be made through the server.
        max_queued: The most jobs one user may have waiting (``--max-queued-per-user``).
    """

    datastore_roots: tuple[Path, ...] = ()
    max_queued: int | None = DEFAULT_MAX_QUEUED
    """The most jobs one user may have waiting (see :data:`DEFAULT_MAX_QUEUED`); ``None``:
    no bound."""


@dataclass(frozen=True)
class Caller:
    """Who asks, and through what.

    Args:
        user: The token's user; ``None`` for this machine's own user (and on a
            server started without auth, which answers loopback only).
        role: What the caller may do.
        server: The limits of the server the request came through; ``None`` on
            this machine's own workspace, where nothing is confined.
    """

    user: str | None
    role: Role
    server: ServerLimits | None = field(default=None)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def through_server(self) -> bool:
        return self.server is not None

    def who(self) -> str:
        """The caller, for a message."""
        return f"{self.user} ({self.role})" if self.user else f"this caller ({self.role})"

    def require_member(self, action: str) -> None:
        """Refuse a viewer (read-only) ``action``.

        Raises:
            Forbidden: the caller is a viewer.
        """
        if self.role is Role.VIEWER:
            raise Forbidden(
                f"{action}: {self.who()} may only read; ask an admin for a member token "
                "(phalanx server token create --role member)"
            )

    def require_admin(self, action: str, why: str = "") -> None:
        """Refuse a non-admin ``action`` (``why``: what makes it an admin's).

        Raises:
            Forbidden: the caller is no admin.
        """
        if not self.is_admin:
            reason = f" ({why})" if why else ""
            raise Forbidden(f"{action}: only an admin may do this{reason}; {self.who()} is not one")

    def may_act_on(self, owner: str | None) -> bool:
        """Whether the caller may change a record ``owner`` owns."""
        return self.is_admin or (
            self.role is Role.MEMBER and self.user is not None and owner == self.user
        )

    def require_owner(self, action: str, what: str, owner: str | None) -> None:
        """Refuse ``action`` on ``what`` (e.g. ``job 'x'``) unless the caller owns it or
        is an admin.

        Raises:
            Forbidden: naming the owner and who may.
        """
        self.require_member(action)
        if not self.may_act_on(owner):
            whose = f"belongs to {owner}" if owner else "has no owner on record"
            raise Forbidden(f"{action}: {what} {whose}; only its owner or an admin may do this")


LOCAL = Caller(user=None, role=Role.ADMIN)
"""This machine's user on their own workspace (the CLI and SDK without a server)."""


def parse_role(value: str) -> Role:
    """The role named ``value``.

    Raises:
        PhalanxError: not a role.
    """
    try:
        return Role(value)
    except ValueError:
        raise PhalanxError(f"--role {value!r}: choose one of {', '.join(ROLES)}") from None
