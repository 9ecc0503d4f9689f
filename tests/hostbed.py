"""Separate hosts on this machine, for the tests of what crosses machines.

Each host of a :class:`HostBed` is a set of Linux namespaces made by the bed
(root only):

- **network**: its own stack, ``lo`` and one veth link to a switch (a bridge in
  a namespace of the bed's own, so nothing is added to this machine's network),
  with an address in a private /24 the bed picked unused. Hosts reach each
  other only over those addresses; a host's ``127.0.0.1`` is its own.
- **mount**: ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``$HOME`` (``/root``) are
  private tmpfs mounts, so no host sees another's files, the test's
  ``tmp_path`` or any ``PHALANX_HOME``; so are podman's stores (its images and
  its run state), so a host has only the images loaded or built on it. The
  checkout (phalanx's code), its virtual environment and, where a private mount
  hid it, the interpreter's installation are shared read-only at their own
  paths (:func:`kept`), as an install is the same on every machine: a checkout
  cloned into ``/tmp`` or ``~`` is bound back over the private mount.
- ``/sys`` is the host's network namespace's own, with this machine's cgroup
  hierarchies bound back under it (for the container runtime).
- **PID** and **UTS**: its own process table (``/proc`` shows only its
  processes) and its own host name. The namespace's first process reaps
  orphans; killing it ends every process of the host at once, which is how a
  host is switched off.

Every wait is bounded. The bed removes its namespaces (and with them its links
and mounts) when it closes, also after a failure; a bed whose test process was
killed outright is removed by the next bed that starts (:func:`sweep_stale`).
:func:`leftovers` lists what a bed left, for the test that checks none is.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIX = "phxbed-"
"""Every namespace a bed makes is named ``phxbed-<bed>-<host>``."""
LINK_PREFIX = "pxb"
"""Every link a bed makes is named ``pxb<bed><index><h|s>`` (host or switch end)."""
MOUNT_SOURCE = "phalanx-hostbed"
"""The source name of every tmpfs a bed mounts (never seen outside its hosts)."""
RECORDS = Path("/run/phalanx-hostbed")
"""One file per open bed: its namespaces and the pid of the test process that owns it."""
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", "/root")
CONTAINER_STORES = ("/var/lib/containers", "/run/containers", "/run/libpod")
"""Rootful podman's image store, run root and state: private to each host, empty at start."""
START_S = 20.0

# The first process of a host: its host name, private mounts, then reaping orphans
# (it is the namespace's init) until it is killed, which ends the host.
_INIT = r"""# phalanx's host bed: the first process of a host (tests/hostbed.py)
import json, os, signal, socket, subprocess, sys
name, keep, private = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
socket.sethostname(name)
# What the host keeps of this machine, held before a private mount can hide it.
held = {path: os.open(path, os.O_PATH) for path in keep}
# /sys as this network namespace shows it (its own links), with the machine's cgroup
# hierarchies bound back under it for the container runtime.
cgroups = os.open("/sys/fs/cgroup", os.O_PATH)
subprocess.run(["mount", "-t", "sysfs", "sysfs", "/sys"], check=True)
subprocess.run(["mount", "--no-canonicalize", "--rbind", f"/proc/self/fd/{cgroups}",
                "/sys/fs/cgroup"], check=True, pass_fds=(cgroups,))
os.close(cgroups)
for path in private:
    mode = "mode=1777" if path.startswith(("/tmp", "/var/tmp", "/dev/shm")) else "mode=0755"
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", mode, "phalanx-hostbed", path], check=True)
# Each kept path bound (back) at its own path, read-only; its mount point is made in
# the private mount that hid it.
for path, fd in held.items():
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "--no-canonicalize", "--bind", f"/proc/self/fd/{fd}", path],
                   check=True, pass_fds=(fd,))
    subprocess.run(["mount", "-o", "remount,bind,ro", path], check=True)
    os.close(fd)
def reap(*_):
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
print("ready", flush=True)
while True:
    signal.pause()
"""


class HostBedError(RuntimeError):
    """The bed could not be made (not root, no ``ip``, a namespace that would not start)."""


