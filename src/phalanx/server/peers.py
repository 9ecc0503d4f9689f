"""A server without tokens refuses walled-off jobs: who is calling, from this machine.

A server without tokens listens on loopback only and answers anyone on the machine
(one user's own). A job it walled off is on the machine too: were it answered, it
could have the server do what its walls forbid it (register a datastore on ``/``
and download the server's secrets). So such a server refuses a request whose TCP
peer runs as an account of the walls' range, with a 403 in one line. The peer's
account is the kernel's: the client end of a loopback connection is listed, with its
owner's uid, in ``/proc/net/tcp`` (``tcp6``); such a server believes no forwarded-for
header (``serve``: no proxy stands before a server without tokens). With tokens, the
token decides.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from phalanx.jobs.walls import WallSettings, read_settings
from phalanx.server.errors import error_body

REFUSED = (
    "a job cannot use the server's API without a token: this server asks for none, so it "
    "answers only its machine's own users; start it with --auth and give the job a token"
)


def peer_uid(host: str, port: int) -> int | None:
    """The uid owning the local TCP socket bound to ``host:port`` (a loopback client's
    end), from the kernel's socket tables; ``None`` when not found."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    tables: tuple[str, ...]
    if address.version == 4:
        tables, packed = ("tcp", "tcp6"), address.packed
        # An IPv4 client on a dual-stack socket shows in tcp6 as ::ffff:a.b.c.d.
        mapped = ipaddress.IPv6Address(f"::ffff:{address}").packed
    else:
        tables, packed, mapped = ("tcp6",), address.packed, address.packed
    wanted = {_hex(packed, port), _hex(mapped, port)}
    for table in tables:
        try:
            lines = Path("/proc/net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[1] in wanted:
                return int(fields[7])
    return None


def _hex(packed: bytes, port: int) -> str:
    """An address as ``/proc/net/tcp*`` writes it: 32-bit words in host byte order."""
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    host = "".join(
        f"{socket.ntohl(int.from_bytes(w, 'big')):08X}" for w in words
    )  # the kernel prints each word as a native-endian number
    return f"{host}:{port:04X}"


def install(app: FastAPI, home: Path, auth: bool) -> None:
    """Refuse walled-off jobs' requests on a server without tokens (see the module)."""
    if auth:
        return

    @app.middleware("http")
    async def _refuse_jobs(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        walls = read_settings(home)
        if walls is not None and walls.enabled and request.client is not None:
            uid = peer_uid(request.client.host, request.client.port)
            if uid is not None and _is_job(uid, walls):
                return JSONResponse(error_body(REFUSED), status_code=403)
        return await call_next(request)


def _is_job(uid: int, walls: WallSettings) -> bool:
    return walls.first_uid <= uid < walls.first_uid + walls.count
