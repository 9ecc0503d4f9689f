"""Requests to a phalanx server, with its errors turned back into phalanx's.

A 4xx carries the one line the CLI would print (``{"error": …}``) and becomes
a :class:`~phalanx.errors.PhalanxError` with that line. Requests that are safe
to repeat (reads, cancel, preempt) are retried while the server is
unreachable or restarting, or answers 503 because its database is (``database
unavailable, retrying``, said once on stderr), for up to :data:`RETRY_S`; a
create is retried only when it never reached the server. A server that has not
answered this process yet is not waited for: a connection it refuses (no server
there, a wrong ``PHALANX_SERVER``) fails at once with the fix.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from phalanx import __version__
from phalanx.client.config import SERVER_ENV, ServerConfig
from phalanx.errors import PhalanxError

RETRY_ENV = "PHALANX_SERVER_RETRY_S"
RETRY_S = 120.0
DATABASE_UNAVAILABLE = "database unavailable, retrying"
"""What a server answers (503) while its database cannot be reached."""


_answered: set[str] = set()
"""The servers that answered this process: one that stops answering is restarting."""


class ServerSpecError(PhalanxError):
    """The server found the spec invalid: every problem, one line each."""

    every_problem = False

    def __init__(self, first: str, problems: list[str]) -> None:
        super().__init__(first)
        self.problems = problems

    def lines(self) -> list[str]:
        return list(self.problems) if self.every_problem else [str(self)]


class NotFound(PhalanxError):
    """The server answered 404: no such job, path or record."""


class ServerClient:
    def __init__(self, config: ServerConfig, *, timeout: float = 60.0) -> None:
        self.url = config.url
        headers = {"user-agent": f"phalanx/{__version__}"}
        if config.token:
            headers["authorization"] = f"Bearer {config.token}"
        self._http = httpx.Client(base_url=config.url, headers=headers, timeout=timeout)
        self._retry_s = float(os.environ.get(RETRY_ENV, RETRY_S))
        self._warned: str | None = None

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool = True,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """The decoded JSON answer of ``method path``.

        Raises:
            PhalanxError: the server's 4xx message, or it cannot be reached.
        """
        deadline = time.monotonic() + self._retry_s
        delay = 0.2
        while True:
            try:
                if timeout is not None:
                    kwargs["timeout"] = timeout
                response = self._http.request(method, "/api/v1" + path, **kwargs)
            except httpx.InvalidURL as exc:
                raise _too_long(exc) from None
            except httpx.TransportError as exc:
                sent = not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
                if (sent and not idempotent) or time.monotonic() > deadline:
                    raise self._unreachable(exc) from None
                self._check_answered(exc)
                self._wait(delay)
                delay = min(delay * 2, 2.0)
                continue
            _answered.add(self.url)
            if response.status_code >= 500 and idempotent and time.monotonic() < deadline:
                self._wait(delay, _why(response))
                delay = min(delay * 2, 2.0)
                continue
            if self._warned:
                print("connected again", file=sys.stderr, flush=True)
                self._warned = None
            return self._answer(response, idempotent=idempotent)

    @contextmanager
    def stream(self, path: str, *, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """``GET path`` whose body is read in chunks: yields an object with ``read(n)``.

        Retried like :meth:`request` until the server answers; a 4xx raises as there.

        Raises:
            PhalanxError: the server's 4xx message, or it cannot be reached.
        """
        deadline = time.monotonic() + self._retry_s
        delay = 0.2
        started = False
        while True:
            why = "unreachable"
            try:
                with self._http.stream("GET", "/api/v1" + path, params=params) as response:
                    _answered.add(self.url)
                    if response.status_code >= 500 and time.monotonic() < deadline:
                        response.read()
                        why = _why(response)  # retried below, outside the open response
                    elif not response.is_success:
                        response.read()
                        self._answer(response)
                    else:
                        started = True
                        yield _Chunks(response.iter_bytes(1 << 20))
                        return
            except httpx.InvalidURL as exc:
                raise _too_long(exc) from None
            except httpx.TransportError as exc:
                if started or time.monotonic() > deadline:
                    raise self._unreachable(exc) from None
                self._check_answered(exc)
            self._wait(delay, why)
            delay = min(delay * 2, 2.0)

    def _unreachable(self, exc: httpx.TransportError) -> PhalanxError:
        return PhalanxError(
            f"cannot reach the phalanx server at {self.url} ({SERVER_ENV}): "
            f"{exc or type(exc).__name__}; is it running?"
        )

    def _check_answered(self, exc: httpx.TransportError) -> None:
        """Refuse to wait for a server that never answered this process: no server
        listens there (not started, or a wrong URL), and waiting would hide that.

        Raises:
            PhalanxError: the connection failed, and the server never answered.
        """
        if self.url in _answered or not isinstance(exc, httpx.ConnectError):
            return
        raise PhalanxError(
            f"cannot reach the phalanx server at {self.url} ({SERVER_ENV}): "
            f"{exc or type(exc).__name__}; check that it runs (`phalanx server start` on its "
            f"machine) and that {SERVER_ENV} (or `phalanx login`) gives the URL it listens on"
        )

    def _wait(self, delay: float, why: str = "unreachable") -> None:
        """Say once per cause why the request waits, then wait ``delay``."""
        if self._warned != why:
            if why == DATABASE_UNAVAILABLE:
                line = f"server {self.url}: {DATABASE_UNAVAILABLE}…"
            else:
                line = f"server {self.url} {why}; retrying…"
            print(line, file=sys.stderr, flush=True)
            self._warned = why
        time.sleep(delay)

    def _answer(self, response: httpx.Response, *, idempotent: bool = True) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success:
            return body
        message = body.get("error") if isinstance(body, dict) else None
        if response.status_code == 401:
            raise PhalanxError(
                f"the server at {self.url} wants a valid API token; set PHALANX_TOKEN or run "
                "phalanx login (an admin makes one with phalanx server token create)"
            )
        if message is None:
            raise PhalanxError(
                f"the server at {self.url} answered {response.status_code} "
                f"{response.reason_phrase}; is {SERVER_ENV} a phalanx server?"
            )
        if response.status_code == 422 and isinstance(body.get("problems"), list):
            raise ServerSpecError(str(message), [str(p) for p in body["problems"]])
        if response.status_code == 404:
            raise NotFound(str(message))
        if response.status_code == 503 and message == DATABASE_UNAVAILABLE:
            if not idempotent:
                raise PhalanxError(
                    f"the phalanx server at {self.url} answered: database unavailable; a "
                    "create is never sent twice, so run the command again once it is back"
                )
            raise PhalanxError(
                f"the phalanx server at {self.url} answered {DATABASE_UNAVAILABLE!r} for "
                f"{self._retry_s:.0f} s ({RETRY_ENV}); its database is still away, try again later"
            )
        raise PhalanxError(str(message))


def _too_long(exc: httpx.InvalidURL) -> PhalanxError:
    """A request whose URL cannot be sent: a name in it is far longer than any record's."""
    return PhalanxError(f"cannot send the request ({exc}): a name given is too long; check it")


def _why(response: httpx.Response) -> str:
    """Why a 5xx answer is retried: the server's database, or the server itself."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("error") == DATABASE_UNAVAILABLE:
        return DATABASE_UNAVAILABLE
    return "unreachable"


class _Chunks:
    """A response body as a file-like ``read()``: each call the next chunk, ``b""`` at the end."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    def read(self, size: int = -1, /) -> bytes:
        return next(self._chunks, b"")
