"""The server's edge: what every request may hold, checked before any route runs.

- **Characters.** No control character (:mod:`phalanx.limits`: NUL, BEL, ESC…;
  tabs and line breaks are fine) and no lone surrogate in the URL's path, its
  query (``?experiment=``) or any key or string of a JSON body. PostgreSQL
  cannot store NUL in text (it surfaced as a bare 500 on names, filters and
  paths), and none of them belongs in a name, a filter or a spec.
- **Body size.** At most ``ServerSettings.max_body`` bytes (4 MiB by default:
  a job spec of 1 Mi characters, JSON-escaped, fits), refused from the
  ``Content-Length`` before reading or, without one, as soon as it is passed.
  ``PUT /api/v1/uploads`` and MLflow's artifact uploads keep their own limit,
  ``--max-upload``.

A refusal is the API's one line: ``{"error": "bad request: …"}`` with 400 (413
for size). JSON nested too deeply to read is left to the route, which answers
it 400 too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from phalanx.limits import character_problem, clip

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

UPLOAD_PATH = "/api/v1/uploads"
"""The route whose body is an archive, bounded by ``--max-upload`` instead."""
ARTIFACTS_PATH = "/api/2.0/mlflow-artifacts/artifacts/"
"""MLflow's artifact uploads, files of any kind: bounded by ``--max-upload`` too."""


class BoundsMiddleware:
    """Refuses a request whose URL or JSON body holds a control character, or whose
    body is larger than ``max_body`` bytes (see the module docstring)."""

    def __init__(self, app: App, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = url_problem(scope)
        if problem is not None:
            await _refuse(send, 400, f"bad request: {problem}")
            return
        if not _has_body(scope) or scope["path"] == UPLOAD_PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "PUT" and scope["path"].startswith(ARTIFACTS_PATH):
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await _refuse(send, 413, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _refuse(send, 413, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        kind = _header(scope, b"content-type")
        if body and (kind is None or "json" in kind):  # FastAPI reads JSON without a type too
            problem = json_problem(body)
            if problem is not None:
                await _refuse(send, 400, f"bad request: {problem}")
                return
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self) -> str:
        return (
            f"request refused: the body is larger than {self.max_body} bytes; send files "
            "as an upload (the CLI does) or put data in a datastore"
        )


def url_problem(scope: Scope) -> str | None:
    """A refused character in the request's path or query, named; ``None`` if none."""
    problem = character_problem(str(scope.get("path", "")))
    if problem is not None:
        return f"the URL's path holds {problem}"
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    for key, value in parse_qsl(query, keep_blank_values=True):
        for text in (key, value):
            problem = character_problem(text)
            if problem is not None:
                return f"query parameter {clip(key)!r} holds {problem}"
    return None


def json_problem(body: bytes) -> str | None:
    """A refused character in any key or string of a JSON ``body``, with where it is
    (``spec``, ``tags.k``); ``None`` if none, or if the body is not JSON the route
    can read (the route answers that)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:  # no recursion: a deep document must not overflow the stack
        where, value = stack.pop()
        if isinstance(value, str):
            problem = character_problem(value)
            if problem is not None:
                return f"{where or 'body'}: {problem}"
        elif isinstance(value, dict):
            for key, item in value.items():
                inner = f"{where}.{clip(key, 40)}" if where else clip(key, 40)
                problem = character_problem(key)
                if problem is not None:
                    return f"{inner}: the key holds {problem}"
                stack.append((inner, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
    return None


def _has_body(scope: Scope) -> bool:
    return scope.get("method") in ("POST", "PUT", "PATCH", "DELETE") or any(
        name in (b"content-length", b"transfer-encoding") for name, _ in scope.get("headers", ())
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read already, then whatever the client sends next (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
