"""The parameter grid: every family and model at the original dataset's batch sizes, in fp32 and bf16, loading
in-process and with 4 workers. Each configuration has its own fixed seed, derived from its settings (so adding
configurations changes no other's), and a repeat number for measuring variance."""

from __future__ import annotations

import zlib
from dataclasses import replace

from . import bert, classify, dcgan, dqn, segment
from .common import Run

BATCH_SIZES = {  # the published runs' (column dictionary: how the published runs were made)
    "classify": (2, 32, 128, 256, 1024),
    "segment": (2, 32, 256, 1024),
    "dqn": (10, 64, 1024, 3000),
    "dcgan": (2, 32, 256, 1024),
    "bert": (32, 256),
}
# Steps per configuration: each job should take 20-40 s on the H200 (GPU time comes in blocks of minutes). A step is
# modelled as a fixed cost (Python, the DataLoader, kernel launches) plus a cost per sample (the GPU's work and the
# synthetic samples made on the CPU), and each configuration trains TRAINING_SECONDS at those costs. THE COSTS ARE
# ESTIMATES, to calibrate on the GPU as rows come in (a row's real step time: (duration_seconds -
# time_to_first_step_seconds) / steps). A first calibration on the H200 (13 configurations of 200 steps, fp32, no
# workers: resnet50 and efficientnet_v2 at 32/128/256, unet and dcgan and bert-L2-H512 at 32 and 256, dqn at 64)
# fixed the costs marked "H200"; the others are scaled from those by model size and remain guesses.
TRAINING_SECONDS = 20.0  # plus start-up (STARTUP_SECONDS) makes some 30 s a job
STARTUP_SECONDS = 10.0  # H200: 7-10 s to the first step (torch, CUDA's context, the model; BERTs 15 s), 1 s to exit
STEP_SECONDS = {"classify": 0.007, "segment": 0.025, "dqn": 0.0035, "dcgan": 0.006, "bert": 0.008}  # H200, per step
SAMPLE_SECONDS = {  # per sample: the frozen backbone's forward at its input size, or the whole model's step
    "resnet50": 1.45e-4,
    "efficientnet_v2": 5.6e-4,  # H200
    "mobilenet_v3": 4.5e-5,
    "inception_v3": 2e-4,  # guesses: resnet50's scaled by the backbones' FLOPs
    "unet": 7.8e-4,
    "dqn": 1e-6,
    "dcgan": 9e-5,
    "bert-L2-H512": 1.1e-4,  # H200 (unet: its samples, made on the CPU)
    "bert-L2-H128": 3e-5,
    "bert-L2-H256": 5e-5,
    "bert-L2-H768": 1.9e-4,  # guesses: bert-L2-H512's scaled by size
    "bert-L4-H128": 5e-5,
    "bert-L4-H256": 8.5e-5,
    "bert-L4-H512": 2e-4,
}
MIN_STEPS, MAX_STEPS = 20, 20_000


def step_seconds(family: str, model: str, batch_size: int) -> float:
    """The estimated time of one step on the H200 (see SAMPLE_SECONDS)."""
    return STEP_SECONDS[family] + SAMPLE_SECONDS[model] * batch_size


def steps_for(family: str, model: str, batch_size: int) -> int:
    """Steps that train some TRAINING_SECONDS on the H200, to two significant digits."""
    steps = TRAINING_SECONDS / step_seconds(family, model, batch_size)
    digits = max(0, len(str(int(steps))) - 2)
    return int(min(MAX_STEPS, max(MIN_STEPS, round(steps, -digits))))


def estimated_seconds(run: Run) -> float:
    """A job's estimated wall time on the H200: start-up plus its steps."""
    return STARTUP_SECONDS + run.steps * step_seconds(run.family, run.model, run.batch_size)


MODELS = {
    "classify": classify.MODELS,
    "segment": segment.MODELS,
    "dqn": dqn.MODELS,
    "dcgan": dcgan.MODELS,
    "bert": bert.MODELS,
}
PRECISIONS = ("fp32", "bf16")
WORKERS = (0, 4)


def seed_of(run: Run, repeat: int) -> int:
    text = f"{run.family}/{run.model}/{run.batch_size}/{run.steps}/{run.precision}/{run.workers}/{repeat}"
    return zlib.crc32(text.encode())


def configurations(device: str = "cuda", repeat: int = 0) -> list[Run]:
    out = []
    for family, models in MODELS.items():
        workers = (0,) if family == "dqn" else WORKERS  # its replay buffer is in-process
        for model in models:
            for batch in BATCH_SIZES[family]:
                for precision in PRECISIONS:
                    for count in workers:
                        run = Run(family, model, batch, steps_for(family, model, batch), device, 0, precision, count)
                        out.append(replace(run, seed=seed_of(run, repeat)))
    return out
