"""Published ResNet-50 v1.5 training figures to read ours against.

Only figures found in the named source are listed; a GPU with no such figure
is left out rather than estimated. All are one GPU at 224 px, in NVIDIA's
PyTorch implementation (DeepLearningExamples ``Classification/ConvNets``,
channels_last for AMP); NVIDIA's read ImageNet, Lambda's synthetic data.
"tf32" is NVIDIA's fp32 mode on Ampere and newer GPUs; V100 has no TF32, so
its full-precision figure is fp32.

Figures move with the container, driver and batch size: the two sources
disagree by about 1.5× on the A100 with AMP (a 2021 NGC container and batch 256
against a 2022 container and batch 1280). Read ours against the source with the
closest set-up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where published figures come from."""

    name: str
    """Short name, for a table's column."""
    title: str
    """The document, with enough to find the table in it."""
    url: str


NVIDIA_DLE = Source(
    name="NVIDIA DLE README",
    title="NVIDIA DeepLearningExamples, “ResNet50 v1.5 For PyTorch”, README, “Training "
    "performance results” (pytorch-21.03 NGC container); batch sizes from the repository's "
    "PyTorch/Classification/ConvNets/configs.yml",
    url="https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/"
    "ConvNets/resnet50v1.5",
)
LAMBDA = Source(
    name="Lambda 2023",
    title="Lambda, “Deep Learning GPU Benchmarks”, PyTorch training 2023 (NGC PyTorch 22.10, "
    "synthetic data); the figures are in github.com/lambdal/deeplearning-benchmark, "
    "pytorch/pytorch-train-throughput-fp16.csv and -fp32.csv, the batch sizes in "
    "pytorch/scripts/config_v1/config_pytorch_80GB.sh",
    url="https://lambdalabs.com/gpu-benchmarks",
)


@dataclass(frozen=True, kw_only=True)
class Anchor:
    """One published figure: ResNet-50 v1.5 training images/sec on one GPU."""

    gpu: str
    precision: str
    """``amp`` (fp16 autocast with loss scaling), ``tf32`` or ``fp32``."""
    batch_size: int
    """Images per GPU per step."""
    img_per_sec: float
    source: Source


ANCHORS: tuple[Anchor, ...] = (
    Anchor(gpu="V100 16GB (DGX-1)", precision="fp32", batch_size=112, img_per_sec=367,
           source=NVIDIA_DLE),
    Anchor(gpu="V100 16GB (DGX-1)", precision="amp", batch_size=256, img_per_sec=1200,
           source=NVIDIA_DLE),
    Anchor(gpu="A100 80GB (DGX A100)", precision="tf32", batch_size=256, img_per_sec=938,
           source=NVIDIA_DLE),
    Anchor(gpu="A100 80GB (DGX A100)", precision="amp", batch_size=256, img_per_sec=2470,
           source=NVIDIA_DLE),
    Anchor(gpu="A100 80GB SXM4", precision="amp", batch_size=1280, img_per_sec=1582,
           source=LAMBDA),
    Anchor(gpu="H100 80GB SXM5", precision="tf32", batch_size=640, img_per_sec=1753,
           source=LAMBDA),
    Anchor(gpu="H100 80GB SXM5", precision="amp", batch_size=1280, img_per_sec=2616,
           source=LAMBDA),
)  # fmt: skip
"""Per-GPU figures, one GPU each, oldest GPU first."""


def sources() -> list[Source]:
    """The sources of :data:`ANCHORS`, each once, in order of first use."""
    return list(dict.fromkeys(a.source for a in ANCHORS))
