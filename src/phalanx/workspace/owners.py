"""Who owns a record, and who may publish a new version of a registered name.

A model, data asset or environment *name* belongs to whoever registered its
first version: only they (or an admin) publish further versions, so nobody
else can move what ``@latest`` serves. Records from before owners were kept
have none, and only an admin publishes under those names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from phalanx.errors import Forbidden

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

    from phalanx.workspace.database import Tx

    Query = Callable[[str, Mapping[str, Any]], list[RowMapping]]

VERSIONED = {"models": "model", "data_assets": "data asset", "environments": "environment"}


def check_name_owner(query: Query, table: str, name: str, user: str | None, admin: bool) -> None:
    """Refuse a new version of ``name`` in ``table`` unless ``user`` owns the name, or
    is an admin, or the name is new.

    Args:
        query: Runs a read (``Workspace.query``, or ``Tx.all`` inside the write
            transaction that inserts, so nobody registers the name in between).

    Raises:
        Forbidden: naming the name's owner.
    """
    if admin:
        return
    first = query(
        f"SELECT owner FROM {table} WHERE name = :name ORDER BY seq LIMIT 1", {"name": name}
    )
    if first and first[0]["owner"] != user:
        owner = first[0]["owner"]
        whose = f"belongs to {owner}" if owner else "has no owner on record"
        raise Forbidden(
            f"{VERSIONED[table]} {name!r} {whose}: only its owner or an admin publishes new "
            "versions of it; register under another name"
        )


def check_publisher(tx: Tx, table: str, name: str, user: str | None, admin: bool) -> None:
    """:func:`check_name_owner` inside the write transaction that inserts the version."""
    check_name_owner(tx.all, table, name, user, admin)


def is_admin_user(tx: Tx, user: str | None) -> bool:
    """Whether ``user`` holds an admin token now (``None``: this machine's own user)."""
    if user is None:
        return True
    row = tx.first(
        "SELECT 1 AS found FROM tokens WHERE user_name = :user AND role = 'admin' LIMIT 1",
        {"user": user},
    )
    return row is not None
