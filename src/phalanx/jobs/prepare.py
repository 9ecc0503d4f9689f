"""Turn a validated spec into what the launcher needs: paths, values, command."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from phalanx.errors import PhalanxError
from phalanx.spec import InputSpec, JobSpec, interpolate, render_literal
from phalanx.workspace.layout import JobPaths


@dataclass(frozen=True)
class Prepared:
    command: str
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]
    env: Mapping[str, str]


def check_inputs(spec: JobSpec) -> None:
    """Fail before launch on an input this machine cannot provide.

    Raises:
        PhalanxError: naming the input and the path.
    """
    for name, value in spec.data_inputs().items():
        if not value.is_local:
            raise PhalanxError(
                f"inputs.{name}: {value.path!r} is not a local path; datastore URIs are not "
                "supported yet, so copy the data to a local folder and give its path"
            )
        path = value.local_path
        if value.type == "uri_file" and not path.is_file():
            raise PhalanxError(f"inputs.{name}: file {path} not found; fix `path` or create it")
        if value.type == "uri_folder" and not path.is_dir():
            raise PhalanxError(f"inputs.{name}: folder {path} not found; fix `path` or create it")


def check_outputs(spec: JobSpec) -> None:
    """Fail before launch on an output folder that cannot be written.

    Raises:
        PhalanxError: naming the output and the path.
    """
    for name, out in spec.outputs.items():
        if out.path is None:
            continue
        if not out.is_local:
            raise PhalanxError(
                f"outputs.{name}: {out.path!r} is not a local path; datastore URIs are not "
                "supported yet, so leave `path` out to write under the job's outputs folder"
            )
        existing = out.local_path
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise PhalanxError(
                f"outputs.{name}: cannot write {out.local_path} ({existing} is not a writable "
                "folder); fix `path` or its permissions"
            )


def prepare(spec: JobSpec, paths: JobPaths) -> Prepared:
    """Resolve inputs and outputs to local paths and substitute them into the command."""
    check_inputs(spec)
    check_outputs(spec)
    inputs: dict[str, str] = {}
    for name, value in spec.inputs.items():
        inputs[name] = (
            str(value.local_path) if isinstance(value, InputSpec) else render_literal(value)
        )
    outputs: dict[str, str] = {}
    for name, out in spec.outputs.items():
        folder = paths.outputs / name if out.path is None else out.local_path
        target = folder.parent if out.type == "uri_file" else folder
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PhalanxError(f"outputs.{name}: cannot create {target}: {exc.strerror}") from exc
        outputs[name] = str(folder)
    # The built-in output (a spec cannot declare one of that name).
    references = {**outputs, "checkpoints": str(paths.checkpoints)}
    command = interpolate(spec.command, inputs, references)
    env = {k: str(v) for k, v in spec.environment_variables.items()}
    return Prepared(command=command, inputs=inputs, outputs=outputs, env=env)
