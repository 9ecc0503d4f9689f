"""How fast images reach the training loop: memory, local files, Azurite files, shards.

Five ways of feeding the same images, side by side, with the same decode and
augmentation (``TrainTransform``: random-resized crop to ``--size``, flip, to
``uint8``), the same batch size and the same number of DataLoader workers:

(a) **memory**: the JPEG bytes held in a list; the decode + augment ceiling;
(b) **local files**: an ImageFolder on local disk, one file read per image
    (the files were just written, so they come from the page cache);
(c) **Azurite files**: the same small files in an Azurite container, one GET
    per image (adlfs ``cat_file``), in every worker;
(d) **shards, cold**: the dataset converted to tar shards in Azurite, read by
    ``ShardDataset`` through ``CachedShardSource`` with an empty node cache
    (each shard downloaded once, while the workers decode);
(e) **shards, warm**: (d) again right after, every shard already cached.

A sixth row, *shards, local folder* (``LocalShardSource``), reads the local
conversion of the same images in place: against (e) it shows what the node
cache costs, against (a) what the shard reader costs.

Every figure is one full pass over the dataset (every image once), timed from
building the dataset and loader to the last batch, so it includes starting the
workers and, for (d), waiting for the first shards. The whole sequence runs
``--rounds`` times, each round with a fresh, empty cache for (d). Reported: the
median images/s per mode, and the ratios as the median of each round's ratio
(a round's modes share the machine's load). Goals from the data issue:
(e) ≥ 0.9 × (a), (d) ≥ 0.8 × (e), (d) ≥ 5 × (c).

Each pass also records CPU time per image: of this process and its DataLoader
workers (``getrusage``; the workers are joined at the end of a pass), and of
Azurite (``/proc/<pid>/stat``), which shares this machine's cores with the
loader but would run elsewhere in production. On a shared machine CPU time is
steadier than wall time, and it shows where the cycles of a mode go. Each goal
is also given as a ratio of CPU time per image (loader + Azurite): what the
throughput ratio would be if every mode kept all cores busy. Modes that wait
on requests, such as (c), look better by it than they are.

Localhost Azurite answers a GET in well under a millisecond, so (c) here pays
the per-request CPU cost but almost none of a real store's latency.

Azurite runs on this machine (``.tools/node_modules/.bin/azurite-blob``,
installed by ``make test``; or ``$PHALANX_AZURITE``) and is killed at the end.
The datastore is registered in a temporary ``PHALANX_HOME`` with its account
key referenced by an environment variable, as a user would register one.

Usage::

    .venv/bin/python benchmarks/data_loader.py [--classes 40] [--per-class 100]
        [--min-side 200] [--max-side 500] [--size 224] [--batch 32] [--workers 2]
        [--shard-mb 4] [--rounds 3] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import PIL
import torch
from torch.utils.data import DataLoader, Dataset

from phalanx.data.convert import convert_imagefolder, scan_imagefolder
from phalanx.data.images import TrainTransform, collate_uint8, sample_rng
from phalanx.data.sources import CachedShardSource
from phalanx.data.stream import LocalShardSource, ShardDataset, ShardSource, StatefulLoader
from phalanx.data.synthetic import make_imagefolder
from phalanx.storage.location import Location, local

REPO = Path(__file__).resolve().parents[1]
DATASTORE = "bench"
CONTAINER = "bench"
KEY_ENV = "PHALANX_BENCH_AZURITE_KEY"
SEED = 0
BATCH_TIMEOUT = 300  # seconds: a dead Azurite fails the run instead of hanging it

MODES = {
    "a": "memory (decode + augment ceiling)",
    "b": "local files (ImageFolder)",
    "c": "Azurite files (one GET each)",
    "d": "shards from Azurite, cold cache",
    "e": "shards from Azurite, warm cache",
    "local": "ref: shards, local folder",
}
GOALS = (("e", "a", 0.9), ("d", "e", 0.8), ("d", "c", 5.0))


class Augment:
    """The one decode + augment every mode applies: ``(jpeg, label, rng) -> (uint8 CHW, label)``."""

    def __init__(self, size: int) -> None:
        self.transform = TrainTransform(size)

    def __call__(self, jpeg: bytes, label: int, rng: np.random.Generator) -> Any:
        return self.transform(jpeg, rng), label


class _Images(Dataset[Any]):
    """A map-style dataset: sample ``i`` is ``read(i)`` decoded with a per-sample rng."""

    def __init__(self, labels: list[int], augment: Augment) -> None:
        self.labels, self.augment = labels, augment

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, i: int) -> bytes:
        raise NotImplementedError

    def __getitem__(self, i: int) -> Any:
        return self.augment(self.read(i), self.labels[i], sample_rng(SEED, 0, i))


class MemoryImages(_Images):
    """(a) The JPEG bytes, in a list."""

    def __init__(self, blobs: list[bytes], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.blobs = blobs

    def read(self, i: int) -> bytes:
        return self.blobs[i]


class FolderImages(_Images):
    """(b) One local file per image."""

    def __init__(self, paths: list[Path], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.paths = paths

    def read(self, i: int) -> bytes:
        return self.paths[i].read_bytes()


class BlobImages(_Images):
    """(c) One GET per image from a datastore folder, through adlfs.

    Each worker resolves the datastore itself: an adlfs file system made before a
    fork is not usable after it.
    """

    def __init__(self, uri: str, rels: list[str], labels: list[int], augment: Augment) -> None:
        super().__init__(labels, augment)
        self.uri, self.rels = uri, rels
        self._loc: Location | None = None
        self._pid = -1

    def read(self, i: int) -> bytes:
        if self._loc is None or self._pid != os.getpid():
            self._loc, self._pid = resolve_uri(self.uri), os.getpid()
        return bytes(self._loc.fs.cat_file(self._loc.child(self.rels[i]).path))


def resolve_uri(uri: str) -> Location:
    from phalanx.storage.uri import resolve
    from phalanx.workspace import Workspace

    ws = Workspace()
    try:
        return resolve(uri, ws)
    finally:
        ws.close()


def load_servers() -> Any:
    """``tests/servers.py`` (the Azurite launcher the tests use), imported by path."""
    spec = importlib.util.spec_from_file_location("phalanx_test_servers", REPO / "tests/servers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Pass:
    """One full pass of one mode."""

    images: int
    seconds: float
    cpu: float
    """CPU seconds of this process and its (joined) DataLoader workers."""
    server_cpu: float
    """CPU seconds of Azurite."""

    @property
    def rate(self) -> float:
        return self.images / self.seconds

    @property
    def cpu_per_image(self) -> float:
        return (self.cpu + self.server_cpu) / self.images


def _cpu_seconds() -> float:
    """CPU time of this process plus its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _process_cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` from ``/proc`` (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_proxy(azurite: Any, rtt_ms: float) -> tuple[subprocess.Popen[str], int]:
    """A latency proxy in front of Azurite (benchmarks/latency_proxy.py); its port."""
    from phalanx.launch.ports import free_port

    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "latency_proxy.py"), str(port),
         str(azurite.port), str(rtt_ms / 2)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proxy.stdout is not None
    if proxy.stdout.readline().strip() != "ready":
        raise RuntimeError("the latency proxy did not start")
    return proxy, port


def _server_cpu(pids: tuple[int, ...]) -> float:
    return sum(_process_cpu_seconds(pid) for pid in pids)


def timed_pass(build: Callable[[], Any], server_pids: tuple[int, ...]) -> Pass:
    """Build a loader and read one full pass, the build included."""
    cpu, server = _cpu_seconds(), _server_cpu(server_pids)
    start = time.perf_counter()
    images = 0
    for batch, _labels in build():
        images += len(batch)
    seconds = time.perf_counter() - start
    return Pass(
        images,
        seconds,
        _cpu_seconds() - cpu,
        _server_cpu(server_pids) - server,
    )


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "arch": platform.machine(),
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pillow": PIL.__version__,
    }


def prepare(args: argparse.Namespace, root: Path, servers: Any, azurite: Any) -> dict[str, Any]:
    """Generate the images, register the datastore, convert and upload; what the modes read."""
    from phalanx.storage.datastores import AzureBlobDatastore
    from phalanx.storage.registry import create_datastore
    from phalanx.storage.secrets import SecretRef
    from phalanx.workspace import Workspace

    t0 = time.perf_counter()
    folder = make_imagefolder(
        root / "imagefolder",
        args.classes,
        args.per_class,
        (args.min_side, args.max_side),
        seed=SEED,
    )
    scan = scan_imagefolder(folder)
    rels = [f.rel for f in scan.files]
    labels = [f.label for f in scan.files]
    blobs = [(folder / rel).read_bytes() for rel in rels]
    t1 = time.perf_counter()

    # Workers inherit both: they resolve the datastore URIs themselves.
    os.environ[KEY_ENV] = servers.AZURITE_KEY
    os.environ["PHALANX_HOME"] = str(root / "home")
    azurite.container(CONTAINER)
    ws = Workspace()
    try:
        store = AzureBlobDatastore(
            name=DATASTORE,
            account_name=servers.AZURITE_ACCOUNT,
            container_name=CONTAINER,
            endpoint=azurite.endpoint,
            protocol="http",
            credentials={"account_key": SecretRef(env=KEY_ENV)},
        )
        create_datastore(ws, store)
    finally:
        ws.close()
    raw_uri = f"azureml://datastores/{DATASTORE}/paths/raw"
    shards_uri = f"azureml://datastores/{DATASTORE}/paths/shards"
    raw = resolve_uri(raw_uri)
    raw.fs.pipe({raw.child(rel).path: data for rel, data in zip(rels, blobs, strict=True)})
    t2 = time.perf_counter()

    shard_bytes = int(args.shard_mb * 1e6)
    workers = len(os.sched_getaffinity(0))
    report = convert_imagefolder(
        folder, local(str(root / "shards")), shard_bytes=shard_bytes, workers=workers
    )
    convert_imagefolder(folder, resolve_uri(shards_uri), shard_bytes=shard_bytes, workers=workers)
    t3 = time.perf_counter()
    print(
        f"dataset: {len(rels)} JPEGs, {sum(map(len, blobs)) / 1e6:.1f} MB, "
        f"{report.shards} shards of ~{report.bytes / report.shards / 1e6:.1f} MB; "
        f"generated in {t1 - t0:.1f} s, uploaded in {t2 - t1:.1f} s, "
        f"converted (local + Azurite) in {t3 - t2:.1f} s",
        file=sys.stderr,
    )
    return {
        "rels": rels,
        "labels": labels,
        "blobs": blobs,
        "folder": folder,
        "raw_uri": raw_uri,
        "shards_uri": shards_uri,
        "images": len(rels),
        "bytes": sum(map(len, blobs)),
        "shards": report.shards,
    }


def run_round(
    args: argparse.Namespace, data: dict[str, Any], root: Path, azurite: Any, r: int
) -> dict[str, Pass]:
    """One pass per mode, in the order a, b, c, d, e, local."""
    augment = Augment(args.size)
    labels = data["labels"]

    def maps(ds: Dataset[Any]) -> Callable[[], Any]:
        def build() -> Any:
            return DataLoader(
                ds,
                batch_size=args.batch,
                shuffle=True,
                num_workers=args.workers,
                collate_fn=collate_uint8,
                generator=torch.Generator().manual_seed(r),
                timeout=BATCH_TIMEOUT if args.workers else 0,
            )

        return build

    def shards(source: Callable[[], ShardSource]) -> Callable[[], Any]:
        def build() -> Any:
            ds = ShardDataset(source(), seed=r, transform=augment, rank=0, world_size=1)
            return StatefulLoader(
                ds,
                batch_size=args.batch,
                num_workers=args.workers,
                collate_fn=collate_uint8,
                timeout=BATCH_TIMEOUT if args.workers else 0,
            )

        return build

    cache = tempfile.mkdtemp(prefix=f"cache-{r}-", dir=root)  # empty: (d) starts cold
    plan = {
        "a": maps(MemoryImages(data["blobs"], labels, augment)),
        "b": maps(FolderImages([data["folder"] / p for p in data["rels"]], labels, augment)),
        "c": maps(BlobImages(data["raw_uri"], data["rels"], labels, augment)),
        "d": shards(lambda: CachedShardSource(data["shards_uri"], cache_dir=cache)),
        "e": shards(lambda: CachedShardSource(data["shards_uri"], cache_dir=cache)),
        "local": shards(lambda: LocalShardSource(root / "shards")),
    }
    passes: dict[str, Pass] = {}
    for mode, build in plan.items():
        passes[mode] = p = timed_pass(build, getattr(azurite, "pids", (azurite.proc.pid,)))
        if azurite.proc.poll() is not None:
            raise RuntimeError(f"Azurite exited with {azurite.proc.returncode} during mode {mode}")
        if p.images != data["images"]:
            raise RuntimeError(f"mode {mode} read {p.images} images, expected {data['images']}")
        print(
            f"round {r + 1} {mode}: {p.rate:6.1f} img/s ({p.seconds:.2f} s; CPU loader "
            f"{p.cpu:.2f} s, Azurite {p.server_cpu:.2f} s)",
            file=sys.stderr,
        )
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 4000 images: a pass of the fastest mode takes seconds, so the fixed costs of a pass
    # (starting workers, the first shard) weigh little, as they do in a real epoch.
    parser.add_argument("--classes", type=int, default=40)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--min-side", type=int, default=200, help="smallest image side (px)")
    parser.add_argument("--max-side", type=int, default=500, help="largest image side (px)")
    parser.add_argument("--size", type=int, default=224, help="crop size after augmentation")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers, every mode")
    parser.add_argument("--shard-mb", type=float, default=4.0, help="target shard size (MB)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 x 20 images, 1 round")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=0.0,
        help="added round-trip time to Azurite (a latency proxy), to read it as a remote store",
    )
    args = parser.parse_args()
    if args.quick:
        args.classes, args.per_class, args.rounds, args.shard_mb = 4, 20, 1, 0.5
    if min(args.classes, args.per_class, args.rounds, args.batch) < 1 or args.workers < 0:
        parser.error("--classes, --per-class, --rounds and --batch must be >= 1, --workers >= 0")

    servers = load_servers()
    host = machine()
    with tempfile.TemporaryDirectory(prefix="phalanx-data-bench-") as tmp:
        root = Path(tmp)
        azurite = servers.start_azurite(root / "azurite")
        proxy = None
        try:
            if args.rtt_ms > 0:
                proxy = start_proxy(azurite, args.rtt_ms)
                azurite.port, azurite.pids = proxy[1], (azurite.proc.pid, proxy[0].pid)
            data = prepare(args, root, servers, azurite)
            rounds = [run_round(args, data, root, azurite, r) for r in range(args.rounds)]
        finally:
            if proxy is not None:
                proxy[0].kill()
                proxy[0].wait()
            servers.stop(azurite)

    def median(mode: str, value: Callable[[Pass], float]) -> float:
        return statistics.median(value(r[mode]) for r in rounds)

    medians = {m: median(m, lambda p: p.rate) for m in MODES}
    ratios = {
        f"{num}/{den}": statistics.median(r[num].rate / r[den].rate for r in rounds)
        for num, den, _ in GOALS
    }
    # The same ratios from CPU time per image (loader + Azurite: both use these cores).
    # A CPU-bound loader's throughput is cores / CPU per image, and CPU time hardly
    # depends on what else the machine runs; modes that wait on requests are overrated.
    cpu_ratios = {
        f"{num}/{den}": statistics.median(
            r[den].cpu_per_image / r[num].cpu_per_image for r in rounds
        )
        for num, den, _ in GOALS
    }
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])
    print(
        f"\ndata loading, {data['images']} JPEGs ({data['bytes'] / 1e6:.1f} MB, "
        f"{args.min_side}-{args.max_side} px) -> {args.size} px, batch {args.batch}, "
        f"{args.workers} workers, {data['shards']} shards; medians of {args.rounds} round(s)"
    )
    print(
        f"machine: {host['arch']}, {host['cores']} cores ({host['cpu']}), python "
        f"{host['python']}, torch {host['torch']}, Pillow {host['pillow']}\n"
    )
    print("| mode | img/s median | min | max | × (a) | CPU ms/img, loader | CPU ms/img, Azurite |")
    print("|---|---|---|---|---|---|---|")
    for m, label in MODES.items():
        rates = [r[m].rate for r in rounds]
        tag = f"({m}) " if len(m) == 1 else ""
        loader_ms = median(m, lambda p: 1000 * p.cpu / p.images)
        server_ms = median(m, lambda p: 1000 * p.server_cpu / p.images)
        print(
            f"| {tag}{label} | {medians[m]:.1f} | {min(rates):.1f} | {max(rates):.1f} | "
            f"{medians[m] / medians['a']:.2f} | {loader_ms:.2f} | {server_ms:.2f} |"
        )
    print()
    verdicts = {}
    for num, den, goal in GOALS:
        value = ratios[f"{num}/{den}"]
        verdicts[f"{num}/{den}"] = value >= goal
        per_round = ", ".join(f"{r[num].rate / r[den].rate:.2f}" for r in rounds)
        print(
            f"- ({num})/({den}) = {value:.2f} (goal ≥ {goal}): "
            f"{'PASS' if value >= goal else 'FAIL'}; per round {per_round}; "
            f"from CPU per image {cpu_ratios[f'{num}/{den}']:.2f}"
        )
    print(f"\ncommand: {command}")
    if args.json is not None:
        result = {
            "command": command,
            "machine": host,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "dataset": {k: data[k] for k in ("images", "bytes", "shards")},
            "modes": MODES,
            "rounds": [{m: asdict(p) for m, p in r.items()} for r in rounds],
            "median": medians,
            "ratios": ratios,
            "cpu_ratios": cpu_ratios,
            "pass": verdicts,
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
