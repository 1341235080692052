"""Every workload trains a few steps on the CPU from its entry point; the grid's seeds are fixed; CartPole's
physics behave as gym's; bad settings are one line and exit 2."""

from __future__ import annotations

import numpy as np
import pytest

from alnair_dataset.workloads import __main__ as entry, grid
from alnair_dataset.workloads.dqn import CartPole

# (family, model, extra flags): tiny batches, 2 steps; the CNNs at 96 px (their shapes, a fraction of the time)
WORKLOADS = [
    *[
        ("classify", model, ["--image-size", "96"])
        for model in ("resnet50", "mobilenet_v3", "efficientnet_v2", "inception_v3")
    ],
    ("segment", "unet", []),
    ("dqn", "dqn", []),
    ("dcgan", "dcgan", []),
    *[("bert", model, []) for model in entry.bert.MODELS],
]


@pytest.mark.parametrize("family, model, extra", WORKLOADS, ids=[w[1] for w in WORKLOADS])
def test_workload_trains_its_steps_on_the_cpu(family, model, extra, capsys):
    code = entry.main([family, "--model", model, "--batch-size", "2", "--steps", "2", "--seed", "7", *extra])
    assert code == 0
    assert capsys.readouterr().out.startswith(f"{family} {model}: 2 steps of 2 in ")


def test_workers_and_bf16_train_too(capsys):
    assert entry.main(["dcgan", "--batch-size", "2", "--steps", "2", "--workers", "1", "--precision", "bf16"]) == 0
    assert "2 steps of 2" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["classify", "--model", "vgg16", "--batch-size", "2", "--steps", "2"], "--model: classify has resnet50"),
        (["dqn", "--batch-size", "2", "--steps", "2", "--precision", "fp16"], "--precision fp16 needs --device cuda"),
        (["bert", "--batch-size", "0", "--steps", "2"], "must be >= 1"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        entry.main(argv)
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m alnair_dataset.workloads: error: ") and message in line


def test_grid_covers_every_family_with_fixed_distinct_seeds():
    runs = grid.configurations()
    assert {r.family for r in runs} == set(entry.FAMILIES)
    assert [r.seed for r in runs] == [r.seed for r in grid.configurations()]
    assert len({r.seed for r in runs}) == len(runs)
    assert {r.seed for r in grid.configurations(repeat=1)}.isdisjoint(r.seed for r in runs)
    assert all(r.workers == 0 for r in runs if r.family == "dqn")


def test_cartpole_pushed_one_way_falls_within_gyms_limits():
    env = CartPole(np.random.default_rng(0))
    env.state = np.zeros(4)
    steps, done = 0, False
    while not done:
        state, reward, done = env.step(1)
        steps += 1
    assert reward == 1.0 and 5 < steps < 200
    assert state[1] > 0 and state[2] < -CartPole.THETA_LIMIT  # the cart moves right, the pole falls left
