"""Which NCCL a rank runs and over what: one line in its log when the backend is nccl.

On a cluster the question after a slow or failing all-reduce is first "did NCCL
use InfiniBand, or fall back to TCP sockets on the wrong interface?". NCCL says
so itself, but only at ``NCCL_DEBUG=INFO``, in hundreds of lines. So, when the
process group's backend is ``nccl`` and the user set neither ``NCCL_DEBUG`` nor
``NCCL_DEBUG_FILE``, :func:`phalanx.train.init` asks NCCL for its INIT and NET
lines in a file of the rank's own (``NCCL_DEBUG_FILE``, never the rank's log),
creates the group (which, bound to its device, connects at once), reads the file
and prints one line::

    phalanx: NCCL 2.27.3 · network IB (mlx5_0:1, mlx5_1:1) · peers P2P, NET/IB

A user who set ``NCCL_DEBUG`` keeps exactly their choice (NCCL's own output
where they asked for it); the line then gives the version alone. Nothing here
runs for gloo or a one-process run. The variables set for NCCL are removed again
once the group exists (NCCL reads them once), so no child process inherits them.

Untested on a GPU: no GPU machine has run this yet. The parser is tested on
NCCL INFO lines written from NCCL's documented format (``tests/unit/train/test_nccl.py``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Capture", "NcclPath", "describe", "finish_capture", "parse_info", "start_capture"]

# "… NCCL INFO Using network IB" (also "Using network Socket", a plugin's name).
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
# "… NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>"
# "… NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:…"
_DEVICES = re.compile(r"NCCL INFO NET/(\w+)\s*: Using (.*?)(?:;|$)")
# An IB device keeps its port (``mlx5_0:1/IB``); a socket's address is left out.
_DEVICE = re.compile(r"\[\d+\]([^\s/:<]+(?::\d+(?=/))?)")
# "… NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" or "via NET/IB/0/GDRDMA"
_VIA = re.compile(r"NCCL INFO Channel .* via (\S+)")


@dataclass
class NcclPath:
    """What NCCL's INFO lines said about how this rank talks to the others."""

    network: str | None = None
    """The network transport between nodes: ``IB``, ``Socket`` or a plugin's name."""
    devices: list[str] = field(default_factory=list)
    """The devices of that network: ``mlx5_0:1`` (IB), ``eth0`` (sockets)."""
    peers: list[str] = field(default_factory=list)
    """Transports of the channels seen so far: ``P2P``, ``SHM``, ``NET/IB``…"""


def parse_info(text: str) -> NcclPath:
    """Read NCCL's ``NCCL_DEBUG=INFO`` output (any subsystems) for its transports."""
    path = NcclPath()
    for line in text.splitlines():
        if (m := _NETWORK.search(line)) is not None:
            path.network = m.group(1)
        elif (m := _DEVICES.search(line)) is not None:
            if path.network in (None, m.group(1)):
                path.devices = _DEVICE.findall(m.group(2))
        elif (m := _VIA.search(line)) is not None:
            parts = m.group(1).split("/")
            kind = "/".join(parts[:2]) if parts[0] == "NET" else parts[0]
            if kind not in path.peers:
                path.peers.append(kind)
    return path


def describe(version: str, path: NcclPath | None) -> str:
    """The rank's one line: ``phalanx: NCCL 2.27.3 · network IB (mlx5_0:1) · peers P2P``."""
    parts = [f"phalanx: NCCL {version}"]
    if path is None:
        parts.append("transport in NCCL's own output (NCCL_DEBUG is yours)")
    elif path.network is None and not path.peers:
        parts.append("transport not reported (no 'Using network' line from NCCL)")
    else:
        if path.network is not None:
            devices = f" ({', '.join(path.devices)})" if path.devices else ""
            parts.append(f"network {path.network}{devices}")
        if path.peers:
            parts.append(f"peers {', '.join(path.peers)}")
    return " · ".join(parts)


@dataclass(frozen=True)
class Capture:
    """NCCL's INFO lines going to ``file``; ``before``: each variable set for it, with the
    value it had (``None``: unset), to put back."""

    file: Path
    before: tuple[tuple[str, str | None], ...]


def start_capture(env: MutableMapping[str, str]) -> Capture | None:
    """Before NCCL starts: send its INIT and NET lines to a file of this process's own,
    unless the user chose NCCL's output (``NCCL_DEBUG`` or ``NCCL_DEBUG_FILE`` set).

    NCCL reads its environment once per process, so INFO logging of the INIT and NET
    subsystems stays on for the process's later communicators too (a few lines each,
    into the removed file). A user's ``NCCL_DEBUG_SUBSYS`` is overridden meanwhile (it
    had no effect without ``NCCL_DEBUG``; ``ALL`` would log every collective) and put
    back after."""
    if env.get("NCCL_DEBUG") or env.get("NCCL_DEBUG_FILE"):
        return None
    fd, name = tempfile.mkstemp(prefix=f"phalanx-nccl-{os.getpid()}-", suffix=".txt")
    os.close(fd)
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": name}
    before = tuple((k, env.get(k)) for k in wanted)
    env.update(wanted)
    return Capture(Path(name), before)


def finish_capture(env: MutableMapping[str, str], capture: Capture | None) -> NcclPath | None:
    """After the group exists: what the file said; the variables as they were and the
    file removed."""
    if capture is None:
        return None
    for name, value in capture.before:
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    try:
        return parse_info(capture.file.read_text(errors="replace"))
    except OSError:
        return NcclPath()
    finally:
        capture.file.unlink(missing_ok=True)
