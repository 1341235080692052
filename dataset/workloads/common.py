"""What every workload shares: the run's settings, seeding, synthetic datasets whose samples depend only on the
seed and their index (so DataLoader workers make the same data), precision, and the training loop, which takes
its batches from a DataLoader so the Python intercept counts each as a step."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Run:
    family: str
    model: str
    batch_size: int
    steps: int
    device: str = "cpu"
    seed: int = 0
    precision: str = "fp32"
    workers: int = 0
    image_size: int | None = None  # None: the size the original resized to


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Synthetic(Dataset):
    """`length` samples, sample i made by `make(generator)` from a generator seeded with (seed, i)."""

    def __init__(self, length: int, seed: int, make: Callable[[torch.Generator], tuple]):
        self.length, self.seed, self.make = length, seed, make

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.make(torch.Generator().manual_seed(self.seed * 1_000_003 + index))


def loader(dataset: Dataset, run: Run) -> DataLoader:
    """Exactly `run.steps` batches of `run.batch_size`: the intercept's step count is then the run's."""
    return DataLoader(
        dataset,
        batch_size=run.batch_size,
        shuffle=False,
        drop_last=True,
        num_workers=run.workers,
        pin_memory=run.device == "cuda",
        persistent_workers=False,
    )


def autocast(run: Run):
    """Mixed precision for the forward pass; fp32 runs without autocast."""
    if run.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if run.precision == "bf16" else torch.float16
    return torch.autocast(device_type=run.device, dtype=dtype)


def scaler(run: Run) -> torch.amp.GradScaler:
    """fp16 needs its loss scaled so small gradients survive; the scaler is a no-op otherwise."""
    return torch.amp.GradScaler(run.device, enabled=run.precision == "fp16")


def to_device(batch, device: str):
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(item, device) for item in batch)
    return batch.to(device, non_blocking=True)


def train(
    run: Run, model: torch.nn.Module, batches: DataLoader, loss_of: Callable, optimizer: torch.optim.Optimizer
) -> int:
    """One optimizer step per batch; `loss_of(model, batch)` gives the loss. Returns the steps taken."""
    model.train()
    grads, steps = scaler(run), 0
    for batch in batches:
        batch = to_device(batch, run.device)
        optimizer.zero_grad(set_to_none=True)
        with autocast(run):
            loss = loss_of(model, batch)
        grads.scale(loss).backward()
        grads.step(optimizer)
        grads.update()
        steps += 1
    if run.device == "cuda":
        torch.cuda.synchronize()  # the run's time includes its last kernels
    return steps
