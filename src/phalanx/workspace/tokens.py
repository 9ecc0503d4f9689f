"""API tokens of the server: made once, shown once, kept only as a SHA-256 hash.

A token is 32 random bytes (``phx_`` + URL-safe base64), so a plain hash is
enough: nobody can guess a preimage, and the database never holds a value that
opens the server.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from phalanx.errors import PhalanxError
from phalanx.workspace.names import NAME_RE
from phalanx.workspace.store import Workspace

PREFIX = "phx_"


ROLES = ("admin", "member", "viewer")
"""What a token may do; :mod:`phalanx.service.access` says what each means."""


@dataclass(frozen=True)
class TokenInfo:
    name: str
    user: str
    created_at: float
    last_used_at: float | None
    role: str = "admin"


@dataclass(frozen=True)
class Identity:
    """Whose a token is, and its role."""

    user: str
    role: str


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    ws: Workspace, user: str, name: str | None = None, role: str = "member"
) -> tuple[TokenInfo, str]:
    """A new token for ``user`` with ``role``; returns its record and the token itself
    (shown only now).

    Raises:
        PhalanxError: the user, token name or role is invalid, or the name is taken.
    """
    if role not in ROLES:
        raise PhalanxError(f"--role {role!r}: choose one of {', '.join(ROLES)}")
    for label, value in (("user", user), ("token name", name)):
        if value is not None and not NAME_RE.fullmatch(value):
            raise PhalanxError(
                f"{label} {value!r} is invalid: use letters, digits, '_' and '-', "
                "starting with a letter or digit"
            )
    from sqlalchemy.exc import IntegrityError  # loaded where the database is written

    token = PREFIX + secrets.token_urlsafe(32)
    name = name or f"{user}-{secrets.token_hex(3)}"
    now = time.time()
    try:
        with ws.transaction() as tx:
            tx.execute(
                "INSERT INTO tokens (name, user_name, hash, created_at, role)"
                " VALUES (:name, :user, :hash, :now, :role)",
                {"name": name, "user": user, "hash": token_hash(token), "now": now, "role": role},
            )
    except IntegrityError:
        raise PhalanxError(
            f"a token named {name!r} already exists; choose another --name "
            "or revoke it first (phalanx server token revoke)"
        ) from None
    return TokenInfo(name, user, now, None, role), token


def identity_of(ws: Workspace, token: str) -> Identity | None:
    """Whose a token is, or ``None`` for an unknown or revoked one."""
    return identity_of_hash(ws, token_hash(token))


def identity_of_hash(ws: Workspace, digest: str) -> Identity | None:
    """Whose the token with this hash is (a browser session keeps only the hash)."""
    rows = ws.query("SELECT user_name, role FROM tokens WHERE hash = :hash", {"hash": digest})
    if not rows:
        return None
    return Identity(str(rows[0]["user_name"]), str(rows[0]["role"]))


def touch(ws: Workspace, token: str) -> None:
    """Record when a token was last used (at most a write a minute per token)."""
    now = time.time()
    with ws.transaction() as tx:
        tx.execute(
            "UPDATE tokens SET last_used_at = :now WHERE hash = :hash "
            "AND (last_used_at IS NULL OR last_used_at < :before)",
            {"now": now, "hash": token_hash(token), "before": now - 60},
        )


def list_tokens(ws: Workspace) -> list[TokenInfo]:
    rows = ws.query("SELECT * FROM tokens ORDER BY created_at")
    return [
        TokenInfo(r["name"], r["user_name"], r["created_at"], r["last_used_at"], r["role"])
        for r in rows
    ]


def revoke_token(ws: Workspace, name: str) -> None:
    """Forget a token; the server refuses it from the next request on.

    Raises:
        PhalanxError: no token has that name.
    """
    with ws.transaction() as tx:
        gone = tx.execute("DELETE FROM tokens WHERE name = :name", {"name": name}).rowcount
    if not gone:
        raise PhalanxError(f"no token named {name!r}; `phalanx server token list` shows them")
