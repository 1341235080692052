"""Image classification as the originals ran it (IDs 1-25): a backbone, frozen, and a Dense(43) head trained on
GTSRB, whose 43 classes of road signs are small images (here 32x32) resized to the backbone's input size."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import Run, Synthetic, loader, train
from .vision import FEATURES

CLASSES = 43
INPUT_SIZES = {"resnet50": 224, "mobilenet_v3": 224, "efficientnet_v2": 384, "inception_v3": 299}  # the TF-Hub models'


class Classifier(nn.Module):
    def __init__(self, model: str, size: int):
        super().__init__()
        self.backbone, features = FEATURES[model]()
        self.backbone.requires_grad_(False)  # the originals trained the head alone (hub.KerasLayer trainable=False)
        self.head, self.size = nn.Linear(features, CLASSES), size

    def forward(self, images):
        resized = F.interpolate(images, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return self.head(self.backbone(resized))


def gtsrb_like(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A 32x32 RGB image in [0, 1] (a smooth field plus noise, like a photo more than white noise) and its class."""
    base = torch.rand(3, 4, 4, generator=generator)
    image = F.interpolate(base[None], size=(32, 32), mode="bilinear", align_corners=False)[0]
    image = (image + 0.1 * torch.randn(3, 32, 32, generator=generator)).clamp(0, 1)
    return image, torch.randint(0, CLASSES, (), generator=generator)


def run(settings: Run) -> int:
    model = Classifier(settings.model, settings.image_size or INPUT_SIZES[settings.model]).to(settings.device)
    data = loader(Synthetic(settings.steps * settings.batch_size, settings.seed, gtsrb_like), settings)
    optimizer = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    return train(settings, model, data, lambda m, b: F.cross_entropy(m(b[0]), b[1]), optimizer)


MODELS = tuple(INPUT_SIZES)
