"""The campaign's order: which job runs when, so that every block of GPU time (some 440 s) makes balanced progress
toward the issue's targets (100 solo runs over the five families, 3 repeats of 20 configurations, 30 pairs in every
kind of sharing asked for, with their solo baselines), and what any prefix of the plan covers (`--plan`).

The plan is a fixed function of the options, never of the rows: the runner walks it in order and skips what
runs.csv and pairs.csv hold, so a block resumes where the last one stopped and the order never shifts."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, replace

from . import modes as sharing
from .workloads import grid
from .workloads.common import Run

SOLO_TARGET = 100  # solo runs, all five families
REPEATED_TARGET = 20  # configurations with every repeat (the core: their repeats come early, the pairs use them)
PAIR_TARGET = 30  # pairs measured in each kind of sharing --pair-modes has (time-sliced, capped, shared), with
# their solo baselines
BLOCK_SECONDS = 440.0  # a block's campaign budget (BLOCK_SECONDS=470 less the set-up and the script's margin)
# a shared run's expected wall time, as a multiple of its longer side's solo time (the calibration pairs: 1.1-1.7)
SHARED_FACTOR = 1.5
# the order of a model's configurations: fp32 in-process over every batch size first (a batch-size curve per model
# early), then bf16, then with workers
VARIANTS = (("fp32", 0), ("bf16", 0), ("fp32", 4), ("bf16", 4))


def key_of(run: Run, repeat: int) -> str:
    return (
        f"{run.family}/{run.model}/b{run.batch_size}/s{run.steps}/{run.precision}/w{run.workers}/{run.device}"
        f"/seed{run.seed}/r{repeat}"
    )


@dataclass(frozen=True)
class Config:
    run: Run
    repeat: int

    @property
    def key(self) -> str:
        return key_of(self.run, self.repeat)

    def at(self, repeat: int) -> Config:
        """This configuration's run at another repeat, with that repeat's seed."""
        return Config(replace(self.run, seed=grid.seed_of(self.run, repeat)), repeat)

    @property
    def settings(self) -> tuple:
        """The configuration without its repeat (and seed): what repeats share."""
        r = self.run
        return r.family, r.model, r.batch_size, r.steps, r.precision, r.workers, r.device


@dataclass(frozen=True)
class Item:
    """One step of the plan: a solo run (`config`), or a pair in one mode (`pair`, `mode`); `with_targets`: a mode
    past the pair's target modes that runs in their block all the same (build's other_modes_pairs)."""

    config: Config | None = None
    pair: tuple[Config, Config] | None = None
    mode: str | None = None
    with_targets: bool = False

    @property
    def key(self) -> str:
        if self.config is not None:
            return self.config.key
        return f"{self.mode}|{self.pair[0].key}|{self.pair[1].key}"


def round_robin(groups: list[list]) -> list:
    """groups[0][0], groups[1][0], ..., groups[0][1], ...: an exhausted group drops out."""
    return [x for layer in itertools.zip_longest(*groups) for x in layer if x is not None]


def interleaved(runs: list[Run]) -> list[Run]:
    """The runs ordered family by family in turn and, within a family, model by model in turn; a model's own runs
    variant by variant (VARIANTS), its batch sizes starting at a different one for each model (so the first runs of
    a family differ in batch size too). Any prefix of the result spans as many families as it can."""
    families: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        families.setdefault(run.family, {}).setdefault(run.model, []).append(run)
    per_family = []
    for models in families.values():
        per_model = []
        for index, model_runs in enumerate(models.values()):
            batches = sorted({r.batch_size for r in model_runs})
            shift = index % len(batches)
            rotated = batches[shift:] + batches[:shift]

            def place(r: Run, rotated=rotated) -> tuple:
                variant = (
                    VARIANTS.index((r.precision, r.workers)) if (r.precision, r.workers) in VARIANTS else len(VARIANTS)
                )
                return variant, r.precision, r.workers, rotated.index(r.batch_size)

            per_model.append(sorted(model_runs, key=place))
        per_family.append(round_robin(per_model))
    return round_robin(per_family)


def auto_pairs(core: list[Config], count: int) -> list[tuple[Config, Config]]:
    """`count` pairs of the core configurations, spread evenly: each pick is the candidate whose two families have
    been paired least, then whose configurations are in the fewest pairs so far (ties: the core's order); pairs of
    two families before pairs within one. 20 core configurations of 5 families give 3 pairs of each of the 10 family
    pairs, each configuration in 3 pairs."""
    candidates = list(itertools.combinations(core, 2))
    family_pairs: Counter = Counter()
    uses: Counter = Counter()
    chosen: list[tuple[Config, Config]] = []
    for _ in range(min(count, len(candidates))):

        def cost(pair):
            a, b = pair
            same = a.run.family == b.run.family
            return (
                same,
                family_pairs[frozenset((a.run.family, b.run.family))],
                max(uses[a.key], uses[b.key]),
                uses[a.key] + uses[b.key],
            )

        best = min(candidates, key=cost)  # min keeps the first of equals: the core's order
        candidates.remove(best)
        chosen.append(best)
        family_pairs[frozenset((best[0].run.family, best[1].run.family))] += 1
        uses[best[0].key] += 1
        uses[best[1].key] += 1
    position = {c.key: i for i, c in enumerate(core)}
    return sorted(chosen, key=lambda p: max(position[p[0].key], position[p[1].key]))  # stable: early baselines first


def merged(streams: list[list]) -> list:
    """The streams interleaved in proportion to their lengths: each next item comes from the stream that is least
    far along its own length (ties: the earlier stream), so every prefix has done about the same share of each."""
    taken = [0] * len(streams)
    out = []
    while True:
        open_ = [i for i, s in enumerate(streams) if taken[i] < len(s)]
        if not open_:
            return out
        i = min(open_, key=lambda i: ((taken[i] + 0.5) / len(streams[i]), i))
        out.append(streams[i][taken[i]])
        taken[i] += 1


def target_modes(modes: list[str]) -> tuple[list[str], list[str]]:
    """(the modes a pair needs for the targets: its first mode of each kind of sharing, time-sliced, capped
    (limit-*) and shared (share-*), in --pair-modes' order; the others)."""
    first = []
    for kind in sharing.KINDS:
        found = [m for m in modes if sharing.kind_of(m) == kind]
        if found:
            first.append(found[0])
    return [m for m in modes if m in first], [m for m in modes if m not in first]


def partners_after(plan: list[Item], index: int, modes: list[str], pending) -> list[int]:
    """The positions of the pair's other target modes (one of each kind, and the modes planned `with_targets`) after
    plan[index] that are `pending` (a predicate). They run right after it, in the same block: a block may get another
    GPU, and a pair's modes on two GPUs would compare the sharing modes across machines (one configuration's time
    differed by up to 31% between two)."""
    item, early = plan[index], target_modes(modes)[0]
    if item.pair is None or item.mode not in early:
        return []
    return [
        position
        for position in range(index + 1, len(plan))
        if plan[position].pair == item.pair and in_target_block(plan[position], early) and pending(plan[position])
    ]


def in_target_block(item: Item, early: list[str]) -> bool:
    """Whether a pair's mode runs in the block of its target modes (`early`, target_modes' first): one of them, or
    planned with them."""
    return item.mode in early or item.with_targets


def target_blocks(plan: list[Item], modes: list[str]) -> dict[tuple[Config, Config], list[str]]:
    """Each pair's modes that run in one block: its target modes and those planned with them."""
    early, found = target_modes(modes)[0], {}
    for item in plan:
        if item.pair is not None and in_target_block(item, early):
            found.setdefault(item.pair, []).append(item.mode)
    return found


def group_need(needs: list[float], reserve: float) -> float:
    """The budget a run of several jobs needs, in the terms of the budget rule's one job: their estimates, plus the
    per-job reserve (profile) of every job past the first, which the rule adds once."""
    return sum(needs) + reserve * (len(needs) - 1)


def build(
    firsts: list[Config],
    repeats: int,
    pairs: list[tuple[Config, Config]],
    modes: list[str],
    core_size: int = REPEATED_TARGET,
    solo_target: int = SOLO_TARGET,
    pairs_only: bool = False,
    other_modes_pairs: int | None = None,
) -> list[Item]:
    """The plan. `firsts`: the chosen configurations at repeat 0, in interleaved order. It begins with one core run
    of each family; then phase 1 (the targets) merges three streams: the core (the first `core_size`
    configurations) with all their repeats, repeat by repeat; the pairs in their target modes (target_modes), a pair's
    modes one after the other; and the other configurations' first runs up to `solo_target` solo runs in all. Phase 2
    merges the remaining first runs with the pairs' other modes; phase 3 is the remaining repeats, repeat by repeat.
    With `other_modes_pairs` K, only the first K pairs run the other modes, right after the pair's target modes and in
    their block (`with_targets`: on the same GPU and baselines), and the other pairs never: phase 2 has no pairs
    then."""
    core, rest = firsts[:core_size], firsts[core_size:]
    core_runs = [Item(config=c.at(r) if r else c) for r in range(repeats) for c in core]
    early_modes, late_modes = target_modes(modes)
    if other_modes_pairs is None:
        pair_early = [Item(pair=p, mode=m) for p in pairs for m in early_modes]
        pair_late = [Item(pair=p, mode=m) for p in pairs for m in late_modes]
    else:
        pair_early = [
            Item(pair=p, mode=m, with_targets=m in late_modes)
            for index, p in enumerate(pairs)
            for m in early_modes + (late_modes if index < other_modes_pairs else [])
        ]
        pair_late = []
    breadth = max(0, solo_target - len(core_runs))
    rest_early = [Item(config=c) for c in rest[:breadth]]
    rest_late = [Item(config=c) for c in rest[breadth:]]
    rest_repeats = [Item(config=c.at(r)) for r in range(1, repeats) for c in rest]
    head = len({c.run.family for c in core})  # one run of each family before anything else
    plan = (
        core_runs[:head]
        + merged([core_runs[head:], pair_early, rest_early])
        + merged([rest_late, pair_late])
        + rest_repeats
    )
    if pairs_only:
        plan = [item for item in plan if item.pair is not None]
    return plan


# ---------------------------------------------------------------------------------------------------- coverage


@dataclass
class Progress:
    """What the rows cover after some of the plan: solo runs, their families, configurations with every repeat,
    pairs measured in each kind of sharing the modes have (time-sliced, capped, shared)."""

    solo: int = 0
    families: int = 0
    repeated: int = 0
    pairs: int = 0


@dataclass
class Step:
    index: int  # 1-based position in the plan
    item: Item
    block: int  # the block it is expected to run in (0: in the rows already)
    seconds: float  # expected seconds (0 when in the rows)
    progress: Progress  # what the rows cover after it


class Coverage:
    """Walks the plan from the rows already there, counting what each step adds, and cuts it into blocks of
    `block_seconds` with the runner's own budget rule (`fits`) and expected times (`expected`)."""

    def __init__(
        self, solo_done: set[str], pairs_done: set[str], solo_families: dict[str, str], solo_settings: dict[str, tuple]
    ):
        self.solo = set(solo_done)
        self.pair_modes = set(pairs_done)
        self.family = dict(solo_families)  # solo key -> family
        self.settings = dict(solo_settings)  # solo key -> settings (without the repeat)

    def progress(self, repeats: int, modes: list[str]) -> Progress:
        per_settings = Counter(self.settings[k] for k in self.solo)
        kinds: dict[str, set] = {}
        for key in self.pair_modes:
            mode, pair = key.split("|", 1)
            kinds.setdefault(pair, set()).add(sharing.kind_of(mode))
        needed = {sharing.kind_of(m) for m in modes}
        return Progress(
            solo=len(self.solo),
            families=len({self.family[k] for k in self.solo}),
            repeated=sum(1 for n in per_settings.values() if n >= repeats),
            pairs=sum(1 for found in kinds.values() if needed <= found),
        )

    def add(self, item: Item) -> None:
        configs = [item.config] if item.config is not None else list(item.pair)
        for c in configs:
            self.solo.add(c.key)
            self.family[c.key] = c.run.family
            self.settings[c.key] = c.settings
        if item.pair is not None:
            self.pair_modes.add(item.key)


def walk(
    plan: list[Item],
    coverage: Coverage,
    repeats: int,
    modes: list[str],
    estimate,
    expected,
    fits,
    *,
    profile_seconds: float,
    startup_seconds: float,
    reserve_seconds: float,
    block_seconds: float = BLOCK_SECONDS,
    max_blocks: int = 1000,
) -> list[Step]:
    """The plan as the runner goes through it, block after block: in each block every step not yet done, in plan
    order, that fits in what is left (the runner's rule: `fits(estimate, left, stack_up)`, `estimate(config)` its
    estimate of a solo job; a pair is budgeted the sum of its sides' after any baseline not measured in the same
    block, since each block may get another GPU and a pair's baselines must run on its GPU; a pair's first target
    mode is budgeted for its other pending target modes too, and when it waits they wait: partners_after); a step
    that does not fit waits for the next block while later ones that fit go on. `expected(config)` is the time a
    solo job is expected to take, a pair SHARED_FACTOR x its longer side; every job adds `profile_seconds`, a block's
    stack `startup_seconds`. The steps come in the order they are expected to run, those in the rows first."""
    steps: list[Step] = []
    todo = []
    for index, item in enumerate(plan, 1):
        if (item.key in coverage.solo) if item.config is not None else (item.key in coverage.pair_modes):
            steps.append(Step(index, item, 0, 0.0, coverage.progress(repeats, modes)))
        else:
            todo.append((index, item))
    block = 0
    while todo and block < max_blocks:
        block += 1
        left, stack_up, waiting, here, deferred, taken = block_seconds, False, [], set(), set(), set()

        def jobs_of(item: Item, here=here) -> list[tuple[Config | None, float, float]]:
            """The step's jobs in this block: (the configuration run alone or None for the two together, its
            estimate, its expected seconds); a pair's baselines first, unless measured in this block."""
            if item.config is not None:
                return [(item.config, estimate(item.config), expected(item.config))]
            a, b = item.pair
            return [(c, estimate(c), expected(c)) for c in dict.fromkeys((a, b)) if c.key not in here] + [
                (None, estimate(a) + estimate(b), SHARED_FACTOR * max(expected(a), expected(b)))
            ]

        def place(item: Item, here=here) -> float | None:
            """Budget the step in this block: its seconds, or None when a job of it does not fit."""
            nonlocal left, stack_up
            seconds = 0.0
            for config, need, take in jobs_of(item):
                if not fits(need, left, stack_up):
                    return None
                if not stack_up:
                    left, stack_up = left - startup_seconds, True
                left -= take + profile_seconds
                seconds += take + profile_seconds
                if config is not None:
                    here.add(config.key)
                    if config.key not in coverage.solo:
                        coverage.add(Item(config=config))
            coverage.add(item)
            return seconds

        items = [item for _, item in todo]
        for position, (index, item) in enumerate(todo):
            if position in taken or (item.config is not None and item.key in coverage.solo):
                continue  # run with its pair's first mode, or an earlier pair's baseline
            group = [position]
            if item.pair is not None:
                partners = partners_after(items, position, modes, lambda _: True)
                needs = [need for _, need, _ in jobs_of(item)]  # the baselines, then the two together
                whole = group_need(needs + needs[-1:] * len(partners), reserve_seconds)
                if item.pair in deferred or (partners and not fits(whole, left, stack_up)):
                    deferred.add(item.pair)
                    waiting.append((index, item))
                    continue
                group += partners
            for member in group:
                taken.add(member)
                seconds = place(todo[member][1])
                if seconds is None:
                    waiting.append(todo[member])
                else:
                    steps.append(Step(*todo[member], block, seconds, coverage.progress(repeats, modes)))
        if len(waiting) == len(todo) and not stack_up:
            break  # nothing fits in an empty block: it never will
        todo = sorted(waiting, key=lambda pending: pending[0])
    return steps
