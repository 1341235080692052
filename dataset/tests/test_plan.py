"""The campaign's plan: families in turn from its first steps, the core configurations' repeats and the pairs
early, deterministic, resumable from the rows measured (the first H200 block's 13 runs, kept in first_block/ so
the checks do not move as the campaign goes on, count as done), and what the blocks of GPU time are expected to
cover (the runner's own estimates and budget rule)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from alnair_dataset import campaign, plan, sources
from alnair_dataset.workloads import grid

BLOCK = ["--repeats", "3", "--pairs", "auto:30"]  # what tests/gpu/run_campaign.sh is given for every block
FIRST_BLOCK = Path(__file__).parent / "first_block" / "runs.csv"  # the H200 campaign's rows after its first block


def planned(out, *args):
    options = campaign.build_parser().parse_args(["--out", str(out), *BLOCK, *args])
    configs = campaign.configurations(options)
    pairs = campaign.pair_specs(options, configs)
    runner = campaign.Campaign(options)
    return runner, campaign.build_plan(options, configs, pairs), configs, pairs


def plan_from(out, *sources_of_rows):
    for source in sources_of_rows:
        shutil.copy(source, out / source.name)
    runner, items, configs, pairs = planned(out)
    return runner, items, configs, pairs, campaign.coverage_of(runner, items)


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The plan of the second block, from the rows of the first."""
    return plan_from(tmp_path_factory.mktemp("plan"), FIRST_BLOCK)


def test_the_committed_rows_are_steps_of_the_plan_and_count_as_done(tmp_path):
    runner, items, _, _, steps = plan_from(tmp_path, sources.H200 / "runs.csv", sources.H200 / "pairs.csv")
    ok = {r["key"] for r in runner.runs.rows if r["status"] == "ok" and r["role"] == "solo"}
    assert len(ok) >= 13
    assert ok <= {i.key for i in items}  # the grid and its seeds are those the rows were measured with
    assert ok <= {s.item.key for s in steps if s.block == 0}
    done_pairs = {p["pair_key"] for p in runner.pairs.rows if p["status"] == "ok"}
    held = {s.item.key for s in steps if s.block == 0}
    # a pair whose target modes ran on two GPUs is measured again on one: only MobileNetV3 b32 + DCGAN b32, whose two
    # modes blocks 13 and 14 ran on two H200s (docs/dataset.md)
    targets = plan.target_modes(runner.options.pair_modes)[0]
    gpus: dict[str, set] = {}
    for key in done_pairs:
        mode, pair = key.split("|", 1)
        if mode in targets:
            gpus.setdefault(pair, set()).add(runner.pair_run(key)["gpu_uuids"])
    split = {key for key in done_pairs if len(gpus.get(key.split("|", 1)[1], ())) > 1}
    assert len(split) == 2 and all("mobilenet_v3/b32" in k and "dcgan/b32" in k for k in split)
    assert done_pairs - split <= held and not split & held


def test_the_first_40_configurations_span_all_five_families_evenly(committed):
    _, _, configs, _, _ = committed
    assert len(configs) == 176
    assert Counter(c.run.family for c in configs[:40]) == {f: 8 for f in grid.MODELS}
    assert [c.run.family for c in configs[:5]] == list(grid.MODELS)
    first_classify = [c.run for c in configs[:20] if c.run.family == "classify"]
    assert [r.model for r in first_classify] == ["resnet50", "mobilenet_v3", "efficientnet_v2", "inception_v3"]
    assert len({r.batch_size for r in first_classify}) == 4  # each model starts at its own batch size


def test_every_prefix_of_the_plan_spans_the_families_it_can(committed):
    _, items, _, _, _ = committed
    solo = [i.config for i in items if i.config is not None]
    assert {c.run.family for c in solo[:5]} == set(grid.MODELS)
    for n in (10, 20, 40, 80):
        counts = Counter(c.run.family for c in solo[:n])
        assert len(counts) == 5 and max(counts.values()) - min(counts.values()) <= n // 5, (n, counts)


def test_auto_pairs_spread_over_family_pairs_and_use_the_core(committed):
    _, _, configs, pairs, _ = committed
    assert len(pairs) == 30 and len({(a.key, b.key) for a, b in pairs}) == 30
    core = {c.key for c in configs[: plan.REPEATED_TARGET]}
    assert all(a.key in core and b.key in core and a.run.family != b.run.family for a, b in pairs)
    per_family_pair = Counter(frozenset((a.run.family, b.run.family)) for a, b in pairs)
    assert len(per_family_pair) == 10 and set(per_family_pair.values()) == {3}
    assert set(Counter(c.key for pair in pairs for c in pair).values()) == {3}


