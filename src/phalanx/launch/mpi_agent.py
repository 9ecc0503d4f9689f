"""Open MPI's remote-start agent for phalanx: ``mpi_agent HOST COMMAND…``.

``mpirun`` calls its *rsh agent* (ssh by default) to start its daemon on every
host but its own, as ``AGENT HOST ORTED-COMMAND…``. phalanx's nodes need no
ssh between them: a host that is this machine (local compute gives each node a
loopback address) runs the command here, in the environment ``mpirun`` runs
in, which carries the job's markers, so phalanx's sweep finds the daemon and
its ranks.
"""

from __future__ import annotations

import ipaddress
import os
import sys


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
    if not _is_this_machine(host):
        print(
            f"phalanx mpi_agent: cannot start MPI daemons on {host}: only hosts of this "
            "machine are reachable without ssh",
            file=sys.stderr,
        )
        return 255
    # The command arrives as ssh would pass it: one string for a shell.
    os.execv("/bin/sh", ["/bin/sh", "-c", command])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
