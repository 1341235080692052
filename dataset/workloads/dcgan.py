"""DCGAN on 28x28 digits as the originals ran it (IDs 33-36, TensorFlow's DCGAN tutorial): a generator from 100
noise values (dense 7x7x256, then transposed convolutions to 28x28x1, tanh) and a discriminator of two strided
convolutions; each step trains both on one batch of MNIST-like images (two optimizer steps)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import Run, Synthetic, autocast, loader, to_device

NOISE = 100


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Sequential(
            nn.Linear(NOISE, 7 * 7 * 256, bias=False), nn.BatchNorm1d(7 * 7 * 256), nn.LeakyReLU(0.3)
        )
        self.up = nn.Sequential(
            nn.ConvTranspose2d(256, 128, 5, 1, 2, bias=False),
            nn.BatchNorm2d(128),
            nn.LeakyReLU(0.3),
            nn.ConvTranspose2d(128, 64, 5, 2, 2, output_padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.LeakyReLU(0.3),
            nn.ConvTranspose2d(64, 1, 5, 2, 2, output_padding=1, bias=False),
            nn.Tanh(),
        )

    def forward(self, noise):
        return self.up(self.dense(noise).view(-1, 256, 7, 7))


def discriminator() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 64, 5, 2, 2),
        nn.LeakyReLU(0.3),
        nn.Dropout(0.3),
        nn.Conv2d(64, 128, 5, 2, 2),
        nn.LeakyReLU(0.3),
        nn.Dropout(0.3),
        nn.Flatten(),
        nn.Linear(128 * 7 * 7, 1),
    )


def digit_like(generator: torch.Generator) -> torch.Tensor:
    """A 28x28 image in [-1, 1] (the tutorial's scaling): a dark field with a few bright strokes."""
    image = torch.full((1, 28, 28), -1.0)
    for _ in range(3):
        row, col = torch.randint(4, 24, (2,), generator=generator).tolist()
        image[0, row - 3 : row + 3, col - 1 : col + 1] = 1.0
    return image


def run(settings: Run) -> int:
    device = settings.device
    makes, judges = Generator().to(device), discriminator().to(device)
    make_opt, judge_opt = (torch.optim.Adam(m.parameters(), lr=1e-4) for m in (makes, judges))
    data = loader(Synthetic(settings.steps * settings.batch_size, settings.seed, digit_like), settings)
    bce, steps = F.binary_cross_entropy_with_logits, 0
    for real in data:
        real = to_device(real, device)
        noise = torch.randn(real.shape[0], NOISE, device=device)
        with autocast(settings):
            fake = makes(noise)
            real_score, fake_score = judges(real).float(), judges(fake.detach()).float()
            judge_loss = bce(real_score, torch.ones_like(real_score)) + bce(fake_score, torch.zeros_like(fake_score))
        judge_opt.zero_grad(set_to_none=True)
        judge_loss.backward()
        judge_opt.step()
        with autocast(settings):
            fooled = judges(fake).float()
            make_loss = bce(fooled, torch.ones_like(fooled))
        make_opt.zero_grad(set_to_none=True)
        make_loss.backward()
        make_opt.step()
        steps += 1
    return steps


MODELS = ("dcgan",)
