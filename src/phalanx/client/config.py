"""Which server the CLI talks to: ``PHALANX_SERVER`` (and ``PHALANX_TOKEN``), or
the file ``phalanx login`` wrote.

Without either, the CLI works on the workspace of this machine, as always.
``PHALANX_SERVER=local`` forces that even after a ``phalanx login``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError

SERVER_ENV = "PHALANX_SERVER"
TOKEN_ENV = "PHALANX_TOKEN"


@dataclass(frozen=True)
class ServerConfig:
    url: str
    token: str | None


def login_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "phalanx" / "server.json"


def check_url(url: str, where: str) -> str:
    """``url`` without a trailing slash.

    Raises:
        PhalanxError: not an http(s) URL.
    """
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or url[-3:] == "://":
        raise PhalanxError(f"{where}: {url!r} is not a server URL; give http(s)://host:port")
    return url


def server_config() -> ServerConfig | None:
    """The server to use, or ``None`` for this machine's workspace.

    Raises:
        PhalanxError: a malformed ``PHALANX_SERVER`` or login file.
    """
    env = os.environ.get(SERVER_ENV, "").strip()
    if env == "local":
        return None
    if env:
        return ServerConfig(check_url(env, SERVER_ENV), os.environ.get(TOKEN_ENV) or None)
    path = login_file()
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        url = check_url(str(saved["server"]), str(path))
    except (ValueError, KeyError, TypeError):
        raise PhalanxError(
            f"{path} is not a phalanx login file; run phalanx login again or remove it"
        ) from None
    token = os.environ.get(TOKEN_ENV) or saved.get("token")
    return ServerConfig(url, token)


def save_login(url: str, token: str | None) -> Path:
    """Write the login file, readable by its owner only (it may hold a token)."""
    path = login_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"server": url, "token": token}, f)
    os.replace(tmp, path)
    return path
