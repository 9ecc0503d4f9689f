"""Storage failures as one-line errors that name the object and the fix."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from phalanx.errors import PhalanxError

# Error codes Azure Storage and S3 answer when the credential is wrong or lacks a right.
_DENIED_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationResourceTypeMismatch",
        "InsufficientAccountPermissions",
        "NoAuthenticationInformation",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "PublicAccessNotPermitted",
    }
)
_UNREACHABLE = ("ServiceRequestError", "ClientConnectorError", "EndpointConnectionError")


# Raised before any request when a credential cannot be used at all.
_BAD_CREDENTIAL = frozenset(
    {"ClientAuthenticationError", "AzureSigningError", "NoCredentialsError",
     "PartialCredentialsError"}
)  # fmt: skip


def denied(exc: BaseException) -> bool:
    """Whether ``exc`` says the store refused the credential (or it cannot be used)."""
    if isinstance(exc, PermissionError) or type(exc).__name__ in _BAD_CREDENTIAL:
        return True
    code = getattr(exc, "error_code", None) or getattr(exc, "code", None)
    status = getattr(exc, "status_code", None)
    return str(code) in _DENIED_CODES or status in (401, 403)


@contextmanager
def storage_errors(url: str, *, action: str = "read") -> Iterator[None]:
    """Turn a store's exception while acting on ``url`` into a :class:`PhalanxError`.

    Anything not recognised passes through unchanged (it is a bug or needs its traceback).
    """
    try:
        yield
    except PhalanxError:
        raise
    except FileNotFoundError as exc:
        raise PhalanxError(f"{url} not found; check the path, the datastore or the asset") from exc
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            raise PhalanxError(
                f"{url}: a name in it is longer than the file system allows; check the path"
            ) from exc
        if denied(exc):
            code = getattr(exc, "error_code", None) or type(exc).__name__
            code = getattr(code, "value", code)
            raise PhalanxError(
                f"cannot {action} {url}: access denied ({code}); check the datastore's "
                "credentials (`phalanx datastore show`) and their permissions"
            ) from exc
        chain = [type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e]
        if isinstance(exc, ConnectionError) or any(n in _UNREACHABLE for n in chain):
            raise PhalanxError(
                f"cannot {action} {url}: the storage endpoint cannot be reached; check its "
                "address and the network"
            ) from exc
        raise


def check_reachable(url: str, *, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at ``url``'s host and port.

    The Azure SDK retries a refused connection for over a minute; a user
    registering a datastore with a typo in its endpoint should hear at once.

    Raises:
        PhalanxError: the host does not resolve or refuses the connection.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    check_port(parts.hostname, port, f"for {url}", "check the endpoint and the network", timeout)


def check_port(host: str, port: int, what: str, fix: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing accepts a TCP connection at ``host:port``.

    Raises:
        PhalanxError: ``cannot reach HOST:PORT {what} (why); {fix}``.
    """
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise PhalanxError(
            f"cannot reach {host}:{port} {what} ({exc.strerror or exc}); {fix}"
        ) from exc
