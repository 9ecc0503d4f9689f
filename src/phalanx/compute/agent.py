"""The node agent: a Ray actor, one per node of an attempt, that runs that node's launcher.

:class:`~phalanx.kinds.ray.compute.RayCompute` places one agent in each bundle of the
attempt's placement group. The agent starts the same per-node launcher local
compute does (torchrun, or ``mpirun`` on node 0) from a
:class:`~phalanx.launch.node.NodeLaunch`, answers polls, forwards signals and
stops the job's processes on its node. The launcher gets ``PR_SET_PDEATHSIG``:
when the agent's worker process dies with its node's raylet, the launcher is
told to stop (SIGTERM, passed on to the ranks) rather than left running.

Before the launcher starts, the agent sets the job up on its node
(:class:`~phalanx.compute.nodejob.NodeFolder`): inputs made ready through the
node's cache and, with ``files: local``, the job's folder of its own, whose
changes each poll returns for the supervisor to write into the workspace.

With ``environment.image`` the agent makes the image ready on its node at set-up
(its engine; pulled there if missing, or built there from the files the supervisor
sent: :mod:`phalanx.environments.containers.nodebuild`) and starts the launcher in a container of
it, through the same code local compute uses (:mod:`phalanx.environments.containers`); its sweep
removes the job's containers on the node by label.

On a low-priority target the agent listens for its machine's eviction notice
(:mod:`phalanx.compute.eviction`) while the launcher runs, and passes it on as
phalanx's preemption notice (SIGTERM), leaving the notice in the job's system
logs for the supervisor to name as the attempt's end.

This module is imported inside Ray's worker processes; it imports ``ray`` only
through the decorator applied by :func:`agent_class`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from phalanx import prctl
from phalanx.compute.eviction import NOTICE_FILE, EvictionWatch
from phalanx.compute.nodejob import NodeFolder, NodeJob, node_home
from phalanx.compute.ship import Change
from phalanx.environments.containers.image import ImageRef
from phalanx.environments.containers.run import start_launcher
from phalanx.errors import PhalanxError
from phalanx.launch import procs
from phalanx.launch.mpi_agent import SOCKET_ENV
from phalanx.launch.node import NodeLaunch
from phalanx.launch.ports import free_ports
from phalanx.launch.stacks import dump_stacks
from phalanx.launch.sysmetrics import SystemSampler
from phalanx.tracking.sidecar import Endpoint, add_to
from phalanx.workspace.metrics import node_metrics_file

_BUILD_STOP_S = 20.0
"""How long :meth:`NodeAgent.close` waits for a canceled build to stop."""
_LOG_KEPT = 1 << 20
"""The end of a failed build's log sent back to the supervisor (bytes of text)."""
MPI_HOST = "phalanx-node-"
"""How ``mpirun`` names node K on Ray (``phalanx-node-K``); node 0 is its own address."""


