"""The test-only compute kind ``fake`` (tests/plugins/phalanx_fake_kind.py), installed
into a folder as a package would be: the module and a ``*.dist-info`` whose
``entry_points.txt`` registers it. With that folder on ``PYTHONPATH`` (or ``sys.path``),
every phalanx process finds the kind through ``importlib.metadata``."""

from __future__ import annotations

import shutil
from pathlib import Path

MODULE = Path(__file__).with_name("plugins") / "phalanx_fake_kind.py"
NAME = "fake"


def install(folder: Path) -> Path:
    """Put the fake kind's module and metadata into ``folder`` (made readable by every
    account: a walled-off job's supervisor imports it too); ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(MODULE, folder / MODULE.name)
    meta = folder / "phalanx_fake_kind-0.1.dist-info"
    meta.mkdir(exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: phalanx-fake-kind\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(
        f"[phalanx.compute_kinds]\n{NAME} = phalanx_fake_kind:KIND\n"
    )
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder
