"""U-Net segmentation as the originals ran it (IDs 37-41, TensorFlow's segmentation tutorial): a MobileNetV2
encoder, frozen, and a pix2pix decoder (transposed convolutions) trained on Oxford-IIIT Pet images at 128x128 with
three classes per pixel (pet, border, background)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import Run, Synthetic, loader, train
from .vision import mobilenet_v2_stages

CLASSES = 3
SIZE = 128


def upsample(cin: int, cout: int) -> nn.Module:
    """pix2pix.upsample: a 4x4 transposed convolution of stride 2, batch norm, ReLU."""
    return nn.Sequential(
        nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.ModuleList(mobilenet_v2_stages())
        self.down.requires_grad_(False)  # the tutorial's down_stack.trainable = False
        skips = (96, 32, 24, 16)
        self.up = nn.ModuleList(
            [upsample(320, 512), upsample(512 + 96, 256), upsample(256 + 32, 128), upsample(128 + 24, 64)]
        )
        self.last = nn.ConvTranspose2d(64 + skips[-1], CLASSES, 4, 2, 1)

    def forward(self, x):
        outputs = []
        for stage in self.down:
            x = stage(x)
            outputs.append(x)
        x = outputs.pop()
        for up in self.up:
            x = torch.cat([up(x), outputs.pop()], 1)
        return self.last(x)


def pet_like(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A 128x128 image with an elliptic 'pet' on a background, and its trimap: 0 pet, 1 border, 2 background."""
    cy, cx, ry, rx = (torch.rand(4, generator=generator) * torch.tensor([0.4, 0.4, 0.25, 0.25]) + 0.3).tolist()
    grid = torch.linspace(0, 1, SIZE)
    inside = ((grid[:, None] - cy) / ry) ** 2 + ((grid[None, :] - cx) / rx) ** 2
    mask = torch.full((SIZE, SIZE), 2, dtype=torch.long)
    mask[inside < 1.15] = 1
    mask[inside < 0.85] = 0
    colors = torch.rand(2, 3, 1, 1, generator=generator)
    image = torch.where(mask[None] == 0, colors[0], colors[1]) + 0.1 * torch.randn(3, SIZE, SIZE, generator=generator)
    return image.clamp(0, 1), mask


def run(settings: Run) -> int:
    model = UNet().to(settings.device)
    data = loader(Synthetic(settings.steps * settings.batch_size, settings.seed, pet_like), settings)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return train(settings, model, data, lambda m, b: F.cross_entropy(m(b[0]), b[1]), optimizer)


MODELS = ("unet",)
