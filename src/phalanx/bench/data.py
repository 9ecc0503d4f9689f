"""How fast images reach the training loop: memory, local files, Azurite files, shards.

Run as ``phalanx bench data [options]`` or ``.venv/bin/python
benchmarks/data_loader.py [options]`` (the same options). Five ways of feeding
the same images, side by side, with the same decode and augmentation
(``TrainTransform``: random-resized crop to ``--size``, flip, to ``uint8``), the
same batch size and the same number of DataLoader workers:

(a) **memory**: the JPEG bytes held in a list; the decode + augment ceiling;
(b) **local files**: an ImageFolder on local disk, one file read per image
    (the files were just written, so they come from the page cache);
(c) **Azurite files**: the same small files in an Azurite container, one GET
    per image (adlfs ``cat_file``), in every worker;
(d) **shards, cold**: the dataset converted to tar shards in Azurite, read by
    ``ShardDataset`` through ``CachedShardSource`` with an empty node cache
    (each shard downloaded once, while the workers decode);
(e) **shards, warm**: (d) again right after, every shard already cached.

A sixth mode, ``local`` (*shards, local folder*, ``LocalShardSource``), reads
the local conversion of the same images in place: against (e) it shows what the
node cache costs, against (a) what the shard reader costs. ``--modes`` picks
some of them; without c, d and e no Azurite is needed.

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
the per-request CPU cost but almost none of a real store's latency;
``--rtt-ms N`` puts a latency proxy (:mod:`phalanx.bench.latency_proxy`) in
front of it. Azurite is found as :mod:`phalanx.bench.azurite` says and killed
at the end. The datastore is registered in a temporary ``PHALANX_HOME`` with
its account key referenced by an environment variable, as a user would
register one.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from phalanx.bench.data_modes import SEED, Pass, resolve_uri, run_round, start_proxy
from phalanx.bench.host import machine
from phalanx.errors import PhalanxError

DATASTORE = "bench"
CONTAINER = "bench"
KEY_ENV = "PHALANX_BENCH_AZURITE_KEY"

MODES = {
    "a": "memory (decode + augment ceiling)",
    "b": "local files (ImageFolder)",
    "c": "Azurite files (one GET each)",
    "d": "shards from Azurite, cold cache",
    "e": "shards from Azurite, warm cache",
    "local": "ref: shards, local folder",
}
REMOTE_MODES = ("c", "d", "e")
GOALS = (("e", "a", 0.9), ("d", "e", 0.8), ("d", "c", 5.0))


@dataclass(frozen=True, kw_only=True)
class DataBenchConfig:
    """The data-loading benchmark's options (the command line's, one for one)."""

    # 4000 images: a pass of the fastest mode takes seconds, so the fixed costs of a
    # pass (starting workers, the first shard) weigh little, as they do in a real epoch.
    classes: int = 40
    per_class: int = 100
    min_side: int = 200
    """Smallest generated image side (px)."""
    max_side: int = 500
    size: int = 224
    """Crop size after augmentation."""
    batch: int = 32
    workers: int = 2
    """DataLoader workers, every mode."""
    shard_mb: float = 4.0
    """Target shard size (MB)."""
    rounds: int = 3
    rtt_ms: float = 0.0
    """Round-trip time added in front of Azurite (a latency proxy)."""
    modes: tuple[str, ...] = tuple(MODES)

    def __post_init__(self) -> None:
        for name in ("classes", "per_class", "rounds", "batch", "size"):
            if getattr(self, name) < 1:
                raise PhalanxError(f"--{name.replace('_', '-')} must be at least 1")
        if self.workers < 0 or self.rtt_ms < 0 or self.shard_mb <= 0:
            raise PhalanxError("--workers and --rtt-ms must not be negative, --shard-mb > 0")
        if not 1 <= self.min_side <= self.max_side:
            raise PhalanxError("--min-side must be at least 1 and at most --max-side")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise PhalanxError(f"--modes {','.join(self.modes)!r}: choose among {', '.join(MODES)}")
        if "e" in self.modes and "d" not in self.modes:
            raise PhalanxError("--modes: e (warm cache) is only warm after d; add d")

    @property
    def remote(self) -> bool:
        """Whether a mode reads from Azurite."""
        return any(m in REMOTE_MODES for m in self.modes)


def quick(config: DataBenchConfig) -> DataBenchConfig:
    """What ``--quick`` makes of ``config``: a smoke run of 4 × 20 images, one round."""
    return replace(config, classes=4, per_class=20, rounds=1, shard_mb=0.5)


def parse_modes(raw: str) -> tuple[str, ...]:
    """``"a,b,local"`` → ``("a", "b", "local")`` in the benchmark's own order."""
    wanted = {m.strip() for m in raw.split(",") if m.strip()}
    return tuple(m for m in MODES if m in wanted) + tuple(sorted(wanted - set(MODES)))


