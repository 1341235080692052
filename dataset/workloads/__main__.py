"""`python -m alnair_dataset.workloads FAMILY --model M --batch-size B --steps N --device cpu|cuda --seed S`: trains
N steps under whatever intercept is active (alnair-run, LD_PRELOAD) and exits 0; bad input is one line, exit 2."""

from __future__ import annotations

import argparse
import sys
import time

from alnair.commandline import OneLineParser, fail, int_at_least

from . import bert, classify, dcgan, dqn, segment
from .common import PRECISIONS, Run, seed_everything

PROG = "python -m alnair_dataset.workloads"
FAMILIES = {"classify": classify, "segment": segment, "dqn": dqn, "dcgan": dcgan, "bert": bert}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("family", choices=FAMILIES)
    parser.add_argument(
        "--model",
        help="Model of the family (default: its first): "
        + "; ".join(f"{name}: {', '.join(module.MODELS)}" for name, module in FAMILIES.items()),
    )
    parser.add_argument("--batch-size", type=int_at_least(1), required=True)
    parser.add_argument("--steps", type=int_at_least(1), required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int_at_least(0), default=0)
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32", help="fp32, or autocast to bf16 / fp16.")
    parser.add_argument("--workers", type=int_at_least(0), default=0, help="DataLoader worker processes.")
    parser.add_argument(
        "--image-size",
        type=int_at_least(75),
        help="classify: the size images are resized to "
        "(default: the original backbone's; Inception v3 needs at least 75).",
    )
    return parser


def settings(argv: list[str] | None) -> Run:
    options = build_parser().parse_args(argv)
    models = FAMILIES[options.family].MODELS
    model = options.model or models[0]
    if model not in models:
        fail(PROG, f"--model: {options.family} has {', '.join(models)}, not {model!r}")
    if options.precision == "fp16" and options.device == "cpu":
        fail(PROG, "--precision fp16 needs --device cuda (CPU autocast is bf16)")
    return Run(
        options.family,
        model,
        options.batch_size,
        options.steps,
        options.device,
        options.seed,
        options.precision,
        options.workers,
        options.image_size,
    )


def main(argv: list[str] | None = None) -> int:
    run = settings(argv)
    if run.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail(PROG, "--device cuda: no CUDA device (this torch has none, or no GPU is visible)")
    seed_everything(run.seed)
    began = time.monotonic()
    steps = FAMILIES[run.family].run(run)
    print(
        f"{run.family} {run.model}: {steps} steps of {run.batch_size} in {time.monotonic() - began:.2f} s", flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
