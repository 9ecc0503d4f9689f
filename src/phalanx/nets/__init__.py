"""Networks for phalanx's reference workload: ResNet-18/34/50/101/152 (v1.5).

Written here rather than taken from torchvision so the reference workload has
no dependency beyond torch. ``build_model("resnet50", 1000)`` is the usual way
in; :mod:`phalanx.nets.resnet` documents the architecture and initialisation.
"""

from phalanx.nets.resnet import (
    ARCHS,
    BasicBlock,
    Bottleneck,
    ResNet,
    build_model,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    resnet152,
)

__all__ = [
    "ARCHS",
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "build_model",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
]