def prepare(config: DataBenchConfig, root: Path, azurite: Any) -> dict[str, Any]:
    """Generate the images, convert them and (for remote modes) upload; what the modes read."""
    from phalanx.data.convert import convert_imagefolder, scan_imagefolder
    from phalanx.data.synthetic import make_imagefolder
    from phalanx.storage.location import local

    t0 = time.perf_counter()
    sides = (config.min_side, config.max_side)
    folder = make_imagefolder(root / "imagefolder", config.classes, config.per_class, sides, SEED)
    scan = scan_imagefolder(folder)
    rels = [f.rel for f in scan.files]
    blobs = [(folder / rel).read_bytes() for rel in rels]
    t1 = time.perf_counter()
    raw_uri = f"azureml://datastores/{DATASTORE}/paths/raw"
    shards_uri = f"azureml://datastores/{DATASTORE}/paths/shards"
    if azurite is not None:
        register_datastore(root, azurite)
        raw = resolve_uri(raw_uri)
        raw.fs.pipe({raw.child(rel).path: data for rel, data in zip(rels, blobs, strict=True)})
    t2 = time.perf_counter()
    shard_bytes = int(config.shard_mb * 1e6)
    workers = len(os.sched_getaffinity(0))
    report = convert_imagefolder(
        folder, local(str(root / "shards")), shard_bytes=shard_bytes, workers=workers
    )
    if azurite is not None:
        target = resolve_uri(shards_uri)
        convert_imagefolder(folder, target, shard_bytes=shard_bytes, workers=workers)
    t3 = time.perf_counter()
    print(
        f"dataset: {len(rels)} JPEGs, {sum(map(len, blobs)) / 1e6:.1f} MB, "
        f"{report.shards} shards of ~{report.bytes / report.shards / 1e6:.1f} MB; "
        f"generated in {t1 - t0:.1f} s, uploaded in {t2 - t1:.1f} s, "
        f"converted in {t3 - t2:.1f} s",
        file=sys.stderr,
    )
    return {
        "rels": rels,
        "labels": [f.label for f in scan.files],
        "blobs": blobs,
        "folder": folder,
        "raw_uri": raw_uri,
        "shards_uri": shards_uri,
        "images": len(rels),
        "bytes": sum(map(len, blobs)),
        "shards": report.shards,
    }


def register_datastore(root: Path, azurite: Any) -> None:
    """The Azurite container as datastore ``bench`` of a private workspace under ``root``."""
    from phalanx.bench import azurite as server
    from phalanx.storage.datastore_records import create_datastore
    from phalanx.storage.datastores import AzureBlobDatastore
    from phalanx.storage.secrets import SecretRef
    from phalanx.workspace import Workspace

    # DataLoader workers inherit both and resolve the datastore URIs themselves.
    os.environ[KEY_ENV] = server.KEY
    os.environ["PHALANX_HOME"] = str(root / "home")
    azurite.container(CONTAINER)
    ws = Workspace()
    try:
        store = AzureBlobDatastore(
            name=DATASTORE,
            account_name=server.ACCOUNT,
            container_name=CONTAINER,
            endpoint=azurite.endpoint,
            protocol="http",
            credentials={"account_key": SecretRef(env=KEY_ENV)},
        )
        create_datastore(ws, store)
    finally:
        ws.close()


def _check_remote_deps() -> None:
    try:
        import adlfs  # noqa: F401
        import azure.storage.blob  # noqa: F401
    except ImportError:
        raise PhalanxError(
            "modes c, d and e read Azure Blob storage, which needs the azure extra: "
            "pip install 'phalanx[azure]' (or leave them out with --modes a,b,local)"
        ) from None


