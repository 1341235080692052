"""The CNNs of the image workloads, written after torchvision's definitions (layer for layer, random init): no
torchvision wheel installable here matches the CPU build of torch 2.13 (PyPI's 0.28.0 links the CUDA libtorch).
Each `*_features` module maps images to the pooled feature vector the originals' TF-Hub backbones gave.
Left out, as they change no shape or cost that matters here: stochastic depth (EfficientNetV2) and Inception v3's
auxiliary classifier (the feature-vector model has none)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn


def conv_bn(cin: int, cout: int, kernel, stride=1, groups=1, act=nn.ReLU, eps=1e-5) -> nn.Sequential:
    padding = (kernel - 1) // 2 if isinstance(kernel, int) else tuple((k - 1) // 2 for k in kernel)
    layers = [nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, bias=False), nn.BatchNorm2d(cout, eps=eps)]
    return nn.Sequential(*layers, *([act(inplace=True)] if act else []))


def divisible(value: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: channel counts rounded to multiples of 8, never 10% below the value."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        return x * self.gate(self.fc2(self.act(self.fc1(x.mean((2, 3), keepdim=True)))))


class Residual(nn.Module):
    """body(x) (+ x where shapes allow): the inverted residual blocks of MobileNet and EfficientNet."""

    def __init__(self, body: nn.Module, skip: bool):
        super().__init__()
        self.body, self.skip = body, skip

    def forward(self, x):
        return x + self.body(x) if self.skip else self.body(x)


# ---- ResNet-50 (torchvision resnet50: bottleneck v1.5, stride on the 3x3) ----
class Bottleneck(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(cin, planes, 1), conv_bn(planes, planes, 3, stride), conv_bn(planes, planes * 4, 1, act=None)
        )
        self.down = conv_bn(cin, planes * 4, 1, stride, act=None) if stride != 1 or cin != planes * 4 else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


def resnet50_features() -> tuple[nn.Module, int]:
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            layers.append(Bottleneck(cin, planes, stride if index == 0 else 1))
            cin = planes * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()), 2048


# ---- MobileNetV3-Large (torchvision mobilenet_v3_large) ----
MOBILENET_V3_LARGE = [  # in, kernel, expanded, out, squeeze-excite, hardswish, stride
    (16, 3, 16, 16, False, False, 1),
    (16, 3, 64, 24, False, False, 2),
    (24, 3, 72, 24, False, False, 1),
    (24, 5, 72, 40, True, False, 2),
    (40, 5, 120, 40, True, False, 1),
    (40, 5, 120, 40, True, False, 1),
    (40, 3, 240, 80, False, True, 2),
    (80, 3, 200, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 480, 112, True, True, 1),
    (112, 3, 672, 112, True, True, 1),
    (112, 5, 672, 160, True, True, 2),
    (160, 5, 960, 160, True, True, 1),
    (160, 5, 960, 160, True, True, 1),
]


def mobilenet_v3_block(cin, kernel, expanded, cout, se, hardswish, stride) -> nn.Module:
    act = nn.Hardswish if hardswish else nn.ReLU
    layers = [conv_bn(cin, expanded, 1, act=act)] if expanded != cin else []
    layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act))
    if se:
        layers.append(SqueezeExcite(expanded, divisible(expanded // 4)))
    layers.append(conv_bn(expanded, cout, 1, act=None))
    return Residual(nn.Sequential(*layers), stride == 1 and cin == cout)


def mobilenet_v3_features() -> tuple[nn.Module, int]:
    blocks = [mobilenet_v3_block(*row) for row in MOBILENET_V3_LARGE]
    return nn.Sequential(
        conv_bn(3, 16, 3, 2, act=nn.Hardswish),
        *blocks,
        conv_bn(160, 960, 1, act=nn.Hardswish),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(960, 1280),
        nn.Hardswish(),
    ), 1280


# ---- EfficientNetV2-S (torchvision efficientnet_v2_s) ----
EFFICIENTNET_V2_S = [  # fused, expansion, stride, in, out, layers
    (True, 1, 1, 24, 24, 2),
    (True, 4, 2, 24, 48, 4),
    (True, 4, 2, 48, 64, 4),
    (False, 4, 2, 64, 128, 6),
    (False, 6, 1, 128, 160, 9),
    (False, 6, 2, 160, 256, 15),
]


def efficientnet_block(fused: bool, expansion: int, stride: int, cin: int, cout: int) -> nn.Module:
    expanded, silu = cin * expansion, nn.SiLU
    if fused:
        layers = (
            [conv_bn(cin, expanded, 3, stride, act=silu), conv_bn(expanded, cout, 1, act=None)]
            if expansion != 1
            else [conv_bn(cin, cout, 3, stride, act=silu)]
        )
    else:
        layers = [
            conv_bn(cin, expanded, 1, act=silu),
            conv_bn(expanded, expanded, 3, stride, groups=expanded, act=silu),
            SqueezeExcite(expanded, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid),
            conv_bn(expanded, cout, 1, act=None),
        ]
    return Residual(nn.Sequential(*layers), stride == 1 and cin == cout)


def efficientnet_v2_features() -> tuple[nn.Module, int]:
    blocks = []
    for fused, expansion, stride, cin, cout, count in EFFICIENTNET_V2_S:
        blocks += [
            efficientnet_block(fused, expansion, stride if i == 0 else 1, cin if i == 0 else cout, cout)
            for i in range(count)
        ]
    return nn.Sequential(
        conv_bn(3, 24, 3, 2, act=nn.SiLU),
        *blocks,
        conv_bn(256, 1280, 1, act=nn.SiLU),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ), 1280


# ---- Inception v3 (torchvision inception_v3, without the auxiliary head) ----
basic = partial(conv_bn, eps=0.001)


class Branches(nn.Module):
    """Runs each branch on the input and concatenates the results along channels; a branch that is a tuple
    ends in parallel convolutions whose outputs are concatenated too (Inception E)."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(b if isinstance(b, nn.Module) else Split(*b) for b in branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


