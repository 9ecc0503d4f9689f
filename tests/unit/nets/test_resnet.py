"""phalanx.nets: the ResNets have the published shapes, sizes and initialisation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from phalanx.nets import ARCHS, Bottleneck, build_model, resnet18, resnet50


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        # The figures torchvision and the papers' reproductions publish.
        ("resnet18", 11_689_512),
        ("resnet34", 21_797_672),
        ("resnet50", 25_557_032),
        ("resnet101", 44_549_160),
        ("resnet152", 60_192_808),
    ],
)
def test_parameter_counts_match_published_figures(arch: str, expected: int) -> None:
    assert n_params(build_model(arch, 1000)) == expected


def test_all_archs_are_registered() -> None:
    assert sorted(ARCHS) == ["resnet101", "resnet152", "resnet18", "resnet34", "resnet50"]


@pytest.mark.parametrize("size", [32, 45, 64])
def test_forward_shape_on_small_inputs(size: int) -> None:
    model = resnet18(num_classes=7).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, 7)


def test_channels_last_gives_the_same_output() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=5).eval()
    x = torch.randn(2, 3, 40, 40)
    with torch.no_grad():
        ref = model(x)
        model = model.to(memory_format=torch.channels_last)
        out = model(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_v1_5_strides_on_the_3x3_convolution() -> None:
    model = resnet50()
    for stage in (model.layer2, model.layer3, model.layer4):
        first = stage[0]
        assert isinstance(first, Bottleneck)
        assert first.conv1.stride == (1, 1)
        assert first.conv2.stride == (2, 2)
        assert first.conv2.kernel_size == (3, 3)
        assert first.downsample is not None
        assert first.downsample[0].stride == (2, 2)
    first = model.layer1[0]
    assert first.conv2.stride == (1, 1)
    assert first.downsample is not None  # 64 -> 256 channels: a projection, no stride


def test_zero_init_residual_zeroes_the_last_bn_of_each_block() -> None:
    model = resnet50(zero_init_residual=True)
    blocks = [m for m in model.modules() if isinstance(m, Bottleneck)]
    assert len(blocks) == 16
    for block in blocks:
        assert torch.count_nonzero(block.bn3.weight) == 0
        assert torch.all(block.bn1.weight == 1) and torch.all(block.bn2.weight == 1)
    default = resnet50()
    assert all(torch.all(m.bn3.weight == 1) for m in default.modules() if isinstance(m, Bottleneck))


def test_zero_init_residual_blocks_start_as_identity() -> None:
    model = resnet18(num_classes=3, zero_init_residual=True).eval()
    block = model.layer1[0]
    x = torch.relu(torch.randn(1, 64, 8, 8))
    with torch.no_grad():
        torch.testing.assert_close(block(x), x)


def test_init_conv_kaiming_bn_ones_zeros() -> None:
    model = resnet18()
    assert torch.all(model.bn1.weight == 1) and torch.all(model.bn1.bias == 0)
    # Kaiming normal, fan_out, relu: std = sqrt(2 / (out_channels * k * k)).
    w = model.layer4[0].conv1.weight
    expected = (2.0 / (w.shape[0] * w.shape[2] * w.shape[3])) ** 0.5
    assert abs(w.std().item() - expected) / expected < 0.05


def test_unknown_arch_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown architecture 'resnet51'.*resnet18.*resnet152"):
        build_model("resnet51", 10)
