"""ResNet v1.5 for ImageNet-style classification, written for phalanx.

The architecture is He et al., "Deep Residual Learning for Image Recognition"
(2015), in the "v1.5" form that NVIDIA's and MLPerf's reference workloads use:
in a bottleneck block that downsamples, the stride sits on the 3x3 convolution,
not on the first 1x1. v1.5 costs a little more compute than v1 and is about
0.5 % more accurate; it is also what ``torchvision.models.resnet50`` builds, so
parameter counts and state-dict keys match the figures people quote
(ResNet-50: 25,557,032 parameters at 1000 classes).

Initialisation follows the same references: Kaiming-normal (fan_out, ReLU) for
convolutions, BatchNorm weight 1 and bias 0, and optionally the last BatchNorm
of every residual block starts at zero (Goyal et al. 2017, "Accurate, Large
Minibatch SGD"), so each block begins as the identity and very large batches
train stably.

The network ends in adaptive average pooling, so any input of 32x32 pixels or
more works, and it runs unchanged in ``channels_last`` memory format.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

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


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    # No bias: every convolution is followed by BatchNorm, whose shift makes one redundant.
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a shortcut (ResNet-18 and -34).

    Args:
        in_ch: Channels coming in.
        width: Channels of both convolutions; the block outputs ``width * expansion``.
        stride: Stride of the first convolution (2 to halve the resolution).
        downsample: Projection applied to the shortcut when shape changes.
    """

    expansion = 1

    def __init__(
        self, in_ch: int, width: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        """The BatchNorm whose weight zero-init-residual sets to zero."""
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand, with a shortcut (ResNet-50, -101, -152).

    The v1.5 detail: the stride is on ``conv2`` (the 3x3), not on ``conv1``.

    Args:
        in_ch: Channels coming in.
        width: Channels of the two inner convolutions; the block outputs
            ``width * expansion``.
        stride: Stride of the 3x3 convolution (2 to halve the resolution).
        downsample: Projection applied to the shortcut when shape changes.
    """

    expansion = 4

    def __init__(
        self, in_ch: int, width: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = _conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        """The BatchNorm whose weight zero-init-residual sets to zero."""
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_Block = type[BasicBlock] | type[Bottleneck]


class ResNet(nn.Module):
    """A ResNet: stem, four stages of residual blocks, global pool, linear classifier.

    Args:
        block: :class:`BasicBlock` or :class:`Bottleneck`.
        layers: Number of blocks in each of the four stages, e.g. ``(3, 4, 6, 3)``.
        num_classes: Outputs of the final linear layer.
        zero_init_residual: Start the last BatchNorm of every block at zero, so
            each residual branch initially contributes nothing (Goyal et al. 2017).

    Raises:
        ValueError: ``layers`` does not have four positive entries, or
            ``num_classes`` is not positive.
    """

    def __init__(
        self,
        block: _Block,
        layers: tuple[int, int, int, int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        if len(layers) != 4 or any(n < 1 for n in layers):
            raise ValueError(f"layers must be four positive block counts, got {layers!r}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self._in_ch = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._stage(block, 64, layers[0], stride=1)
        self.layer2 = self._stage(block, 128, layers[1], stride=2)
        self.layer3 = self._stage(block, 256, layers[2], stride=2)
        self.layer4 = self._stage(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self._init_weights(zero_init_residual)

    def _stage(self, block: _Block, width: int, blocks: int, stride: int) -> nn.Sequential:
        out_ch = width * block.expansion
        downsample: nn.Module | None = None
        if stride != 1 or self._in_ch != out_ch:
            # Projection shortcut ("option B" in the paper): a strided 1x1 conv plus BN.
            downsample = nn.Sequential(
                _conv1x1(self._in_ch, out_ch, stride), nn.BatchNorm2d(out_ch)
            )
        mods: list[nn.Module] = [block(self._in_ch, width, stride, downsample)]
        self._in_ch = out_ch
        mods.extend(block(out_ch, width) for _ in range(1, blocks))
        return nn.Sequential(*mods)

    def _init_weights(self, zero_init_residual: bool) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # nn.Linear keeps PyTorch's default init, as the reference models do.
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock | Bottleneck):
                    nn.init.zeros_(m.last_bn.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-18 (11,689,512 parameters at 1000 classes)."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, zero_init_residual)


def resnet34(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-34 (21,797,672 parameters at 1000 classes)."""
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes, zero_init_residual)


def resnet50(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-50 v1.5 (25,557,032 parameters at 1000 classes)."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, zero_init_residual)


def resnet101(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-101 v1.5 (44,549,160 parameters at 1000 classes)."""
    return ResNet(Bottleneck, (3, 4, 23, 3), num_classes, zero_init_residual)


def resnet152(num_classes: int = 1000, zero_init_residual: bool = False) -> ResNet:
    """ResNet-152 v1.5 (60,192,808 parameters at 1000 classes)."""
    return ResNet(Bottleneck, (3, 8, 36, 3), num_classes, zero_init_residual)


ARCHS: dict[str, Callable[[int, bool], ResNet]] = {
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
    "resnet152": resnet152,
}
"""Architecture name → constructor ``(num_classes, zero_init_residual)``."""


def build_model(arch: str, num_classes: int, zero_init_residual: bool = False) -> nn.Module:
    """Build a network by name.

    Args:
        arch: One of :data:`ARCHS` (``resnet18`` … ``resnet152``).
        num_classes: Outputs of the classifier.
        zero_init_residual: See :class:`ResNet`.

    Returns:
        The freshly initialised model, on the CPU, in float32.

    Raises:
        ValueError: ``arch`` is not a known architecture; the message lists them.
    """
    try:
        ctor = ARCHS[arch]
    except KeyError:
        known = ", ".join(ARCHS)
        raise ValueError(f"unknown architecture {arch!r}; known: {known}") from None
    return ctor(num_classes, zero_init_residual)
