"""Load a job spec: YAML file → ``--set`` overrides → validated :class:`JobSpec`.

Every mistake becomes a :class:`~phalanx.errors.SpecError` that names the
field and its line (``job.yml:7: resources.instance_count: must be at least 1;
got 0``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from phalanx.errors import PhalanxError
from phalanx.spec.job import JobSpec
from phalanx.spec.messages import to_spec_error
from phalanx.spec.overrides import apply_overrides
from phalanx.spec.sweep import SweepSpec, is_sweep
from phalanx.spec.yamldoc import read_text, read_yaml


def load_spec(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> JobSpec:
    """Read and validate the job spec file at ``path``.

    Relative paths in it (``code``, local inputs and outputs) are resolved
    against the file's folder.

    Args:
        path: The ``job.yml``.
        overrides: ``--set key=value`` items, applied before validation.

    Raises:
        PhalanxError: The file does not exist or cannot be read.
        SpecError: The spec is invalid.
    """
    text = read_spec_file(path)
    return load_spec_text(
        text, source=str(path), base_dir=Path(path).absolute().parent, overrides=overrides
    )


def read_spec_file(path: str | os.PathLike[str]) -> str:
    """The text of the job spec file at ``path``.

    Raises:
        PhalanxError: The file does not exist or cannot be read.
        SpecError: The file is not UTF-8 text, or larger than a spec may be.
    """
    file = Path(path)
    if not file.exists():
        raise PhalanxError(f"job spec file '{path}' not found; check the path given to -f")
    if not file.is_file():
        raise PhalanxError(f"job spec '{path}' is not a file; give the path of a job.yml")
    try:
        return read_text(file, str(path))
    except OSError as exc:
        raise PhalanxError(f"cannot read job spec file '{path}': {exc.strerror}") from exc


def load_spec_text(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path | None = None,
    overrides: Sequence[str] = (),
) -> JobSpec:
    """Validate a job spec given as YAML text.

    Args:
        text: The YAML document.
        source: Name used in errors.
        base_dir: Folder relative paths resolve against; the current directory
            when ``None``.
        overrides: ``--set key=value`` items, applied before validation.

    Raises:
        SpecError: The spec is invalid.
    """
    spec = load_any_text(text, source=source, base_dir=base_dir, overrides=overrides)
    if isinstance(spec, SweepSpec):
        raise spec.error(
            "type", "a sweep job is not a command job here; submit it with phalanx job create"
        )
    return spec


def load_any_text(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path | None = None,
    overrides: Sequence[str] = (),
) -> JobSpec | SweepSpec:
    """Validate a command job or a sweep job (``type: sweep``) given as YAML text.

    Raises:
        SpecError: The spec is invalid.
    """
    data, lines = read_yaml(text, source)
    applied = apply_overrides(data, overrides, source)
    base = Path(base_dir if base_dir is not None else Path.cwd()).absolute()
    model: type[JobSpec] | type[SweepSpec] = JobSpec
    if is_sweep(data):
        data["type"] = "sweep"
        model = SweepSpec
    try:
        spec = model.model_validate(data, context={"base_dir": base})
    except ValidationError as exc:
        raise to_spec_error(
            exc, data, source=source, lines=lines, overrides=applied, root=model
        ) from None
    spec._source = source
    spec._lines = lines
    spec._text = text
    return spec
