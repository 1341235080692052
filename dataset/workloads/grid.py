"""The parameter grid: every family and model at the original dataset's batch sizes, in fp32 and bf16, loading
in-process and with 4 workers. Each configuration has its own fixed seed, derived from its settings (so adding
configurations changes no other's), and a repeat number for measuring variance."""
from __future__ import annotations

import zlib
from dataclasses import replace

from . import bert, classify, dcgan, dqn, segment
from .common import Run

BATCH_SIZES = {  # the published runs' (column dictionary: how the published runs were made)
    "classify": (2, 32, 128, 256, 1024), "segment": (2, 32, 256, 1024), "dqn": (10, 64, 1024, 3000),
    "dcgan": (2, 32, 256, 1024), "bert": (32, 256),
}
STEPS = {"classify": 100, "segment": 100, "dqn": 2000, "dcgan": 200, "bert": 100}  # before the campaign sizes them
MODELS = {"classify": classify.MODELS, "segment": segment.MODELS, "dqn": dqn.MODELS, "dcgan": dcgan.MODELS,
          "bert": bert.MODELS}
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
                        run = Run(family, model, batch, STEPS[family], device, 0, precision, count)
                        out.append(replace(run, seed=seed_of(run, repeat)))
    return out
