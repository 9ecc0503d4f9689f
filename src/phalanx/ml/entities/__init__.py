"""The entities of Azure ML's ``azure.ai.ml.entities`` that phalanx has."""

from phalanx.ml.distribution import MpiDistribution, PyTorchDistribution, TensorFlowDistribution
from phalanx.ml.entities.assets import BuildContext, Data, Environment, Model
from phalanx.ml.entities.identity import (
    AmlTokenConfiguration,
    ManagedIdentityConfiguration,
    UserIdentityConfiguration,
)
from phalanx.ml.entities.io import Input, Output
from phalanx.ml.entities.job import (
    Command,
    CommandJobLimits,
    JobResourceConfiguration,
    JobService,
    QueueSettings,
)
from phalanx.ml.entities.resources import (
    AccountKeyConfiguration,
    AmlCompute,
    AzureBlobDatastore,
    Compute,
    Datastore,
    SasTokenConfiguration,
)
from phalanx.ml.entities.sweep_job import SweepJob, SweepTrial
from phalanx.ml.entities.sweep_settings import SweepJobLimits

# Azure ML's names for what ml_client.jobs returns.
Job = Command
CommandJob = Command

__all__ = [
    "AccountKeyConfiguration",
    "AmlCompute",
    "AmlTokenConfiguration",
    "AzureBlobDatastore",
    "BuildContext",
    "Command",
    "CommandJob",
    "CommandJobLimits",
    "Compute",
    "Data",
    "Datastore",
    "Environment",
    "Input",
    "Job",
    "JobResourceConfiguration",
    "JobService",
    "ManagedIdentityConfiguration",
    "Model",
    "MpiDistribution",
    "Output",
    "PyTorchDistribution",
    "QueueSettings",
    "SasTokenConfiguration",
    "SweepJob",
    "SweepJobLimits",
    "SweepTrial",
    "TensorFlowDistribution",
    "UserIdentityConfiguration",
]