def test_the_plan_is_deterministic_and_holds_every_run_once(tmp_path, committed):
    _, items, _, _, _ = committed
    _, again, _, _ = planned(tmp_path)
    assert [i.key for i in again] == [i.key for i in items]
    solo = [i.key for i in items if i.config is not None]
    assert len(solo) == len(set(solo)) == 176 * 3
    assert sum(1 for i in items if i.pair is not None) == 30 * 3


def test_the_targets_need_about_20_blocks_and_every_block_advances_them_all(committed):
    _, _, _, _, steps = committed
    blocks = max(s.block for s in steps)
    reach = {}
    for name, met in (
        ("solo", lambda p: p.solo >= plan.SOLO_TARGET),
        ("repeated", lambda p: p.repeated >= 20),
        ("pairs", lambda p: p.pairs >= 30),
        ("families", lambda p: p.families == 5),
    ):
        reach[name] = next(s.block for s in steps if met(s.progress))
    print(
        f"\nthe targets from the committed rows, blocks of {plan.BLOCK_SECONDS:g} s: {reach}; the whole plan {blocks}"
    )
    assert reach["families"] == 1  # the next block runs every family
    # 15 blocks when a baseline measured once served every later pair; a pair now measures its baselines on its own
    # GPU, and the walk assumes every block gets another one
    assert max(reach.values()) <= 21 and max(reach.values()) - min(reach["solo"], reach["pairs"]) <= 3
    # each block of the first ten is a share of every target: solo runs, repeats and pairs all advance
    by_block = {}
    for s in steps:
        by_block[s.block] = s.progress
    for b in range(2, 11):
        before, after = by_block[b - 1], by_block[b]
        assert after.solo > before.solo and after.pairs > before.pairs, b
    assert by_block[13].repeated > 0  # a configuration with every repeat (block 10 before pairs measured baselines)
    seconds = Counter()
    for s in steps:
        seconds[s.block] += s.seconds
    assert all(0.8 * plan.BLOCK_SECONDS < seconds[b] <= plan.BLOCK_SECONDS for b in range(1, 11)), seconds


