"""Browser sessions and CSRF: how the studio's pages call the API.

A browser cannot send a bearer header on its own, so the sign-in page trades
the user's API token for a session: an HttpOnly, ``SameSite=Strict`` cookie
(``Secure`` under TLS) holding the token's SHA-256 hash (never the token) and
when it was issued, signed with a key kept in the workspace
(``server/session.key``, 0600). Every serving process of the server (and a
restarted server) reads the same key, so any of them knows the session; the
token's hash is checked against the tokens on every request, so revoking the
token ends the session, and a session ends :data:`LIFETIME_S` after sign-in.
Signing out removes the cookie from the browser.

CSRF: a cookie is sent by the browser whatever page asks, so every request
that changes something (not GET/HEAD/OPTIONS) and comes from a browser (a
session cookie, or an ``Origin`` / ``Sec-Fetch-Site`` header) must carry the
page's CSRF value in the ``X-Phalanx-CSRF`` header: a page of another site
can neither read that value nor set a custom header without a CORS
permission this server never grants. The value is derived from the session
(with auth) or from the key alone (without). A bearer-token request (the
CLI, the SDK) needs none. On a server without auth (loopback only) a
browser's request must also name a loopback host (``Host``), which a
DNS-rebinding page cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from phalanx.server.settings import settings_of, workspace

COOKIE = "phalanx_session"
CSRF_HEADER = "x-phalanx-csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A session ends this long after sign-in.
LIFETIME_S = 12 * 3600
FORBIDDEN = "refused: a request from a browser needs the studio page's CSRF header"
# The one answer to a missing, malformed, unknown or revoked token (phalanx.server.auth).
UNAUTHORIZED = "a valid API token is required (Authorization: Bearer <token>; PHALANX_TOKEN)"
KEY_BYTES = 32

router = APIRouter(prefix="/api/v1/session", tags=["server"])


@dataclass(frozen=True)
class Session:
    token_hash: str
    issued: int
    csrf: str


_keys: dict[Path, bytes] = {}


def session_key(home: Path) -> bytes:
    """The workspace's signing key, made (0600) by the first process that asks."""
    path = home / "server" / "session.key"
    if path in _keys:
        return _keys[path]
    key = b""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        deadline = time.monotonic() + 5
        while len(key := path.read_bytes()) < KEY_BYTES and time.monotonic() < deadline:
            time.sleep(0.01)  # another process is writing it
    else:
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
    if len(key) < KEY_BYTES:
        raise RuntimeError(f"{path} holds no key; remove it and restart the server")
    _keys[path] = key
    return key


def _sign(request: Request, what: str) -> str:
    key = session_key(settings_of(request).home)
    return hmac.new(key, what.encode(), hashlib.sha256).hexdigest()


def _session_cookie(request: Request, token_hash: str) -> str:
    payload = f"{token_hash}.{int(time.time())}"
    return f"{payload}.{_sign(request, 'session|' + payload)}"


def session_of(request: Request) -> Session | None:
    """The request's browser session, if its cookie is one this server signed, still
    within its lifetime."""
    value = request.cookies.get(COOKIE, "")
    payload, _, signature = value.rpartition(".")
    token_hash, _, issued = payload.partition(".")
    if not (signature and token_hash and issued.isdigit()):
        return None
    if not hmac.compare_digest(signature, _sign(request, "session|" + payload)):
        return None
    if not 0 <= time.time() - int(issued) <= LIFETIME_S:
        return None
    return Session(token_hash, int(issued), _sign(request, "csrf|" + payload)[:43])


def csrf_value(request: Request) -> str | None:
    """The CSRF value a page served to this request embeds (``None``: not signed in)."""
    if not settings_of(request).auth:
        return _sign(request, "loopback")[:43]
    session = session_of(request)
    return None if session is None else session.csrf


def from_browser(request: Request) -> bool:
    headers = request.headers
    return COOKIE in request.cookies or "origin" in headers or "sec-fetch-site" in headers


def loopback_host(request: Request) -> bool:
    """``Host`` names this machine: what a page of a DNS-rebinding site cannot claim."""
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.partition("]")[0] + "]"
    return name in ("localhost", "[::1]") or name.startswith("127.")


def cross_site(request: Request) -> bool:
    """The request comes from a page of another site (``Sec-Fetch-Site``, which every
    current browser sends; else an ``Origin`` that is not this ``Host``)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    return origin is not None and origin.split("://", 1)[-1] != request.headers.get("host")


def check_browser(request: Request) -> None:
    """Refuse a browser's request that a page of another site could have made.

    Raises:
        HTTPException: 403.
    """
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        return
    if not from_browser(request):
        return
    settings = settings_of(request)
    if not settings.auth and not loopback_host(request):
        raise HTTPException(403, "refused: this server without auth answers loopback names only")
    if request.method in SAFE_METHODS:
        return
    expected = csrf_value(request)
    given = request.headers.get(CSRF_HEADER, "")
    if expected is None or not secrets.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(403, FORBIDDEN)


class SignIn(BaseModel):
    token: str = Field(max_length=200)


@router.post("")
def sign_in(body: SignIn, request: Request, response: Response) -> dict[str, Any]:
    """Trade an API token for a browser session (an HttpOnly cookie)."""
    from phalanx.workspace.tokens import identity_of_hash, token_hash

    if cross_site(request):
        raise HTTPException(403, "refused: sign in from the studio's own page")
    settings = settings_of(request)
    if not settings.auth:
        return {"user": None, "auth": False}
    digest = token_hash(body.token.strip())
    identity = identity_of_hash(workspace(settings), digest)
    if identity is None:
        raise HTTPException(401, UNAUTHORIZED)
    response.set_cookie(
        COOKIE,
        _session_cookie(request, digest),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
        max_age=LIFETIME_S,
    )
    return {"user": identity.user, "role": identity.role, "auth": True}


@router.delete("")
def sign_out(request: Request, response: Response) -> dict[str, Any]:
    """End this browser's session (the cookie is removed from the browser)."""
    check_browser(request)
    response.delete_cookie(COOKIE, path="/")
    return {"signed_out": True}
