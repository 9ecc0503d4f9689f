"""Sweep jobs, as Azure ML's ``azure.ai.ml.sweep`` names their parts.

A command's inputs replaced by distributions are searched::

    from phalanx.ml import command
    from phalanx.ml.sweep import BanditPolicy, Choice, Uniform

    job = command(code="./src", command="python train.py --lr ${{inputs.lr}}",
                  inputs={"lr": 0.01})
    sweep_job = job(lr=Uniform(min_value=0.001, max_value=0.1)).sweep(
        sampling_algorithm="random", primary_metric="acc", goal="Maximize",
        early_termination_policy=BanditPolicy(slack_factor=0.2),
    )
    sweep_job.set_limits(max_total_trials=8, max_concurrent_trials=2)
    ml_client.jobs.create_or_update(sweep_job)

:class:`AshaPolicy` and :class:`HyperbandPolicy` are phalanx's additions. See
``docs/sdk.md``.
"""

from phalanx.ml.entities.search_space import (
    Choice,
    LogNormal,
    LogUniform,
    Normal,
    QLogNormal,
    QLogUniform,
    QNormal,
    QUniform,
    Randint,
    SweepDistribution,
    Uniform,
)
from phalanx.ml.entities.sweep_job import SweepJob, SweepTrial
from phalanx.ml.entities.sweep_settings import (
    AshaPolicy,
    BanditPolicy,
    BayesianSamplingAlgorithm,
    EarlyTerminationPolicy,
    GridSamplingAlgorithm,
    HyperbandPolicy,
    MedianStoppingPolicy,
    Objective,
    RandomSamplingAlgorithm,
    SamplingAlgorithm,
    SweepJobLimits,
    TruncationSelectionPolicy,
)

__all__ = [
    "AshaPolicy",
    "BanditPolicy",
    "BayesianSamplingAlgorithm",
    "Choice",
    "EarlyTerminationPolicy",
    "GridSamplingAlgorithm",
    "HyperbandPolicy",
    "LogNormal",
    "LogUniform",
    "MedianStoppingPolicy",
    "Normal",
    "Objective",
    "QLogNormal",
    "QLogUniform",
    "QNormal",
    "QUniform",
    "Randint",
    "RandomSamplingAlgorithm",
    "SamplingAlgorithm",
    "SweepDistribution",
    "SweepJob",
    "SweepJobLimits",
    "SweepTrial",
    "TruncationSelectionPolicy",
    "Uniform",
]
