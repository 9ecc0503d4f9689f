"""A private Azurite (Azure's Blob storage emulator) for the data-loading benchmark.

The executable is ``$PHALANX_AZURITE``, else ``.tools/node_modules/.bin/azurite-blob``
in the current folder or in the phalanx checkout (``make test`` installs it
there from npm). It is started on a free port with its own data folder and
killed with SIGKILL at the end (Azurite ignores SIGTERM). The tests' own
launcher (``tests/servers.py``) works the same way.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from phalanx.errors import PhalanxError
from phalanx.launch.ports import free_port

AZURITE_ENV = "PHALANX_AZURITE"
TOOL = Path(".tools/node_modules/.bin/azurite-blob")
# Azurite's documented development account; public, not a secret.
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
START_TIMEOUT_S = 30.0


def find_azurite() -> Path:
    """The ``azurite-blob`` executable to run.

    Raises:
        PhalanxError: none was found; the message says how to install one.
    """
    if value := os.environ.get(AZURITE_ENV):
        if not Path(value).is_file():
            raise PhalanxError(f"{AZURITE_ENV}={value}: no such file; point it at azurite-blob")
        return Path(value)
    checkout = Path(__file__).resolve().parents[3]  # src/phalanx/bench/ → the checkout
    for root in (Path.cwd(), checkout):
        if (root / TOOL).is_file():
            return root / TOOL
    raise PhalanxError(
        f"Azurite not found (no ${AZURITE_ENV}, no ./{TOOL}): run `make {TOOL}` in the "
        f"phalanx checkout (needs npm) or set {AZURITE_ENV}; or leave out modes c, d and e "
        "with --modes a,b,local"
    )


@dataclass
class Azurite:
    """A running Azurite Blob service (``port`` may be moved to a proxy in front of it)."""

    proc: subprocess.Popen[bytes]
    port: int
    extra_pids: tuple[int, ...] = field(default=())
    """Processes serving with it (a latency proxy), whose CPU time counts as the store's."""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.proc.pid, *self.extra_pids)

    def container(self, name: str) -> None:
        """Create the container ``name`` if it does not exist."""
        from azure.storage.blob import BlobServiceClient

        conn = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )
        client = BlobServiceClient.from_connection_string(conn).get_container_client(name)
        if not client.exists():
            client.create_container()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def start(data_dir: Path) -> Azurite:
    """Start Azurite on a free port and wait until it listens.

    Raises:
        PhalanxError: no Azurite executable (see :func:`find_azurite`).
        RuntimeError: it exited or did not listen within 30 s.
    """
    exe = find_azurite()
    port = free_port()
    proc = subprocess.Popen(
        [str(exe), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location",
         str(data_dir), "--silent", "--skipApiVersionCheck", "--loose"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Azurite ({exe}) exited with {proc.returncode} at start")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return Azurite(proc, port)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Azurite did not listen on port {port} within 30 s"
                    ) from None
                time.sleep(0.1)
    except BaseException:
        _kill(proc)
        raise


def stop(server: Azurite) -> None:
    """Kill Azurite (and nothing else: a proxy is its starter's to stop)."""
    _kill(server.proc)
