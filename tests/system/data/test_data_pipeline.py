"""ImageFolder → shards on Azurite (through the CLI) → streamed back through the node cache."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from unittest import mock

from conftest import Cli, blob_datastore
from phalanx.data.sources import CachedShardSource, open_source
from phalanx.data.stream import ShardDataset, StatefulLoader
from phalanx.data.synthetic import make_imagefolder
from servers import Azurite


def _epoch(source: CachedShardSource | object, epoch: int, workers: int) -> list[tuple[bytes, int]]:
    ds = ShardDataset(source, seed=3, rank=0, world_size=1)  # type: ignore[arg-type]
    loader = StatefulLoader(ds, batch_size=5, num_workers=workers, collate_fn=list)
    loader.set_epoch(epoch)
    return [sample for batch in loader for sample in batch]


def _cache(cli: Cli) -> dict:
    return json.loads(cli.run("cache", "show", "--json", check=True).stdout)


def test_convert_to_azurite_then_stream_through_the_cache(
    cli: Cli, azurite: Azurite, tmp_path: Path
) -> None:
    blob_datastore(cli, azurite)
    src = make_imagefolder(tmp_path / "raw", classes=3, per_class=12, corrupt=2)
    uri = "azureml://datastores/blobs/paths/datasets/tiny"
    proc = cli.run("data", "convert", "imagefolder", str(src), uri, "--shard-size", "20k",
                   "--workers", "2", "--register", "tiny")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "36 images in" in proc.stdout and "2 file(s) skipped" in proc.stdout
    assert "corrupt_0.JPEG" in proc.stdout and "azureml:tiny:1" in proc.stdout

    with mock.patch.dict(os.environ, cli.env, clear=True):
        source = open_source("azureml:tiny@latest")
        assert isinstance(source, CachedShardSource)
        index = source.index()
        shards = len(index["shards"])
        assert index["samples"] == 36 and shards > 1
        first = _epoch(source, 0, workers=2)
        labels = collections.Counter(label for _, label in first)
        assert labels == {0: 12, 1: 12, 2: 12}
        assert len({jpeg for jpeg, _ in first}) == 36  # every sample once
        assert all(jpeg[:2] == b"\xff\xd8" for jpeg, _ in first)
        cached = _cache(cli)
        assert cached["entries"] == shards

        # Warm: a second epoch downloads nothing new and sees the same samples, reordered.
        entries = sorted(Path(cli.env["PHALANX_CACHE_DIR"]).rglob("shard-*.tar"))
        stamps = [p.stat().st_mtime_ns for p in entries]
        second = _epoch(source, 1, workers=0)
        assert sorted(second) == sorted(first) and second != first
        assert [p.stat().st_mtime_ns for p in entries] == stamps

        # A cached shard cut short is noticed and fetched again.
        entries[0].write_bytes(entries[0].read_bytes()[:1000])
        assert sorted(_epoch(source, 2, workers=0)) == sorted(first)
        assert entries[0].stat().st_size > 1000

    cleared = cli.run("cache", "clear", check=True)
    assert "freed" in cleared.stdout
    assert _cache(cli)["entries"] == 0


def test_convert_errors_are_one_line(cli: Cli, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(b"not really")
    dest = str(tmp_path / "out")
    for src, message in ((tmp_path / "missing", "no such folder"), (flat, "")):
        proc = cli.run("data", "convert", "imagefolder", str(src), dest)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
        assert message in proc.stderr and "Traceback" not in proc.stderr
    bad = cli.run("data", "convert", "imagefolder", str(flat), dest, "--shard-size", "lots")
    assert bad.returncode == 2 and "--shard-size" in bad.stderr