def test_plan_prints_the_steps_and_when_the_targets_are_reached(tmp_path, capsys):
    shutil.copy(FIRST_BLOCK, tmp_path / "runs.csv")
    assert campaign.main(["--out", str(tmp_path), *BLOCK, "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split("\t") == ["step", "block", "seconds", "solo", "families", "repeated", "pairs", "key"]
    summary = [line for line in out if line.startswith("plan: ")]
    assert summary[0].startswith("plan: 618 steps, 13 in the rows")
    assert any(line.startswith("plan: 100 solo runs: in block ") for line in summary)
    assert any(line.startswith("plan: 30 pairs in timeslice and limit: in block ") for line in summary)
    assert not (tmp_path / "logs").exists()  # nothing ran


@pytest.mark.parametrize("kind", ["limit", "share"])
def test_pairs_only_keeps_the_pairs_and_their_order(tmp_path, kind):
    _, items, _, _ = planned(tmp_path, "--pairs-only", "--pair-modes", f"timeslice,{kind}-50-50,{kind}-30-70")
    assert len(items) == 90 and all(i.pair is not None for i in items)
    # a pair's two kinds of sharing together, every pair's; then the other mode, pair by pair in the same order
    assert [i.mode for i in items[:60]] == ["timeslice", f"{kind}-50-50"] * 30
    assert [i.mode for i in items[60:]] == [f"{kind}-30-70"] * 30
    assert [i.pair for i in items[60:]] == [i.pair for i in items[:60:2]]
    assert not any(i.with_targets for i in items)


@pytest.mark.parametrize(
    "modes, targets, others, kinds",
    [
        ("timeslice,limit-50-50,limit-30-70", ["timeslice", "limit-50-50"], ["limit-30-70"], "timeslice and limit"),
        ("timeslice,share-50-50,share-30-70", ["timeslice", "share-50-50"], ["share-30-70"], "timeslice and share"),
        ("share-30-70,timeslice,share-50-50", ["share-30-70", "timeslice"], ["share-50-50"], "timeslice and share"),
        (
            "timeslice,limit-50-50,limit-30-70,share-50-50,share-30-70",
            ["timeslice", "limit-50-50", "share-50-50"],
            ["limit-30-70", "share-30-70"],
            "timeslice and limit and share",
        ),
    ],
)
def test_a_pairs_target_modes_are_its_first_of_each_kind_of_sharing(modes, targets, others, kinds):
    assert plan.target_modes(modes.split(",")) == (targets, others)
    assert campaign.sharing_kinds(modes.split(",")) == kinds


def test_the_share_campaign_runs_the_first_pairs_30_70_share_in_their_50_50_block(tmp_path):
    """tests/gpu/run_campaign.sh's `share` preset: the 30 pairs at share-50-50 beside their time-sliced mode, and the
    first 10 also at share-30-70, right after and in the same block (partners); the rows hold every time-sliced one,
    but not a pair: its modes compare on one GPU, so its time-sliced run comes again in its shares' block."""
    shutil.copy(sources.H200 / "runs.csv", tmp_path / "runs.csv")
    shutil.copy(sources.H200 / "pairs.csv", tmp_path / "pairs.csv")
    runner, items, _, pairs = planned(
        tmp_path, "--pairs-only", "--pair-modes", "timeslice,share-50-50,share-30-70", "--other-modes-pairs", "10"
    )
    assert len(items) == 30 * 2 + 10
    by_pair = [[i for i in items if i.pair == p] for p in pairs]
    assert [[i.mode for i in found] for found in by_pair] == [["timeslice", "share-50-50", "share-30-70"]] * 10 + [
        ["timeslice", "share-50-50"]
    ] * 20
    assert [i.with_targets for i in items[:3]] == [False, False, True]
    modes = runner.options.pair_modes
    assert plan.partners_after(items, 0, modes, lambda _: True) == [1, 2]  # the two shares wait with the time-sliced
    assert plan.partners_after(items, 1, modes, lambda _: True) == [2]
    assert plan.partners_after(items, 30, modes, lambda _: True) == [31]  # pair 11: no 30/70
    assert all(runner.pairs.done(found[0].key, ("ok",)) for found in by_pair)  # each measured time-sliced already
    steps = campaign.coverage_of(runner, items)
    assert not [s for s in steps if s.block == 0]  # ...but on no GPU beside its shares
    block = {s.item.key: s.block for s in steps}
    assert all(block[i.key] == block[found[0].key] for found in by_pair for i in found[1:])
    assert max(s.progress.pairs for s in steps) == 30  # in timeslice and share
    assert [line for line in campaign.plan_summary(steps, 1, 520, modes) if "pairs in" in line][0].startswith(
        "plan: 30 pairs in timeslice and share: in block "
    )


def test_a_pair_counts_for_the_target_once_measured_in_every_kind_of_sharing_asked():
    coverage = plan.Coverage(set(), {"timeslice|x|y", "share-50-50|x|y", "limit-50-50|x|z"}, {}, {})
    assert coverage.progress(1, ["timeslice", "share-50-50"]).pairs == 1
    assert coverage.progress(1, ["timeslice", "share-50-50", "share-30-70"]).pairs == 1  # 30/70 is no other kind
    assert coverage.progress(1, ["timeslice", "limit-50-50", "share-50-50"]).pairs == 0


def test_a_step_that_does_not_fit_waits_while_a_later_one_that_fits_runs():
    small, large = (plan.Config(grid.configurations("cuda", 0)[i], 0) for i in (0, 1))
    items = [plan.Item(config=large), plan.Item(config=small)]
    seconds = {small.key: 10.0, large.key: 100.0}
    steps = plan.walk(
        items,
        plan.Coverage(set(), set(), {}, {}),
        1,
        ["timeslice"],
        lambda c: seconds[c.key],
        lambda c: seconds[c.key],
        lambda need, left, up: need <= left,
        profile_seconds=0,
        startup_seconds=0,
        reserve_seconds=0,
        block_seconds=60,
    )
    assert [(s.item.key, s.block) for s in steps] == [(small.key, 1)]  # the large one never fits a block


def test_the_runner_defers_a_step_that_does_not_fit_and_runs_a_later_one_that_does(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "STACK_STARTUP", 0.0)
    options = campaign.build_parser().parse_args(
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--families",
            "dqn",
            "--batch-sizes",
            "10",
            "64",
            "--precisions",
            "fp32",
            "--repeats",
            "2",
            "--estimate-seconds",
            "100",
            "--budget-seconds",
            "60",
        ]
    )
    configs = campaign.configurations(options)
    runner = campaign.Campaign(options)
    measured = configs[1].run  # dqn b64, measured before at 5 s: its repeat is estimated at 5.75 s
    runner.runs.put(
        {
            "key": configs[1].key,
            "status": "ok",
            "role": "solo",
            "run_family": measured.family,
            "run_model": measured.model,
            "run_batch_size": measured.batch_size,
            "run_steps": measured.steps,
            "run_precision": measured.precision,
            "run_workers": measured.workers,
            "run_device": "cpu",
            "wall_seconds": 5.0,
        }
    )
    ran = []
    monkeypatch.setattr(runner, "ensure_stack", lambda: None)
    monkeypatch.setattr(
        runner,
        "execute",
        lambda jobs: ran.extend(k for k, _, _ in jobs) or [{"key": jobs[0][0], "status": "ok", "wall_seconds": 5.0}],
    )
    items = campaign.build_plan(options, configs, [])
    runner.run(items)
    assert runner.stopped_by_budget and runner.counts["waiting"] == 2  # b10's two repeats, 100 s each
    assert len(ran) == 1 and ran[0].startswith("dqn/dqn/b64/") and ran[0].endswith("/r1")


SECOND_MODES = ["limit-50-50", "share-50-50"]  # a pair's target mode after its time-sliced one, of either kind


def walk_three(block_seconds: float, first_seconds: float, second: str) -> list[tuple[str, int]]:
    """A solo run, a pair's time-sliced mode, another solo run and the pair's `second` mode, walked in blocks."""
    s1, s2, a, b = (plan.Config(grid.configurations("cuda", 0)[i], 0) for i in range(4))
    seconds = {s1.key: first_seconds, s2.key: 10.0, a.key: 10.0, b.key: 10.0}
    ts, lim = (plan.Item(pair=(a, b), mode=m) for m in ("timeslice", second))
    items = [plan.Item(config=s1), ts, plan.Item(config=s2), lim]
    steps = plan.walk(
        items,
        plan.Coverage(set(), set(), {}, {}),
        1,
        ["timeslice", second],
        lambda c: seconds[c.key],
        lambda c: seconds[c.key],
        lambda need, left, up: need <= left,
        profile_seconds=0,
        startup_seconds=0,
        reserve_seconds=0,
        block_seconds=block_seconds,
    )
    names = {s1.key: "s1", s2.key: "s2", ts.key: "ts", lim.key: "lim"}
    return [(names[s.item.key], s.block) for s in steps]


@pytest.mark.parametrize("second", SECOND_MODES)
def test_a_pairs_two_modes_run_in_one_block_the_second_right_after_the_first(second):
    # baselines 10 + 10 and each mode 20 s of estimate (15 expected): 60 s reserved for the pair, 10 left for s2;
    # run in plan order, s2 would take the second mode's place and send it to another block (another GPU)
    assert walk_three(70, 10, second) == [("s1", 1), ("ts", 1), ("lim", 1), ("s2", 1)]


@pytest.mark.parametrize("second", SECOND_MODES)
def test_a_pair_whose_modes_do_not_both_fit_waits_whole_while_later_steps_run(second):
    # 45 s left after s1: the time-sliced mode and its baselines would fit (40), both modes not (60)
    assert walk_three(65, 20, second) == [("s1", 1), ("s2", 1), ("ts", 2), ("lim", 2)]


def fake_runner(tmp_path, monkeypatch, budget: float, pair_modes: str):
    """A runner whose jobs take no time, the keys it executes in order, and three configurations: a pair (dqn b10 +
    b64) and another (b1024)."""
    monkeypatch.setattr(campaign, "STACK_STARTUP", 0.0)
    options = campaign.build_parser().parse_args(
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--families",
            "dqn",
            "--batch-sizes",
            "10",
            "64",
            "1024",
            "--precisions",
            "fp32",
            "--pair-modes",
            pair_modes,
            "--estimate-seconds",
            "10",
            "--budget-seconds",
            str(budget),
        ]
    )
    a, b, other = sorted(campaign.configurations(options), key=lambda c: c.run.batch_size)
    runner = campaign.Campaign(options)
    ran = []

    def execute(jobs):
        found = []
        for key, config, fields in jobs:
            r = config.run
            found.append(
                {
                    "key": key,
                    "status": "ok",
                    "wall_seconds": 10.0,
                    "duration_seconds": 9.0,
                    "gpu_uuids": "",
                    "run_family": r.family,
                    "run_model": r.model,
                    "run_batch_size": r.batch_size,
                    "run_steps": r.steps,
                    "run_precision": r.precision,
                    "run_workers": r.workers,
                    "run_device": r.device,
                    **fields,
                }
            )
            runner.runs.put(found[-1])
            ran.append(key)
        return found

    monkeypatch.setattr(runner, "ensure_stack", lambda: None)
    monkeypatch.setattr(runner, "execute", execute)
    return runner, ran, (a, b, other)