class Split(nn.Module):
    def __init__(self, stem: nn.Module, *heads: nn.Module):
        super().__init__()
        self.stem, self.heads = stem, nn.ModuleList(heads)

    def forward(self, x):
        y = self.stem(x)
        return torch.cat([h(y) for h in self.heads], 1)


def avg_pool_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), basic(cin, cout, 1))


def inception_a(cin: int, pool: int) -> nn.Module:
    return Branches(
        basic(cin, 64, 1),
        nn.Sequential(basic(cin, 48, 1), basic(48, 64, 5)),
        nn.Sequential(basic(cin, 64, 1), basic(64, 96, 3), basic(96, 96, 3)),
        avg_pool_conv(cin, pool),
    )


def inception_b(cin: int) -> nn.Module:
    return Branches(
        unpadded(cin, 384, 3, 2),
        nn.Sequential(basic(cin, 64, 1), basic(64, 96, 3), unpadded(96, 96, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def inception_c(cin: int, c7: int) -> nn.Module:
    return Branches(
        basic(cin, 192, 1),
        nn.Sequential(basic(cin, c7, 1), basic(c7, c7, (1, 7)), basic(c7, 192, (7, 1))),
        nn.Sequential(
            basic(cin, c7, 1),
            basic(c7, c7, (7, 1)),
            basic(c7, c7, (1, 7)),
            basic(c7, c7, (7, 1)),
            basic(c7, 192, (1, 7)),
        ),
        avg_pool_conv(cin, 192),
    )


def inception_d(cin: int) -> nn.Module:
    return Branches(
        nn.Sequential(basic(cin, 192, 1), unpadded(192, 320, 3, 2)),
        nn.Sequential(basic(cin, 192, 1), basic(192, 192, (1, 7)), basic(192, 192, (7, 1)), unpadded(192, 192, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def inception_e(cin: int) -> nn.Module:
    return Branches(
        basic(cin, 320, 1),
        (basic(cin, 384, 1), basic(384, 384, (1, 3)), basic(384, 384, (3, 1))),
        (nn.Sequential(basic(cin, 448, 1), basic(448, 384, 3)), basic(384, 384, (1, 3)), basic(384, 384, (3, 1))),
        avg_pool_conv(cin, 192),
    )


def unpadded(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Module:
    """Inception's valid (unpadded) convolutions: the stem's and the grid reductions', which make 299 px 8x8."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, bias=False), nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True)
    )


def inception_v3_features() -> tuple[nn.Module, int]:
    stem = [
        unpadded(3, 32, 3, 2),
        unpadded(32, 32, 3),
        basic(32, 64, 3),
        nn.MaxPool2d(3, 2),
        unpadded(64, 80, 1),
        unpadded(80, 192, 3),
        nn.MaxPool2d(3, 2),
    ]
    mixed = [
        inception_a(192, 32),
        inception_a(256, 64),
        inception_a(288, 64),
        inception_b(288),
        inception_c(768, 128),
        inception_c(768, 160),
        inception_c(768, 160),
        inception_c(768, 192),
        inception_d(768),
        inception_e(1280),
        inception_e(2048),
    ]
    return nn.Sequential(*stem, *mixed, nn.AdaptiveAvgPool2d(1), nn.Flatten()), 2048


# ---- MobileNetV2 (the U-Net's encoder, torchvision mobilenet_v2) ----
MOBILENET_V2 = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def mobilenet_v2_stages() -> list[nn.Module]:
    """The encoder in five stages whose outputs are at 1/2, 1/4, 1/8, 1/16 and 1/32 of the input (16, 24, 32, 96 and
    320 channels): the skips a U-Net takes."""
    relu6 = nn.ReLU6
    blocks, cin = [conv_bn(3, 32, 3, 2, act=relu6)], 32
    for expansion, cout, count, stride in MOBILENET_V2:
        for index in range(count):
            hidden, step = cin * expansion, stride if index == 0 else 1
            layers = [conv_bn(cin, hidden, 1, act=relu6)] if expansion != 1 else []
            layers += [conv_bn(hidden, hidden, 3, step, groups=hidden, act=relu6), conv_bn(hidden, cout, 1, act=None)]
            blocks.append(Residual(nn.Sequential(*layers), step == 1 and cin == cout))
            cin = cout
    cuts = (2, 4, 7, 14, 18)  # the block after which each resolution ends
    return [nn.Sequential(*blocks[a:b]) for a, b in zip((0, *cuts), cuts)]


FEATURES = {
    "resnet50": resnet50_features,
    "mobilenet_v3": mobilenet_v3_features,
    "efficientnet_v2": efficientnet_v2_features,
    "inception_v3": inception_v3_features,
}