def run(config: DataBenchConfig) -> tuple[dict[str, Any], list[dict[str, Pass]]]:
    """Prepare the dataset once, then run every round; the dataset's facts and the passes.

    Raises:
        PhalanxError: a remote mode is asked for and Azurite or the azure extra is missing.
    """
    from phalanx.bench import azurite as server

    if config.remote:
        _check_remote_deps()
        server.find_azurite()  # before generating anything
    home = os.environ.get("PHALANX_HOME")
    try:
        with tempfile.TemporaryDirectory(prefix="phalanx-data-bench-") as tmp:
            root = Path(tmp)
            azurite = server.start(root / "azurite") if config.remote else None
            proxy = None
            try:
                if azurite is not None and config.rtt_ms > 0:
                    proxy, azurite.port = start_proxy(azurite.port, config.rtt_ms)
                    azurite.extra_pids = (proxy.pid,)
                data = prepare(config, root, azurite)
                rounds = [run_round(config, data, root, azurite, r) for r in range(config.rounds)]
            finally:
                if proxy is not None:
                    proxy.kill()
                    proxy.wait()
                if azurite is not None:
                    server.stop(azurite)
    finally:
        # The benchmark's private workspace is gone: leave the caller's as it was.
        if home is None:
            os.environ.pop("PHALANX_HOME", None)
        else:
            os.environ["PHALANX_HOME"] = home
    return data, rounds


def summarise(
    config: DataBenchConfig,
    data: dict[str, Any],
    rounds: list[dict[str, Pass]],
    command: str,
) -> dict[str, Any]:
    """Print the table and the goals (stdout) and return everything as a JSON-able dict."""
    modes = [m for m in MODES if m in config.modes]

    def median(mode: str, value: Callable[[Pass], float]) -> float:
        return statistics.median(value(r[mode]) for r in rounds)

    medians = {m: median(m, lambda p: p.rate) for m in modes}
    goals = [(n, d, g) for n, d, g in GOALS if n in modes and d in modes]
    ratios = {
        f"{n}/{d}": statistics.median(r[n].rate / r[d].rate for r in rounds) for n, d, _ in goals
    }
    # The same ratios from CPU time per image (loader + Azurite: both use these cores).
    # A CPU-bound loader's throughput is cores / CPU per image, and CPU time hardly
    # depends on what else the machine runs; modes that wait on requests are overrated.
    cpu_ratios = {
        f"{n}/{d}": statistics.median(r[d].cpu_per_image / r[n].cpu_per_image for r in rounds)
        for n, d, _ in goals
    }
    host = machine()
    print(
        f"\ndata loading, {data['images']} JPEGs ({data['bytes'] / 1e6:.1f} MB, "
        f"{config.min_side}-{config.max_side} px) -> {config.size} px, batch {config.batch}, "
        f"{config.workers} workers, {data['shards']} shards; medians of {config.rounds} round(s)"
    )
    print(
        f"machine: {host['arch']}, {host['cores']} cores ({host['cpu']}), python "
        f"{host['python']}, torch {host['torch']}, Pillow {host['pillow']}\n"
    )
    print("| mode | img/s median | min | max | × (a) | CPU ms/img, loader | CPU ms/img, Azurite |")
    print("|---|---|---|---|---|---|---|")
    for m in modes:
        rates = [r[m].rate for r in rounds]
        tag = f"({m}) " if len(m) == 1 else ""
        vs_a = f"{medians[m] / medians['a']:.2f}" if "a" in medians else "–"
        loader_ms = median(m, lambda p: 1000 * p.cpu / p.images)
        server_ms = median(m, lambda p: 1000 * p.server_cpu / p.images)
        print(
            f"| {tag}{MODES[m]} | {medians[m]:.1f} | {min(rates):.1f} | {max(rates):.1f} | "
            f"{vs_a} | {loader_ms:.2f} | {server_ms:.2f} |"
        )
    print()
    verdicts = {}
    for n, d, goal in goals:
        value = ratios[f"{n}/{d}"]
        verdicts[f"{n}/{d}"] = value >= goal
        per_round = ", ".join(f"{r[n].rate / r[d].rate:.2f}" for r in rounds)
        print(
            f"- ({n})/({d}) = {value:.2f} (goal ≥ {goal}): "
            f"{'PASS' if value >= goal else 'FAIL'}; per round {per_round}; "
            f"from CPU per image {cpu_ratios[f'{n}/{d}']:.2f}"
        )
    print(f"\ncommand: {command}")
    return {
        "command": command,
        "machine": host,
        "args": {f.name: getattr(config, f.name) for f in fields(config)},
        "dataset": {k: data[k] for k in ("images", "bytes", "shards")},
        "modes": {m: MODES[m] for m in modes},
        "rounds": [{m: asdict(p) for m, p in r.items()} for r in rounds],
        "median": medians,
        "ratios": ratios,
        "cpu_ratios": cpu_ratios,
        "pass": verdicts,
    }


def run_and_report(config: DataBenchConfig, command: str, json_path: Path | None) -> dict[str, Any]:
    """The whole benchmark: run, print, and write the JSON when asked; the summary."""
    data, rounds = run(config)
    result = summarise(config, data, rounds, command)
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    return result
