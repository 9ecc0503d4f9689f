"""Browser sessions and CSRF: how the studio's pages call the API.

A browser cannot send a bearer header on its own, so the sign-in page trades
the user's API token for a session: a random id in an HttpOnly,
``SameSite=Strict`` cookie (``Secure`` under TLS). The server keeps, in its
memory only, the id → the token's SHA-256 hash (never the token) and a CSRF
value; the token's revocation ends the session on its next request, and a
restarted server forgets every session (users sign in again).

CSRF: a cookie is sent by the browser whatever page asks, so every request
that changes something (not GET/HEAD/OPTIONS) and comes from a browser (a
session cookie, or an ``Origin`` / ``Sec-Fetch-Site`` header) must carry the
page's CSRF value in the ``X-Phalanx-CSRF`` header: a page of another site
can neither read that value nor set a custom header without a CORS
permission this server never grants. A bearer-token request (the CLI, the
SDK) needs none. On a server without auth (loopback only) the CSRF value is
one per server process, and a browser's request must name a loopback host
(``Host``), which a DNS-rebinding page cannot.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from phalanx.server.settings import settings_of, workspace

COOKIE = "phalanx_session"
CSRF_HEADER = "x-phalanx-csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A session unused this long ends; a used one is renewed.
IDLE_S = 12 * 3600.0
FORBIDDEN = "refused: a request from a browser needs the studio page's CSRF header"

router = APIRouter(prefix="/api/v1/session", tags=["server"])


@dataclass
class Session:
    user: str
    token_hash: str
    csrf: str
    last_used: float


@dataclass
class Sessions:
    """The sessions of one server process (in memory)."""

    loopback_csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    """The CSRF value of a server without auth, where there are no sessions."""
    _by_id: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, user: str, token_hash: str) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(user, token_hash, secrets.token_urlsafe(32), time.time())
        with self._lock:
            now = time.time()
            for old in [k for k, s in self._by_id.items() if now - s.last_used > IDLE_S]:
                del self._by_id[old]
            self._by_id[sid] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is None or time.time() - session.last_used > IDLE_S:
                self._by_id.pop(sid, None)
                return None
            session.last_used = time.time()
            return session

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


def sessions_of(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


def session_of(request: Request) -> Session | None:
    """The request's browser session, if its cookie names a live one."""
    return sessions_of(request).get(request.cookies.get(COOKIE))


def csrf_value(request: Request) -> str | None:
    """The CSRF value a page served to this request embeds (``None``: not signed in)."""
    if not settings_of(request).auth:
        return sessions_of(request).loopback_csrf
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
    from phalanx.server.auth import UNAUTHORIZED
    from phalanx.workspace.tokens import token_hash, user_of_hash

    if cross_site(request):
        raise HTTPException(403, "refused: sign in from the studio's own page")
    settings = settings_of(request)
    if not settings.auth:
        return {"user": None, "auth": False}
    digest = token_hash(body.token.strip())
    user = user_of_hash(workspace(settings), digest)
    if user is None:
        raise HTTPException(401, UNAUTHORIZED)
    sid, _ = sessions_of(request).open(user, digest)
    response.set_cookie(
        COOKIE,
        sid,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
        max_age=int(IDLE_S),
    )
    return {"user": user, "auth": True}


@router.delete("")
def sign_out(request: Request, response: Response) -> dict[str, Any]:
    """End this browser's session."""
    check_browser(request)
    sessions_of(request).close(request.cookies.get(COOKIE))
    response.delete_cookie(COOKIE, path="/")
    return {"signed_out": True}
