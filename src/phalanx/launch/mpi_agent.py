"""Open MPI's remote-start agent for phalanx: ``mpi_agent HOST COMMAND…``.

``mpirun`` calls its *rsh agent* (ssh by default) to start its daemon on every
host but its own, as ``AGENT HOST ORTED-COMMAND…``. phalanx's nodes need no
ssh between them:

- on Ray, node 0's agent listens on a private Unix socket
  (``PHALANX_MPI_AGENT_SOCKET``, in a 0700 folder); this program passes the
  host (``phalanx-node-K``) and the command to it, and node K's agent runs the
  daemon in node K's environment; this program waits for it to end, as ssh
  would, and exits with its status;
- a host that is this machine (local compute gives each node a loopback
  address) runs the command here, in the environment ``mpirun`` runs in, which
  carries the job's markers, so phalanx's sweep finds the daemon and its ranks.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys

SOCKET_ENV = "PHALANX_MPI_AGENT_SOCKET"


def _is_this_machine(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m phalanx.launch.mpi_agent HOST COMMAND...", file=sys.stderr)
        return 2
    host, command = argv[0], " ".join(a.strip() for a in argv[1:])
    if os.environ.get(SOCKET_ENV):
        return _through_ray(os.environ[SOCKET_ENV], host, command)
    if not _is_this_machine(host):
        print(
            f"phalanx mpi_agent: cannot start MPI daemons on {host}: only hosts of this "
            "machine are reachable without ssh",
            file=sys.stderr,
        )
        return 255
    # Each local node has its own GPUs: its daemon (and so its ranks) sees only those.
    devices = json.loads(os.environ.get("PHALANX_MPI_DEVICES") or "{}")
    if host in devices:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices[host]
    # The command arrives as ssh would pass it: one string for a shell.
    os.execv("/bin/sh", ["/bin/sh", "-c", command])
    return 0  # not reached


def _through_ray(path: str, host: str, command: str) -> int:
    """Have ``host``'s Ray agent run ``command``; its exit status once it ends."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps({"host": host, "command": command}).encode() + b"\n")
        answer = conn.makefile("r").readline().strip()
    try:
        return int(answer)
    except ValueError:
        print(f"phalanx mpi_agent: {host}: {answer or 'no answer'}", file=sys.stderr)
        return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
