"""A Ray cluster of two nodes on this machine, for the Ray tests and benchmarks.

``ray start --head`` and ``ray start --address`` as an operator would run them,
each node with a custom resource of its own (``node_a``, ``node_b``) so a test
can tell them apart and kill one: a node is its raylet process, found by that
resource in its command line. Each node has a phalanx folder of its own
(``PHALANX_NODE_HOME``), as separate machines would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from phalanx.launch.ports import free_ports

RAY = str(Path(sys.executable).with_name("ray"))
RAY_TEMP_ROOM = 40
"""The longest ``--temp-dir`` Ray can take: its sockets lie about 62 characters deeper
(``session_<time>_<pid>/sockets/plasma_store.N``) and a Unix socket's path holds 107."""


def ray_temp_dir(temp_dir: Path) -> Path | None:
    """A short folder of its own for Ray's sessions when ``temp_dir`` is too long to hold
    them (a pytest-xdist worker's temporary folders are), linked as ``temp_dir/ray-temp``;
    ``None`` when ``temp_dir`` itself will do."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    if len(str(temp_dir)) <= RAY_TEMP_ROOM:
        return None
    short = Path(tempfile.mkdtemp(prefix="phx-ray-"))
    (temp_dir / "ray-temp").symlink_to(short)
    return short


@dataclass
class RayCluster:
    """Two Ray nodes on this machine."""

    gcs_address: str
    client_address: str
    temp_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    ray_temp: Path | None = None
    """Ray's own temp folder (``--temp-dir``) where ``temp_dir`` is too long for it
    (:func:`ray_temp_dir`); ``temp_dir/ray-temp`` links to it."""

    def node_home(self, resource: str) -> Path:
        """The node's own phalanx folder (``PHALANX_NODE_HOME``): its cache, its job folders."""
        return self.temp_dir / "nodes" / resource

    def start_worker(self, resource: str = "node_b") -> None:
        """Add a node (again, after :meth:`kill_node`)."""
        resources = json.dumps({resource: 1})
        env = {**self.env, "PHALANX_NODE_HOME": str(self.node_home(resource))}
        _ray(["start", f"--address={self.gcs_address}", "--num-cpus=2",
              f"--resources={resources}", "--disable-usage-stats"], env)  # fmt: skip
        self.wait_nodes(2)

    def raylet(self, resource: str) -> psutil.Process:
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            if "raylet" in (proc.info["name"] or "") and f"resource_list={resource}," in cmdline:
                return proc
        raise AssertionError(f"no raylet with resource {resource}")

    def kill_node(self, resource: str = "node_b") -> None:
        """SIGKILL a node's raylet: the node is lost, as when its machine goes."""
        self.raylet(resource).send_signal(signal.SIGKILL)

    def alive_nodes(self) -> int:
        out = subprocess.run(
            [sys.executable, "-c",
             "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
             "print('ALIVE', sum(n['Alive'] for n in ray.nodes()))", self.gcs_address],
            capture_output=True, text=True, env=self.env, timeout=60,
        )  # fmt: skip
        # Ray prints its own warnings to stdout too: take the marked line.
        counts = [ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("ALIVE ")]
        return int(counts[-1]) if out.returncode == 0 and counts else -1

    def wait_nodes(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while (alive := self.alive_nodes()) != count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{alive} Ray node(s) alive after {timeout} s, wanted {count}")
            time.sleep(1)


def _ray(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([RAY, *args], capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")


def start_cluster(temp_dir: Path, *, workers: int = 1, token: str | None = None) -> RayCluster:
    """Start a head node and ``workers`` worker nodes; ``token`` turns on Ray's token auth."""
    gcs_port, client_port = free_ports(2)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    head_env = {**env, "PHALANX_NODE_HOME": str(temp_dir / "nodes" / "node_a")}
    ray_temp = ray_temp_dir(temp_dir)
    _ray(["start", "--head", f"--port={gcs_port}", f"--ray-client-server-port={client_port}",
          "--num-cpus=2", '--resources={"node_a": 1}', "--include-dashboard=false",
          f"--temp-dir={ray_temp or temp_dir}", "--disable-usage-stats"], head_env)  # fmt: skip
    head_ip = subprocess.run(
        [sys.executable, "-c", "import ray; print(ray.util.get_node_ip_address())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    cluster = RayCluster(
        f"{head_ip}:{gcs_port}", f"ray://127.0.0.1:{client_port}", temp_dir, env, ray_temp
    )
    if workers:
        cluster.start_worker("node_b")
    return cluster


def stop_cluster(cluster: RayCluster, timeout: float = 30.0) -> None:
    """End this cluster's processes, and only those.

    Not ``ray stop``: it ends every Ray process of the machine, another test run's
    cluster and the Ray nodes of a host bed (``tests/hostbed.py``) included. A process
    of this cluster names its temp folder or its GCS address on its command line; Ray's
    workers and agents, which rename theirs, are their children.
    """
    port = cluster.gcs_address.rpartition(":")[2]
    marks: tuple[str, ...] = (str(cluster.temp_dir), cluster.gcs_address, f"127.0.0.1:{port}")
    if cluster.ray_temp is not None:
        marks += (str(cluster.ray_temp),)
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info["cmdline"] or []
        if any(mark in arg for arg in args for mark in marks) and proc.pid != os.getpid():
            found[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                found.update((child.pid, child) for child in proc.children(recursive=True))
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    _, alive = psutil.wait_procs(list(found.values()), timeout=timeout)
    if alive:
        raise RuntimeError(f"Ray processes of {cluster.temp_dir} still alive: {alive}")
    if cluster.ray_temp is not None:
        shutil.rmtree(cluster.ray_temp, ignore_errors=True)


HEAD_TYPE = "ray.head.default"


def start_autoscaling_cluster(
    temp_dir: Path,
    node_types: dict[str, dict[str, float]],
    *,
    max_workers: int = 2,
    idle_timeout_s: float = 6.0,
    evictable: bool = False,
    node_env: dict[str, str] | None = None,
) -> RayCluster:
    """A head at no CPUs with Ray's real autoscaler over its fake multi-node provider,
    which starts and stops real raylet processes of this machine as nodes.

    Args:
        node_types: Worker node type → its resources (``{"cpu1": {"CPU": 1}}``); each
            may grow to ``max_workers`` nodes.
        idle_timeout_s: The autoscaler's ``idle_timeout_minutes``, in seconds.
        evictable: A worker node whose raylet dies is gone from the provider, as an
            evicted spot VM is from its cloud, and the autoscaler may start another
            (:mod:`phalanx.bench.spotprovider`); Ray's fake provider keeps listing it.
        node_env: Set in every node's environment (the head's, which the nodes the
            autoscaler starts inherit).

    The autoscaler looks every second (``AUTOSCALER_UPDATE_INTERVAL_S``) rather than
    every five. Nodes share this machine's Ray temp folder and the head's
    ``PHALANX_NODE_HOME``; :func:`stop_cluster` ends them with the head, by the GCS
    address on their command lines (never ``ray stop``).
    """
    gcs_port, client_port = free_ports(2)
    head_ip = subprocess.run(
        [sys.executable, "-c", "import ray; print(ray.util.get_node_ip_address())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    gcs = f"{head_ip}:{gcs_port}"
    config = {
        "cluster_name": f"phalanx-{gcs_port}",
        "max_workers": max_workers * len(node_types),
        "upscaling_speed": 10.0,
        "idle_timeout_minutes": idle_timeout_s / 60,
        "provider": {
            "type": "external" if evictable else "fake_multinode",
            **({"module": "phalanx.bench.spotprovider.EvictableProvider"} if evictable else {}),
            "gcs_address": gcs,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": {
            HEAD_TYPE: {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            **{
                name: _worker_type(resources, max_workers) for name, resources in node_types.items()
            },
        },
        "head_node_type": HEAD_TYPE,
        "auth": {"ssh_user": "phalanx"},
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }
    temp_dir.mkdir(parents=True, exist_ok=True)
    config_path = temp_dir / "autoscaling.json"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head_env = {
        **env,
        "RAY_FAKE_CLUSTER": "1",
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "PHALANX_NODE_HOME": str(temp_dir / "nodes" / "fake"),
        **(node_env or {}),
    }

    ray_temp = ray_temp_dir(temp_dir)
    _ray(["start", "--head", f"--port={gcs_port}", f"--ray-client-server-port={client_port}",
          "--num-cpus=0", f"--autoscaling-config={config_path}", "--include-dashboard=false",
          f"--temp-dir={ray_temp or temp_dir}", "--disable-usage-stats"], head_env)  # fmt: skip
    _wait_listening(client_port, timeout=60)  # Ray Client's server starts after `ray start`
    return RayCluster(gcs, f"ray://127.0.0.1:{client_port}", temp_dir, env, ray_temp)


def _wait_listening(port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on port {port} after {timeout} s")
        time.sleep(0.2)


def _worker_type(resources: dict[str, float], max_workers: int) -> dict[str, object]:
    return {"resources": resources, "node_config": {}, "min_workers": 0, "max_workers": max_workers}


def worker_nodes(cluster: RayCluster) -> list[dict[str, object]]:
    """The live nodes that have resources for jobs (not the head): id and resources."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import json, ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
         "print('NODES', json.dumps([{'id': n['NodeID'], 'resources': n['Resources']}"
         " for n in ray.nodes() if n['Alive']]))", cluster.gcs_address],
        capture_output=True, text=True, env=cluster.env, timeout=60,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("NODES ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"reading the cluster's nodes failed: {out.stderr[-2000:]}")
    nodes: list[dict[str, object]] = json.loads(lines[-1].removeprefix("NODES "))
    return [n for n in nodes if any(k in ("CPU", "GPU") for k in n["resources"])]  # type: ignore[attr-defined]


def take_worker(cluster: RayCluster, resource: str) -> int:
    """Take away the cluster's worker node that has ``resource``, as a cloud takes a spot
    VM back: its raylet and everything under it (the job's agent and ranks) are killed
    at once, with no notice. The processes killed."""
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if (
            "raylet" in (proc.info["name"] or "")
            and cluster.gcs_address in cmdline
            and resource in cmdline
        ):
            break
    else:
        raise AssertionError(f"no worker node with {resource} at {cluster.gcs_address}")
    doomed = [proc, *proc.children(recursive=True)]
    for victim in doomed:
        with contextlib.suppress(psutil.Error):
            victim.kill()
    return len(doomed)