def runner_with_a_pair(tmp_path, monkeypatch, budget: float, second: str):
    """The fake runner's executed keys and configurations after the steps: the pair time-sliced and in the `second`
    mode with the other configuration planned between them."""
    runner, ran, (a, b, other) = fake_runner(tmp_path, monkeypatch, budget, f"timeslice,{second}")
    runner.run([plan.Item(pair=(a, b), mode="timeslice"), plan.Item(config=other), plan.Item(pair=(a, b), mode=second)])
    return runner, ran, (a, b, other)


# the settings of the second mode's two sides, in runs.csv (each side's row) and pairs.csv (the pair's row)
SETTINGS = {
    "limit-50-50": (
        {"compute_limit_percent": 50, "compute_share_percent": None},
        {"compute_limit_a": 50, "compute_limit_b": 50, "compute_share_a": None, "compute_share_b": None},
    ),
    "share-50-50": (
        {"compute_limit_percent": None, "compute_share_percent": 50},
        {"compute_limit_a": None, "compute_limit_b": None, "compute_share_a": 50, "compute_share_b": 50},
    ),
}


@pytest.mark.parametrize("second", SECOND_MODES)
def test_the_runner_runs_a_pairs_second_mode_right_after_its_first(tmp_path, monkeypatch, second):
    runner, ran, (a, b, other) = runner_with_a_pair(tmp_path, monkeypatch, 1000, second)
    modes = [f"{m}|{a.key}|{b.key}" for m in ("timeslice", second)]
    assert ran == [a.key, b.key, modes[0] + "|a", modes[0] + "|b", modes[1] + "|a", modes[1] + "|b", other.key]
    assert runner.counts["pairs"] == 2 and not runner.stopped_by_budget
    side_settings, pair_settings = SETTINGS[second]
    rows = {r["key"]: r for r in runner.runs.rows}
    for side in "ab":
        assert {k: rows[f"{modes[0]}|{side}"][k] for k in side_settings} == dict.fromkeys(side_settings)  # time-sliced
        assert {k: rows[f"{modes[1]}|{side}"][k] for k in side_settings} == side_settings
    pair = runner.pairs.done(modes[1], ("ok",))
    assert {k: pair[k] for k in pair_settings} == pair_settings