@dataclass
class Host:
    """One host of a bed: run commands on it, write files into it."""

    name: str
    address: str
    init_pid: int
    """Its first process, as this machine's PID namespace numbers it."""
    holder: subprocess.Popen[bytes] = field(repr=False)

    def argv(self, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """``argv`` as a command line of this machine that runs it on the host."""
        enter = ["nsenter", f"--target={self.init_pid}", "--mount", "--uts", "--net", "--pid"]
        return [*enter, f"--wdns={cwd or '/'}", "--", *argv]

    def env(self, **extra: str) -> dict[str, str]:
        """A plain environment for the host: no variable of the test's (no ``PHALANX_*``)."""
        env = {
            "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",  # the checkout is read-only here
        }
        env.update(extra)
        return env

    def popen(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **kwargs: object,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the host (``env``: :meth:`env` when ``None``)."""
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            self.argv(argv, cwd), env=dict(env if env is not None else self.env()), **kwargs
        )

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        input: str | bytes | None = None,
        timeout: float = 120.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the host to its end (at most ``timeout``); its output as text."""
        data = input.decode() if isinstance(input, bytes) else input
        proc = subprocess.run(
            self.argv(argv, cwd),
            env=dict(env if env is not None else self.env()),
            input=data,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"on {self.name}: {' '.join(argv)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout[-4000:]}\nstderr: {proc.stderr[-4000:]}"
            )
        return proc

    def write(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        """Write a file on the host (its folders made)."""
        content = data.encode() if isinstance(data, str) else data
        script = (
            "import os, sys; p = sys.argv[1]; os.makedirs(os.path.dirname(p), exist_ok=True); "
            "open(p, 'wb').write(sys.stdin.buffer.read()); os.chmod(p, int(sys.argv[2]))"
        )
        proc = subprocess.run(
            self.argv([sys.executable, "-c", script, path, str(mode)]),
            input=content,
            capture_output=True,
            timeout=60,
            env=self.env(),
        )
        if proc.returncode != 0:
            raise AssertionError(f"writing {path} on {self.name}: {proc.stderr.decode()}")

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists on the host."""
        return self.run(["test", "-e", path], check=False).returncode == 0

    def load_image(self, image: str, timeout: float = 300.0) -> None:
        """Put this machine's podman image ``image`` into the host's own store (as an
        operator pulls a base image onto each machine): ``podman save`` here, piped into
        ``podman load`` there. Nothing when the host has it already."""
        if self.run(["podman", "image", "exists", image], check=False).returncode == 0:
            return
        save = subprocess.Popen(["podman", "save", image], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip
        try:
            load = subprocess.run(self.argv(["podman", "load", "--quiet"]), stdin=save.stdout,
                                  capture_output=True, timeout=timeout, env=self.env())  # fmt: skip
        finally:
            assert save.stdout is not None
            save.stdout.close()
            save.wait(timeout=timeout)
        if save.returncode != 0 or load.returncode != 0:
            raise AssertionError(
                f"loading {image} on {self.name}: {load.stderr.decode()[-2000:]}"
                f" {save.stderr.read().decode()[-2000:] if save.stderr else ''}"
            )

    @property
    def alive(self) -> bool:
        return self.holder.poll() is None

    def power_off(self) -> None:
        """End the host for good: every process of it, at once (as a machine that dies)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.init_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.holder.kill()
        self.holder.wait(timeout=30)


class HostBed:
    """Hosts that share nothing but a network (and a read-only install).

    Use as a context manager: ``with HostBed(["server", "client"]) as bed:
    bed["client"].run([...])``.
    """

    def __init__(self, names: Sequence[str]) -> None:
        if os.geteuid() != 0:
            raise HostBedError("the host bed needs root (network and mount namespaces)")
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be distinct and given: {names}")
        self.bed = f"{random.randrange(16**4):04x}"
        self.names = list(names)
        self.subnet = _free_subnet()
        self.hosts: dict[str, Host] = {}
        self.switch = f"{PREFIX}{self.bed}-sw"

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> HostBed:
        sweep_stale()
        try:
            self._record()
            self._make_switch()
            for index, name in enumerate(self.names):
                self.hosts[name] = self._make_host(index, name)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def namespaces(self) -> list[str]:
        return [self.switch, *(f"{PREFIX}{self.bed}-{n}" for n in self.names)]

    def link(self, name: str, end: str) -> str:
        return f"{LINK_PREFIX}{self.bed}{self.names.index(name)}{end}"

    def cut(self, name: str) -> None:
        """Take host ``name``'s link down (from the switch's end): it is unreachable."""
        _ip("-n", self.switch, "link", "set", self.link(name, "s"), "down")

    def heal(self, name: str) -> None:
        """Bring host ``name``'s link back up."""
        _ip("-n", self.switch, "link", "set", self.link(name, "s"), "up")

    def close(self) -> None:
        """Switch every host off and remove the bed's namespaces (and so its links and
        mounts); safe to call more than once."""
        for host in self.hosts.values():
            if host.alive:
                host.power_off()
        _remove(self.namespaces())
        with contextlib.suppress(FileNotFoundError):
            (RECORDS / f"{self.bed}.json").unlink()

    def _record(self) -> None:
        RECORDS.mkdir(mode=0o700, exist_ok=True)
        record = {"owner": os.getpid(), "namespaces": self.namespaces()}
        (RECORDS / f"{self.bed}.json").write_text(json.dumps(record))

    def _make_switch(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def _make_host(self, index: int, name: str) -> Host:
        ns = f"{PREFIX}{self.bed}-{name}"
        address = str(self.subnet.network_address + 10 + index)
        here, there = self.link(name, "h"), self.link(name, "s")
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # Made in the host's namespace, its switch end moved to the switch's: no link of
        # the bed ever exists in this machine's own namespace.
        _ip("-n", ns, "link", "add", here, "type", "veth", "peer", "name", there,
            "netns", self.switch)  # fmt: skip
        _ip("-n", self.switch, "link", "set", there, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", here)
        _ip("-n", ns, "link", "set", here, "up")
        init = RECORDS / "hostinit.py"
        init.write_text(_INIT)
        holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--uts", "--pid", "--fork",
             "--mount-proc", "--propagation", "private", "--", sys.executable, str(init), name,
             json.dumps(kept()), *PRIVATE, *CONTAINER_STORES],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        assert holder.stdout is not None
        line = _read_line(holder, START_S)
        if line != "ready":
            # An init that failed has closed its output and is ending: its error says why.
            with contextlib.suppress(subprocess.TimeoutExpired):
                holder.wait(timeout=5)
            err = (
                holder.stderr.read().decode() if holder.poll() is not None and holder.stderr else ""
            )
            holder.kill()
            raise HostBedError(f"host {name} did not start: {line!r} {err[-2000:]}")
        return Host(name, address, _child_of(holder.pid), holder)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline().decode().strip()


def _child_of(pid: int) -> int:
    """``unshare --fork``'s child: the host's first process."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.05)
    raise HostBedError(f"unshare ({pid}) started no host process")


def kept() -> list[str]:
    """The paths of this machine that every host shares, read-only: the checkout, the
    virtual environment the tests run in and, where a private mount hides it, the
    interpreter's installation (a venv's ``python`` links there). None lies inside
    another, so each is one bind mount."""
    wanted = [REPO]
    if sys.prefix != sys.base_prefix:  # a virtual environment, wherever it lies
        wanted.append(Path(sys.prefix).resolve())
    base = Path(sys.base_prefix).resolve()
    if any(base.is_relative_to(hidden) for hidden in (*PRIVATE, *CONTAINER_STORES)):
        wanted.append(base)
    keep: list[Path] = []
    for path in sorted(set(wanted), key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(outer) for outer in keep):
            keep.append(path)
    return [str(path) for path in keep]


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.0.0.0/8 that no address of this machine is in."""
    used = subprocess.run(
        ["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True
    ).stdout
    taken = [
        ipaddress.ip_interface(word).network
        for line in used.splitlines()
        for word in line.split()
        if "/" in word and word[0].isdigit()
    ]
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{random.randrange(64, 250)}.{random.randrange(256)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise HostBedError("no free 10.x.y.0/24 for the host bed")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise HostBedError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _remove(namespaces: Sequence[str]) -> None:
    """Kill whatever still runs in each namespace, then delete it (its links go with it)."""
    existing = set(_namespaces())
    for ns in namespaces:
        if ns not in existing:
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if subprocess.run(["ip", "netns", "del", ns], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def sweep_stale() -> list[str]:
    """Remove the beds whose owning test process is gone; the namespaces removed."""
    removed: list[str] = []
    if not RECORDS.is_dir():
        return removed
    for path in RECORDS.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            owner = int(record["owner"])
            if owner != os.getpid() and Path(f"/proc/{owner}").exists():
                continue
            if owner == os.getpid():
                continue
            _remove(record["namespaces"])
            removed += record["namespaces"]
            path.unlink()
    return removed


def leftovers(bed: str = "") -> list[str]:
    """Namespaces, links and mounts of beds that this machine still has (``bed``: of that
    bed only, as other test runs on the machine may have beds open)."""
    found = [f"namespace {ns}" for ns in _namespaces() if ns.startswith(f"{PREFIX}{bed}")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if line.split(":")[1].strip().startswith(f"{LINK_PREFIX}{bed}")
    ]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found += [f"mount {line}" for line in mounts if MOUNT_SOURCE in line]
    return found
