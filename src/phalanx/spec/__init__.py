"""The job spec: Azure ML v2 *command job* YAML, validated into a :class:`JobSpec`.

Example::

    spec = load_spec("job.yml", overrides=["resources.instance_count=2"])
    spec.check_supported()  # refuse what the schema accepts but phalanx cannot run
    spec.world_size, spec.data_inputs()["data"].local_path

Modules: ``values`` (shared value rules), ``parts`` (component models), ``job``
(JobSpec), ``interpolate`` (``${{inputs.x}}``), ``yamldoc`` (YAML with line
numbers), ``overrides`` (``--set``), ``messages`` (pydantic errors → SpecError),
``loader`` (the entry points).
"""

from phalanx.spec.interpolate import REFERENCE_RE, interpolate
from phalanx.spec.job import JobSpec, LiteralValue
from phalanx.spec.loader import load_any_text, load_spec, load_spec_text
from phalanx.spec.parts import (
    InputSpec,
    Limits,
    MpiDistribution,
    OutputSpec,
    PyTorchDistribution,
    QueueSettings,
    Resources,
    Retry,
    TensorFlowDistribution,
)
from phalanx.spec.sweep import SweepSpec
from phalanx.spec.values import render_literal

__all__ = [
    "REFERENCE_RE",
    "InputSpec",
    "JobSpec",
    "Limits",
    "LiteralValue",
    "MpiDistribution",
    "OutputSpec",
    "PyTorchDistribution",
    "QueueSettings",
    "Resources",
    "Retry",
    "SweepSpec",
    "TensorFlowDistribution",
    "interpolate",
    "load_any_text",
    "load_spec",
    "load_spec_text",
    "render_literal",
]