@pytest.mark.parametrize("second", SECOND_MODES)
def test_the_runner_holds_back_a_pair_whose_modes_do_not_both_fit(tmp_path, monkeypatch, second):
    # the pair: two baselines (10 s each), two modes (20 s each), 3 more profiles (6 s): 78 s, and the reserves
    # of the budget rule (11 s); the first mode alone would fit in 60 s, so would the other configuration
    runner, ran, (_, _, other) = runner_with_a_pair(tmp_path, monkeypatch, 60, second)
    assert ran == [other.key]
    assert runner.stopped_by_budget and runner.counts["waiting"] == 2 and runner.counts["pairs"] == 0


@pytest.mark.parametrize("budget, both", [(1000, True), (60, False)])
def test_a_held_time_sliced_mode_leaves_the_two_shares_to_run_together_or_not_at_all(
    tmp_path, monkeypatch, budget, both
):
    # the share campaign: time-sliced in the rows, then the 50/50 share with the 30/70 one planned with it; in 60 s
    # each fits alone (no time passes here), the two with their baselines not (78 s and the rule's 11)
    runner, ran, (a, b, other) = fake_runner(tmp_path, monkeypatch, budget, "timeslice,share-50-50,share-30-70")
    runner.pairs.put({"pair_key": f"timeslice|{a.key}|{b.key}", "status": "ok", "mode": "timeslice"})
    runner.run(
        [
            plan.Item(pair=(a, b), mode="timeslice"),
            plan.Item(pair=(a, b), mode="share-50-50"),
            plan.Item(config=other),
            plan.Item(pair=(a, b), mode="share-30-70", with_targets=True),
        ]
    )
    shares = [f"{m}|{a.key}|{b.key}|{side}" for m in ("share-50-50", "share-30-70") for side in "ab"]
    assert ran == ([a.key, b.key, *shares, other.key] if both else [other.key])
    assert (runner.counts["pairs"], runner.counts["skipped"], runner.counts["waiting"]) == (
        (2, 1, 0) if both else (0, 1, 2)
    )
