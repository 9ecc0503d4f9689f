"""Make the demo's dataset once: a small ImageNet-layout folder, as shards in the default datastore.

``make demo`` runs this before the job. It generates 10 classes of synthetic
photos (each class tinted its own colour, so accuracy can rise), converts the
train and val folders into phalanx shards under the workspace's ``default``
datastore, and registers them as the data asset ``imagenet-demo``; the job
reads ``azureml:imagenet-demo@latest``. A second run finds the asset and does
nothing.

    python examples/imagenet/prepare_demo_data.py [--classes 10 --train 80 --val 20]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from phalanx.data.convert import convert_imagefolder
from phalanx.data.synthetic import make_imagefolder
from phalanx.errors import PhalanxError
from phalanx.storage.assets import create_asset, get_asset
from phalanx.storage.uri import resolve
from phalanx.workspace import Workspace

ASSET = "imagenet-demo"
DATASTORE_PATH = "azureml://datastores/default/paths/imagenet-demo"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train", type=int, default=80, help="training images per class")
    p.add_argument("--val", type=int, default=20, help="validation images per class")
    args = p.parse_args()
    ws = Workspace()
    try:
        asset = get_asset(ws, ASSET)
        print(f"data asset {asset.uri} exists ({asset.path}); nothing to do")
        return
    except PhalanxError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        for split, per_class, seed in (("train", args.train, 1), ("val", args.val, 2)):
            raw = make_imagefolder(
                Path(tmp, split), args.classes, per_class, (72, 160), seed, learnable=True
            )
            dest = resolve(f"{DATASTORE_PATH}/{split}", ws)
            report = convert_imagefolder(raw, dest, shard_bytes=512_000, workers=2, overwrite=True)
            print(f"{split}: {report.samples} images, {report.shards} shards → {report.index_url}")
    asset = create_asset(ws, name=ASSET, path=DATASTORE_PATH, description="the demo's dataset")
    print(f"data asset {asset.uri} created → {asset.path}")


if __name__ == "__main__":
    main()
