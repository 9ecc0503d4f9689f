"""Free TCP ports for the rendezvous store."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago.

    Another process can take it before torchrun binds it; the runner treats a
    launcher that fails to bind like any other launch failure.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
