"""phalanx's Python SDK, in the shape of Azure ML's v2 SDK (``azure.ai.ml``).

An Azure ML script for a command job runs with its ``azure.ai.ml`` imports
changed to ``phalanx.ml``::

    from phalanx.ml import MLClient, command, Input, Output
    from phalanx.ml.entities import PyTorchDistribution

    ml_client = MLClient()  # PHALANX_SERVER's workspace, else PHALANX_HOME's
    job = command(
        code="./src",
        command="python train.py --data ${{inputs.data}} --out ${{outputs.model}}",
        inputs={"data": Input(type="uri_folder", path="./data")},
        outputs={"model": Output(type="uri_folder")},
        instance_count=2,
        distribution=PyTorchDistribution(process_count_per_instance=2),
    )
    returned = ml_client.jobs.create_or_update(job)
    ml_client.jobs.stream(returned.name)

What ``command()`` builds is the mapping a ``job.yml`` holds, validated by
the loader ``phalanx job create`` uses (:mod:`phalanx.spec`), and submitted
through the interface the CLI calls (:mod:`phalanx.service.jobs`). Errors
are :class:`MLError` (a :class:`~phalanx.errors.PhalanxError`), one line
naming the argument. See ``docs/sdk.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

from phalanx.ml.builders import command
from phalanx.ml.client import MLClient
from phalanx.ml.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from phalanx.ml.entities.io import Input, Output
from phalanx.ml.entities.job import Command
from phalanx.ml.errors import JobFailed, MLError


def load_job(source: str | os.PathLike[str]) -> Command:
    """A job from a ``job.yml``, validated (errors name the file's lines), to submit
    with ``ml_client.jobs.create_or_update``.

    Raises:
        PhalanxError: the file cannot be read.
        SpecError: the spec is invalid.
    """
    from phalanx.ml.records import command_from_spec
    from phalanx.service.jobs import SpecText
    from phalanx.spec.yamldoc import read_yaml

    spec_text = SpecText.read(source)
    spec_text.load()
    data, _ = read_yaml(spec_text.text, spec_text.source)
    data.pop("$schema", None)
    data.pop("type", None)
    return command_from_spec(data, Path(spec_text.base_dir))


__all__ = [
    "Input",
    "JobFailed",
    "MLClient",
    "MLError",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "TensorFlowDistribution",
    "command",
    "load_job",
]
