"""Who is asking: a bearer token checked against the hashes in the workspace,
or a studio browser session (:mod:`phalanx.server.sessions`) made from one.

A missing, malformed, unknown or revoked token all get the same 401: nothing
tells a caller which part was wrong. A browser's request must also pass the
session module's CSRF check (403), with or without auth. What the caller may
do is not decided here: the route hands the :class:`~phalanx.service.access.Caller`
(user, the token's role, the server's limits) to the service it calls.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Depends, Request
from starlette.exceptions import HTTPException

from phalanx.server.sessions import UNAUTHORIZED, check_browser, session_of
from phalanx.server.settings import settings_of, workspace
from phalanx.service.access import Caller, Role
from phalanx.workspace import Workspace
from phalanx.workspace.tokens import PREFIX, identity_of, identity_of_hash, touch

_touched: dict[str, float] = {}
_TOUCH_EVERY_S = 60.0


def _touch_now_and_then(ws: Workspace, token: str) -> None:
    """Record the token's use at most once a minute: a write per request would
    make every request wait its turn for the database's write lock."""
    now = time.monotonic()
    if now - _touched.get(token, -_TOUCH_EVERY_S) >= _TOUCH_EVERY_S:
        _touched[token] = now
        touch(ws, token)


def caller(request: Request) -> Caller:
    """Who is behind the request: the token's user and role, with the server's limits.
    On a server without auth (loopback only) the caller has no name and is an admin.

    Raises:
        HTTPException: 401; 403 for a browser's request without the studio's CSRF value.
    """
    settings = settings_of(request)
    check_browser(request)
    if not settings.auth:
        request.state.caller = Caller(user=None, role=Role.ADMIN, server=settings.limits)
        return request.state.caller
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    identity = None
    if scheme.lower() == "bearer" and token.startswith(PREFIX):
        ws = workspace(settings)
        identity = identity_of(ws, token.strip())
        if identity is not None:
            _touch_now_and_then(ws, token.strip())
    elif (session := session_of(request)) is not None:
        # The token's hash, checked again each time: revoking it ends the session.
        identity = identity_of_hash(workspace(settings), session.token_hash)
    if identity is None:
        raise HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    # Kept for the error handlers: an error's message names the server's paths to an
    # admin only (phalanx.server.errors).
    request.state.caller = Caller(
        user=identity.user, role=Role(identity.role), server=settings.limits
    )
    return request.state.caller


# A route's parameter for its caller: ``who: User`` makes the route ask for a token.
User = Annotated[Caller, Depends(caller)]