class NodeAgent:
    """What runs on one node (as a Ray actor; plain methods, so it is testable without Ray)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._folder: NodeFolder | None = None
        self._armed: tuple[dict[str, str], Path, NodeLaunch] | None = None
        self._image: ImageRef | None = None
        self._interval = 0.0
        self._sampler: SystemSampler | None = None
        self._answer: tuple[int, list[Change], bool] = (0, [], False)
        """The last changes sent (sequence number, changes, more): sent again until the
        supervisor says it has them."""
        self._socket_dir: str | None = None
        self._closing = threading.Event()
        """Set by :meth:`close` (the supervisor gave up): a build in progress stops."""
        self._building = threading.Lock()
        """Held while the node builds the job's image: :meth:`close` waits for it to stop
        (the agent is killed right after, and the build would outlive it)."""
        self._low_priority = False
        self._eviction: EvictionWatch | None = None
        self._noticed = False
        self._endpoint: Endpoint | None = None
        """The MLflow endpoint of this node's ranks (:mod:`phalanx.tracking.sidecar`)."""
        """The eviction notice was passed on (SIGTERM): another SIGTERM, the supervisor's
        stop of a gang whose rank left with 143, would cut the ranks' save short."""

    def setup(self, job: NodeJob, node_rank: int, checkpoints: Any = None) -> None:
        """Set the job up on this node: its folder and its inputs (downloads, mounts).

        Args:
            checkpoints: ``files: local``: the workspace's checkpoints as an archive (or a
                Ray object reference to one), copied in before the attempt starts.
        """
        import ray

        code = ray.get(job.code) if isinstance(job.code, ray.ObjectRef) else job.code
        if isinstance(checkpoints, ray.ObjectRef):
            checkpoints = ray.get(checkpoints)
        self._folder = NodeFolder(job, node_rank, code=code, checkpoints=checkpoints)
        self._interval = job.sample_interval
        self._low_priority = job.low_priority
        if job.image is not None or job.image_build is not None:
            self._image = self._ready_image(job, node_rank)

    def _ready_image(self, job: NodeJob, node_rank: int) -> ImageRef:
        """The job's image on this node: there, pulled, or built here (its engine, its
        store), before the attempt's launcher is started."""
        import ray

        from phalanx.environments.containers.image import ready_image
        from phalanx.environments.containers.nodebuild import NodeBuildError, ready_on_node

        home = node_home()
        build = job.image_build
        if build is None:
            assert job.image is not None
            return ready_image(job.image, home / "containers" / "images")
        if isinstance(build.files, ray.ObjectRef):
            build = replace(build, files=ray.get(build.files))
        assert self._folder is not None
        log = self._folder.root / "system_logs" / f"image_build_node{node_rank}.txt"
        try:
            with self._building:
                return ready_on_node(build, home, log, canceled=self._closing.is_set)
        except PhalanxError as exc:
            text = log.read_text(errors="replace") if log.is_file() else ""
            raise NodeBuildError(str(exc), log.name, text[-_LOG_KEPT:]) from None

    def address(self) -> str:
        """This node's address as Ray knows it (others reach its ranks there)."""
        import ray

        return str(ray.util.get_node_ip_address())

    def hostname(self) -> str:
        return socket.gethostname()

    def free_ports(self, count: int) -> list[int]:
        return free_ports(count, "0.0.0.0")

    def start(self, launch: NodeLaunch, log_path: str, peers: list[Any] | None = None) -> int:
        """Start the node's launcher; returns its pid on this node (0 for an MPI node
        other than node 0, whose daemon ``mpirun`` asks for through :meth:`run_daemon`).

        Args:
            peers: MPI, node 0: every node's agent, to start ``mpirun``'s daemons on.
        """
        import ray

        log = Path(log_path)
        if self._folder is not None:
            launch, log = self._folder.launch(launch), self._folder.here(log)
        if self._image is not None and launch.image is None:
            # This node's engine and copy of the image (made ready at set-up).
            if launch.distribution == "mpi":
                self._image.check_mpi()
            launch = replace(launch, image=self._image)
        env = launch.env()
        env["PHALANX_RAY_NODE_ID"] = ray.get_runtime_context().get_node_id()
        interface = _interface_of(self.address())
        if interface is not None and launch.nnodes > 1:
            # Gloo otherwise takes the address this host's name resolves to, which on
            # separate machines is often none (then loopback) or 127.0.1.1: its peers on
            # other nodes would be told to connect there. The node's Ray address is the one
            # they reach it at. A value the spec or the node's operator set is kept.
            env.setdefault("GLOO_SOCKET_IFNAME", interface)
        if self._folder is not None and self._sampler is None:
            # This node's machine, and the processes this agent starts (launcher, ranks).
            file = node_metrics_file(launch.attempt, launch.node_rank)
            self._sampler = SystemSampler(self._folder.root, self._interval, file).start()
        if launch.tracking is not None and self._endpoint is None:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._endpoint = Endpoint(launch.job_dir, launch.tracking, launch.attempt,
                                      log_path=log).start()  # fmt: skip
        if self._endpoint is not None:
            add_to(env, self._endpoint, launch.user_env)
        if launch.distribution == "mpi" and launch.node_rank > 0:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._armed = (env, log, launch)
            return 0
        if peers:
            env[SOCKET_ENV] = self._serve(peers)
        self._proc = start_launcher(launch, env, log, end_with_parent=True)
        if self._low_priority and self._folder is not None and self._eviction is None:
            notice_file = (
                self._folder.root
                / "system_logs"
                / NOTICE_FILE.format(attempt=launch.attempt, node=launch.node_rank)
            )
            self._eviction = EvictionWatch(lambda notice: self._evicted(notice, notice_file))
            self._eviction.start()
        return self._proc.pid

    def _evicted(self, notice: str, notice_file: Path) -> None:
        """The machine is being taken away: say so, and give the launcher the preemption
        notice (its ranks have the job's preemption grace to save)."""
        if self._closing.is_set():
            return  # the attempt is over: its folder may be gone
        try:
            notice_file.parent.mkdir(exist_ok=True)
            notice_file.write_text(notice + "\n")
        except OSError:
            pass  # the notice still goes to the ranks
        finally:
            self.signal(int(signal.SIGTERM))
            self._noticed = True

    def run_daemon(self, command: str) -> int:
        """Run ``mpirun``'s daemon command on this node, in the node's environment, until
        it ends (as ssh would); its exit status."""
        if self._armed is None:
            raise RuntimeError("this node has no MPI job to run a daemon for")
        env, log, launch = self._armed
        if launch.image is not None:
            from phalanx.environments.containers.run import start

            # In a container of the node's image, as its launcher would have run.
            daemon = ["/bin/sh", "-c", command]
            self._proc = start(launch, env, log, end_with_parent=True, command=daemon)
            return self._proc.wait()
        with open(log, "ab") as out:
            self._proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                env=env,
                cwd=launch.workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=prctl.end_with_parent,
            )
        return self._proc.wait()

    def _serve(self, peers: list[Any]) -> str:
        """Listen where node 0's ``mpi_agent`` asks for daemons; the socket's path."""
        self._socket_dir = tempfile.mkdtemp(prefix="phalanx-mpi-")  # 0700: ours only
        path = os.path.join(self._socket_dir, "agent.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(64)

        def accept() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                threading.Thread(target=_relay, args=(conn, peers), daemon=True).start()

        threading.Thread(target=accept, name="mpi-agent", daemon=True).start()
        return path

    def poll(
        self, acked: int = 0, resend: list[tuple[str, str]] | None = None
    ) -> tuple[int | None, list[Change], bool, int]:
        """The launcher's exit code (``None`` while it runs), the job files that changed,
        whether more changes wait (the exit code is held back until none do), and the
        answer's sequence number.

        Args:
            acked: The last answer the supervisor wrote; an earlier one is sent again (its
                reply was lost or timed out).
            resend: Files the supervisor could not extend: sent whole this time.
        """
        code = None if self._proc is None else self._proc.poll()
        if self._endpoint is not None:
            if code is None:
                self._endpoint.ensure()
            else:  # the launcher has ended: its ranks have sent their last points
                self._endpoint.stop()
        scanner = None if self._folder is None else self._folder.scanner
        if scanner is None:
            return code, [], False, 0
        seq, changes, more = self._answer
        if acked < seq:
            return None, changes, True, seq
        scanner.forget(resend or [])
        changes, more = scanner.scan()
        self._answer = (seq + 1, changes, more)
        return (None if more else code), changes, more, seq + 1

    def signal(self, signum: int) -> None:
        if self._armed is not None:
            return  # an MPI daemon: mpirun on node 0 passes signals to every rank
        if self._noticed and signum == signal.SIGTERM:
            return  # the launcher has had its notice; its ranks are saving
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signum)

    def wait(self, timeout: float) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def sweep(self, job_dir: str, attempt: int | None, grace_s: float) -> int:
        """Stop every process and container of the job (or attempt) left on this node."""
        from phalanx.environments.containers.sweep import remove

        here = self._job_dir(job_dir)
        stopped = remove(Path(here), attempt, grace_s)
        stopped += procs.sweep(here, attempt, grace_s)
        return stopped + remove(Path(here), attempt, 0.0)

    def dump_stacks(self, job_dir: str, attempt: int) -> int:
        """Ask the attempt's Python processes on this node for their stacks."""
        return dump_stacks(self._job_dir(job_dir), attempt)

    def close(self) -> None:
        """Stop a build in progress; unmount the job's inputs on this node."""
        self._closing.set()
        if self._endpoint is not None:
            self._endpoint.stop()
        if self._sampler is not None:
            self._sampler.stop()
        if self._eviction is not None:
            self._eviction.stop()
        if self._building.acquire(timeout=_BUILD_STOP_S):
            self._building.release()
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def _job_dir(self, job_dir: str) -> str:
        return job_dir if self._folder is None else str(self._folder.root)

    def pid(self) -> int:
        return os.getpid()


def _interface_of(address: str) -> str | None:
    """The network interface of this machine that holds ``address``, if one does."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == address for a in addresses):
            return name
    return None


def agent_class(num_cpus: float, num_gpus: float) -> Any:
    """:class:`NodeAgent` as a Ray actor class reserving a node's bundle."""
    import ray

    # Threads: an MPI daemon's run_daemon call lasts the whole attempt, polls go on.
    options: dict[str, Any] = {"max_concurrency": 16, "max_restarts": 0}
    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, **options)(NodeAgent)


def _relay(conn: socket.socket, peers: list[Any]) -> None:
    """One ``mpi_agent`` request: run the daemon on the node it names, answer its status."""
    import ray

    with conn:
        try:
            request = json.loads(conn.makefile("r").readline())
            host = str(request["host"])
            if not host.startswith(MPI_HOST):
                raise ValueError(f"unknown MPI host {host!r}")
            agent = peers[int(host.removeprefix(MPI_HOST))]
            answer = str(int(ray.get(agent.run_daemon.remote(str(request["command"])))))
        except Exception as exc:  # told to mpirun through mpi_agent's exit status
            answer = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        with contextlib.suppress(OSError):
            conn.sendall(answer.encode() + b"\n")
