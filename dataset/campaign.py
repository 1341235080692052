"""The measurement campaign: every configuration of the grid as its own process under the CUDA and Python
intercepts (alnair-run), recorded by the real exporter and a real Prometheus, profiled with `alnair profile`'s
functions into one row each; and pairs of jobs run solo and together on one GPU, under time-slicing and under
Alnair's compute caps and shares (modes.py).

    python -m alnair_dataset.campaign --out DIR [--device cuda|cpu] [--families F ...] [--repeats N]
        [--pairs auto:N | A+B ...] [--pair-modes timeslice,share-50-50,...] [--other-modes-pairs K]
        [--budget-seconds S] [--prometheus-binary PATH]

The order is the plan (dataset/plan.py: families in turn, the core configurations' repeats and the pairs early;
`--plan` prints it with what each block is expected to cover). Resumable: DIR/runs.csv holds one row per attempt
(a configuration's key names its settings, seed and repeat); a key with an `ok` (or `failed`) row is not run again.
A row is written as `incomplete` before its job starts and replaced when the job ends, so a campaign cut anywhere
(the budget, SIGTERM, SIGKILL) leaves at worst rows marked incomplete, which the next run does again.
--budget-seconds defers a step that would not fit to the next block (later steps that fit go on), and ends a job that
outlives the budget (its row stays incomplete). psutil samples each job's process tree while it runs (process_sampler).
DIR/pairs.csv holds each pair's slowdowns and packing saving with the keys of the four rows they come from;
DIR/runs.parquet and DIR/pairs.parquet are written at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from alnair.commandline import OneLineParser, comma_separated, fail, int_at_least
from alnair.profiler import ProfileError

from . import modes, plan
from .plan import Config
from .process_sampler import ProcessSampler
from .recording import Stack
from .tables import PAIR_COLUMNS, SETTINGS_COLUMNS, Table, row_gpus, run_columns
from .versions import gpu_uuids, versions
from .workloads import grid
from .workloads.common import Run

PROG = "python -m alnair_dataset.campaign"
PROFILE_RESERVE = 6.0  # seconds after a job: its exit record reaching Prometheus, the profile's queries, the row
SHUTDOWN_RESERVE = 5.0  # seconds to stop Prometheus and the exporter and write Parquet
STACK_STARTUP = 15.0  # seconds to start the exporter and Prometheus and probe the versions
MIN_JOB_SECONDS = 10.0  # no job is shorter (start-up alone takes 7-10 s on the H200): less left, and nothing is tried
ESTIMATE_MARGIN = 1.15  # a configuration measured before (another repeat) is expected to take this much longer at most
PROFILE_OVERHEAD = 0.5  # seconds between one job's end and the next's start in practice (the first H200 block: 430.6 s
# from the first start to the last end for 429.4 s of 13 wall times)


class Stop(Exception):
    """SIGTERM or SIGINT: end the running jobs, mark their rows incomplete, stop the stack."""


# ---------------------------------------------------------------------------------------------------- keys, grid


def configurations(options) -> list[Config]:
    """The chosen configurations of the grid at repeat 0, interleaved (plan.interleaved: family by family in turn,
    so any prefix spans every family)."""
    configs = (_config(run, options) for run in plan.interleaved(grid.configurations(options.device, 0)))
    return [c for c in configs if _chosen(c.run, options)]


def _config(run: Run, options) -> Config:
    """A grid run at repeat 0, training --steps steps if given (its seed then follows its settings)."""
    return Config(replace(run, steps=options.steps), 0).at(0) if options.steps is not None else Config(run, 0)


def job_fits(estimate: float, left: float, stack_up: bool) -> bool:
    """The budget rule: a job expected to take `estimate` s starts only if it, the stack's start (unless it is up),
    its profile and the stack's shutdown fit in the `left` seconds."""
    return estimate + (0.0 if stack_up else STACK_STARTUP) + PROFILE_RESERVE + SHUTDOWN_RESERVE <= left


def row_settings(row: dict) -> tuple:
    """A runs.csv row's configuration without its repeat, as Config.settings gives it."""
    return tuple(row[name] for name in SETTINGS_COLUMNS)


def _chosen(run: Run, options) -> bool:
    return (
        (not options.families or run.family in options.families)
        and (not options.models or run.model in options.models)
        and (not options.batch_sizes or run.batch_size in options.batch_sizes)
        and (not options.precisions or run.precision in options.precisions)
        and (options.workers is None or run.workers in options.workers)
    )


def pair_specs(options, configs: list[Config]) -> list[tuple[Config, Config]]:
    """--pairs: `auto:N` (N pairs of the core configurations, spread over family pairs: plan.auto_pairs) or `A+B`
    with A and B as family:model:batch[:precision[:workers]] (repeat 0)."""
    out: list[tuple[Config, Config]] = []
    for spec in options.pairs:
        if spec.startswith("auto:"):
            out.extend(plan.auto_pairs(configs[: options.core], int(spec.split(":", 1)[1])))
            continue
        sides = spec.split("+")
        if len(sides) != 2:
            raise ValueError(f"--pairs: {spec!r} is not auto:N nor A+B")
        out.append(tuple(_find(side, options) for side in sides))
    return out


def build_plan(options, configs: list[Config], pairs: list[tuple[Config, Config]]) -> list[plan.Item]:
    return plan.build(
        configs,
        options.repeats,
        pairs,
        options.pair_modes,
        core_size=options.core,
        pairs_only=options.pairs_only,
        other_modes_pairs=options.other_modes_pairs,
    )


def job_environment(base: dict[str, str], shm: str, fields: dict) -> dict[str, str]:
    """A job's environment: `base` (the campaign's) with the segments' directory, and of the compute variables
    (ALNAIR_COMPUTE_LIMIT, ALNAIR_COMPUTE_SHARE) only those its row's settings give (compute_limit_percent,
    compute_share_percent): one inherited from the campaign's own environment would change every job."""
    env = {**base, "ALNAIR_SHM_DIR": shm, "PYTHONUNBUFFERED": "1"}
    for variable, stem in modes.VARIABLES.items():
        env.pop(variable, None)
        if fields.get(f"{stem}_percent") is not None:
            env[variable] = str(fields[f"{stem}_percent"])
    return env


def _find(spec: str, options) -> Config:
    parts = spec.split(":")
    if not 3 <= len(parts) <= 5:
        raise ValueError(f"--pairs: {spec!r} is not family:model:batch[:precision[:workers]]")
    family, model, batch = parts[0], parts[1], int(parts[2])
    precision = parts[3] if len(parts) > 3 else "fp32"
    workers = int(parts[4]) if len(parts) > 4 else 0
    for config in (_config(run, options) for run in grid.configurations(options.device, 0)):
        r = config.run
        if (r.family, r.model, r.batch_size, r.precision, r.workers) == (family, model, batch, precision, workers):
            return config
    raise ValueError(f"--pairs: no configuration {spec!r} in the grid")


# ---------------------------------------------------------------------------------------------------- the campaign


class Campaign:
    def __init__(self, options):
        self.options = options
        self.out = Path(options.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(options.scratch) if options.scratch else self.out
        self.finished = ("ok",) if options.retry_failed else ("ok", "failed")
        self.runs = Table(self.out / "runs.csv", run_columns(), "key")
        self.pairs = Table(self.out / "pairs.csv", PAIR_COLUMNS, "pair_key")
        self.began = time.monotonic()
        self.deadline = None if options.budget_seconds is None else self.began + options.budget_seconds
        self.stack: Stack | None = None
        self.versions: dict | None = None
        self.gpus: tuple[str, ...] | None = None  # this machine's GPU UUIDs, asked once a pair needs them
        self.counts = {"ok": 0, "failed": 0, "incomplete": 0, "skipped": 0, "pairs": 0, "waiting": 0}
        self.stopped_by_budget = False  # a step did not fit (it waits for the next block), or a job was ended
        self.cut = False  # a job was ended by the budget: nothing more runs
        self.deferred: set[tuple[Config, Config]] = set()  # pairs whose target modes wait for the next block
        self.planned: dict[tuple[Config, Config], list[str]] = {}  # each pair's modes of one block (run sets it)

    # -- budget
    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def fits(self, estimate: float) -> bool:
        return job_fits(estimate, self.left(), self.stack is not None)

    def measured(self, config: Config) -> list[float]:
        """Wall times of the configuration's ok solo rows (any repeat)."""
        return [
            row["wall_seconds"]
            for row in self.runs.rows
            if row["status"] == "ok"
            and row["role"] == "solo"
            and row_settings(row) == config.settings
            and row["wall_seconds"]
        ]

    def estimate(self, config: Config) -> float:
        same = self.measured(config)
        if same:
            return max(same) * ESTIMATE_MARGIN
        if self.options.estimate_seconds is not None:
            return self.options.estimate_seconds
        return grid.estimated_seconds(config.run)

    def ensure_stack(self) -> None:
        if self.stack is None:
            self.versions = versions(self.options.device)
            self.stack = Stack(self.out, self.scratch, self.options.prometheus_binary)
            say(
                f"exporter at {self.stack.target}, Prometheus at {self.stack.url} (data in "
                f"{self.scratch / 'prometheus-data'})"
            )

    # -- one or two jobs
    def command(self, run: Run) -> list[str]:
        workload = [
            sys.executable,
            "-m",
            "alnair_dataset.workloads",
            run.family,
            "--model",
            run.model,
            "--batch-size",
            str(run.batch_size),
            "--steps",
            str(run.steps),
            "--device",
            run.device,
            "--seed",
            str(run.seed),
            "--precision",
            run.precision,
            "--workers",
            str(run.workers),
        ]
        return [sys.executable, "-m", "alnair.intercept.launcher", *workload]

    def execute(self, jobs: list[tuple[str, Config, dict]]) -> list[dict]:
        """Runs the jobs ((key, configuration, extra row fields)) at once, each row first written incomplete, and
        profiles each; returns their final rows."""
        rows, procs, samplers = [], [], []
        for key, config, extra in jobs:
            r = config.run
            row = {
                "key": key,
                "status": "incomplete",
                "run_family": r.family,
                "run_model": r.model,
                "run_batch_size": r.batch_size,
                "run_steps": r.steps,
                "run_precision": r.precision,
                "run_workers": r.workers,
                "run_device": r.device,
                "run_seed": r.seed,
                "run_repeat": config.repeat,
                "started_at": time.time(),
                **(self.versions or {}),
                **extra,
            }
            self.runs.put(row)
            rows.append(row)
        for (key, config, extra), row in zip(jobs, rows):
            env = job_environment(dict(os.environ), str(self.stack.shm), extra)
            log = open(self.stack.logs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", key) + ".log"), "w")
            row["started_at"] = time.time()
            procs.append(
                (subprocess.Popen(self.command(config.run), env=env, stdout=log, stderr=subprocess.STDOUT), log)
            )
            samplers.append(ProcessSampler(procs[-1][0].pid))
        cut = False
        try:
            while any(p.poll() is None for p, _ in procs):
                if self.left() < SHUTDOWN_RESERVE + 1:
                    cut = True
                    break
                for (p, _), row in zip(procs, rows):
                    if p.poll() is not None and row.get("ended_at") is None:
                        row["ended_at"] = time.time()
                time.sleep(0.05)
        except Stop:
            cut = True
            raise
        finally:
            for p, _ in procs:  # every job told first, so a pair's two end within the one shut-down reserve
                if p.poll() is None:
                    p.terminate()
            for (p, log), row, sampler in zip(procs, rows, samplers):
                try:
                    p.wait(4)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                if row.get("ended_at") is None:
                    row["ended_at"] = time.time()
                log.close()
                row.update(sampler.columns())
                row["exit_code"] = p.returncode
                row["wall_seconds"] = row["ended_at"] - row["started_at"]
                if cut:
                    self.runs.put(row)  # stays incomplete
                    self.counts["incomplete"] += 1
        if cut:
            self.stopped_by_budget = self.cut = True
            return rows
        for (p, _), row in zip(procs, rows):
            row.update(self._profile(p, row))
            self.runs.put(row)
            self.counts[row["status"]] += 1
        return rows

    def _profile(self, proc: subprocess.Popen, row: dict) -> dict:
        if proc.returncode != 0:
            return {"status": "failed"}
        since = row["started_at"] - 1
        if not self.stack.exited(proc.pid, since, timeout=30):
            return {"status": "failed"}
        found = self.stack.profile(proc.pid, since)
        if found is None:
            return {"status": "failed"}
        return {**found, "status": "ok"}

    # -- the plan
    def solo(self, config: Config, label: str, for_pair: bool = False) -> dict | None:
        """The configuration's solo row: measured before, or measured now; None when the budget stops it."""
        done = self.runs.done(config.key, self.finished)
        if done is not None:
            self.counts["skipped"] += not for_pair  # a pair's baseline measured before is no configuration skipped
            return done
        estimate = self.estimate(config)
        if not self.fits(estimate):
            self.stop_for(config.key, estimate)
            return None
        self.ensure_stack()
        began = time.monotonic()
        [row] = self.execute([(config.key, config, {"role": "solo"})])
        say(
            f"{label} {config.key}: {row['status']}, {row['wall_seconds']:.1f} s wall, "
            f"{_fmt(row.get('duration_seconds'))} s duration, {_fmt(row.get('steps'))} steps "
            f"({time.monotonic() - began:.1f} s with the profile){self.budget_note()}"
        )
        return row if row["status"] != "incomplete" else None

    def on_this_gpu(self, row: dict) -> bool:
        """Whether the row ran on this machine's GPUs (a job's time depends on its GPU and host: the H200s lent for
        different blocks differ by up to a third for one configuration). CPU rows name no GPU."""
        if self.gpus is None:
            self.gpus = gpu_uuids(self.options.device)
        used = row_gpus(row)
        return bool(used) == bool(self.gpus) and used <= set(self.gpus)

    def latest_here(self, config: Config) -> dict | None:
        """The latest ok solo or baseline row of the configuration's settings that ran on this GPU."""
        here = [
            r
            for r in self.runs.rows
            if r["status"] == "ok"
            and r["role"] in ("solo", "baseline")
            and row_settings(r) == config.settings
            and self.on_this_gpu(r)
        ]
        return here[-1] if here else None

    def alone_here(self, config: Config) -> bool:
        """Whether a pair could use a row of the configuration alone on this GPU without measuring one (baseline)."""
        solo = self.runs.done(config.key, self.finished)
        return (solo is not None and (solo["status"] != "ok" or self.on_this_gpu(solo))) or self.latest_here(
            config
        ) is not None

    def baseline(self, config: Config, label: str) -> dict | None:
        """A pair side's time alone on this GPU: its configuration's solo row (measured now when missing), or when
        that ran elsewhere the latest ok solo or baseline row of its settings measured here, or else a baseline row
        measured now (role baseline: not one of the dataset's solo runs). None when the budget stops it."""
        solo = self.solo(config, label, for_pair=True)
        if solo is None or solo["status"] != "ok" or self.on_this_gpu(solo):
            return solo
        here = self.latest_here(config)
        if here is not None:
            return here
        key = f"{config.key}|baseline|{self.gpus[0] if self.gpus else 'cpu'}"
        done = self.runs.done(key, self.finished)
        if done is not None:
            return done
        estimate = self.estimate(config)
        if not self.fits(estimate):
            self.stop_for(key, estimate)
            return None
        self.ensure_stack()
        [row] = self.execute([(key, config, {"role": "baseline"})])
        say(
            f"{label} {key}: {row['status']}, {row['wall_seconds']:.1f} s wall (its solo run was on another GPU)"
            f"{self.budget_note()}"
        )
        return row if row["status"] != "incomplete" else None

    def pair_run(self, pair_key: str) -> dict | None:
        """The a side's run of the mode's latest ok pair row ({} when its row is missing), or None without one."""
        row = self.pairs.done(pair_key, statuses=("ok",))
        if row is None:
            return None
        return self.runs.done(row["shared_a_key"], ("ok",)) or {}

    def pair_held(self, a: Config, b: Config, mode: str) -> bool:
        """Whether the rows hold the pair in this mode: its ok row ran on this GPU, or every mode planned for the pair's
        block has an ok row and all ran on one GPU (on_one_gpu). A pair whose modes are not all measured on one GPU
        measures the ones that ran elsewhere again here, beside the missing ones, so that its modes compare on one GPU
        and one host (two H100s lent for two blocks ran one configuration's steps up to 47% apart). A mode planned
        for a later phase is held by any ok row."""
        run = self.pair_run(f"{mode}|{a.key}|{b.key}")
        return run is not None and (self.on_this_gpu(run) or self.on_one_gpu(a, b, mode))

    def on_one_gpu(self, a: Config, b: Config, mode: str) -> bool:
        """Whether the pair has an ok row in every mode of this mode's block (itself alone for a later phase's mode),
        all of them run on one GPU."""
        group = self.planned.get((a, b), [])
        runs = [self.pair_run(f"{m}|{a.key}|{b.key}") for m in (group if mode in group else [mode])]
        return None not in runs and len({frozenset(row_gpus(r)) for r in runs}) == 1

    def pair(self, a: Config, b: Config, mode: str, label: str, partners: int = 0) -> None:
        """The pair in one mode, after its baselines; with `partners` other target modes of it still to run, only
        if the baselines and all of them fit in what is left (plan.partners_after), else it and they wait."""
        pair_key = f"{mode}|{a.key}|{b.key}"
        if self.pair_held(a, b, mode):
            self.counts["skipped"] += 1
            return
        before = [self.runs.done(f"{pair_key}|{side}", self.finished) for side in "ab"]
        if all(before) and any(r["status"] == "failed" for r in before):  # e.g. the two did not fit in the GPU's memory
            self.counts["skipped"] += 1
            return
        if (a, b) in self.deferred:
            self.counts["waiting"] += 1
            return
        if partners:
            needs = [self.estimate(c) for c in dict.fromkeys((a, b)) if not self.alone_here(c)]
            whole = plan.group_need(needs + [self.estimate(a) + self.estimate(b)] * (1 + partners), PROFILE_RESERVE)
            if not self.fits(whole):
                self.deferred.add((a, b))
                self.stop_for(f"{pair_key} and its other {partners} mode(s)", whole)
                return
        solo_a, solo_b = self.baseline(a, label + " solo a"), None
        if solo_a is not None:
            solo_b = self.baseline(b, label + " solo b")
        if solo_a is None or solo_b is None or self.cut:
            return
        if solo_a["status"] != "ok" or solo_b["status"] != "ok":
            say(f"{label} {pair_key}: skipped (a solo run failed)")
            return
        estimate = (solo_a["wall_seconds"] + solo_b["wall_seconds"]) * ESTIMATE_MARGIN
        if not self.fits(estimate):
            self.stop_for(pair_key, estimate)
            return
        self.ensure_stack()
        jobs = [
            (
                f"{pair_key}|{side}",
                config,
                {"role": "shared", "pair_key": pair_key, "mode": mode, **modes.MODES[mode].side(index)},
            )
            for index, (side, config) in enumerate((("a", a), ("b", b)))
        ]
        shared_a, shared_b = self.execute(jobs)
        if self.cut or "ok" != shared_a["status"] or "ok" != shared_b["status"]:
            say(f"{label} {pair_key}: shared run {shared_a['status']}/{shared_b['status']}")
            return
        self.pairs.put(pair_row(pair_key, mode, solo_a, solo_b, shared_a, shared_b))
        self.counts["pairs"] += 1
        row = self.pairs.rows[-1]
        say(
            f"{label} {pair_key}: slowdowns {row['slowdown_a']:+.3f} / {row['slowdown_b']:+.3f}, "
            f"packing saving {row['packing_saving']:+.3f}{self.budget_note()}"
        )

    def holds(self, item: plan.Item) -> bool:
        """Whether the rows hold the step already (a finished solo row; a pair's ok row, pair_held)."""
        if item.config is not None:
            return self.runs.done(item.config.key, self.finished) is not None
        return self.pair_held(*item.pair, item.mode)

    def stop_for(self, what: str, estimate: float) -> None:
        """A step that does not fit in what is left waits for the next block; the later steps that fit still run."""
        if not self.stopped_by_budget:
            say(
                f"budget: stopping before {what} (estimated {estimate:.0f} s, {max(0.0, self.left()):.0f} s left); "
                "it waits for the next block, later steps that fit go on"
            )
        self.stopped_by_budget = True
        self.counts["waiting"] += 1

    def budget_note(self) -> str:
        return "" if self.deadline is None else f"; {max(0.0, self.left()):.0f} s of the budget left"

    def run(self, items: list[plan.Item]) -> None:
        """The plan in order (plan.build), each step skipped when the rows hold it; a step that does not fit in what
        is left of the budget waits for the next block while the later ones that fit go on. A pair's first pending
        target mode brings its other pending ones right after it, all or none in this block (plan.partners_after)."""
        ran_early: set[str] = set()  # a pair's other target modes, run right after its first
        self.planned = plan.target_blocks(items, self.options.pair_modes)
        try:
            for index, item in enumerate(items, 1):
                if self.cut:
                    break
                if item.key in ran_early:
                    continue
                if not self.fits(MIN_JOB_SECONDS):  # nothing fits any more: name the first step left, and stop
                    left = next((i for i in items[index - 1 :] if not self.holds(i)), None)
                    if left is not None:
                        self.stop_for(left.key, self.estimate(left.config) if left.config else MIN_JOB_SECONDS)
                    break
                if item.config is not None:
                    self.solo(item.config, f"[{index}/{len(items)}]")
                elif self.holds(item):  # measured already: the pair's pending modes after it form their own group
                    self.counts["skipped"] += 1
                else:
                    partners = plan.partners_after(
                        items, index - 1, self.options.pair_modes, lambda later: not self.holds(later)
                    )
                    self.pair(*item.pair, item.mode, f"[{index}/{len(items)} pair {item.mode}]", len(partners))
                    if item.pair in self.deferred:
                        continue
                    for position in partners:
                        if not self.cut:
                            partner = items[position]
                            self.pair(*partner.pair, partner.mode, f"[{position + 1}/{len(items)} pair {partner.mode}]")
                            ran_early.add(partner.key)
        finally:
            if self.stack is not None:
                self.stack.stop()
            for table in (self.runs, self.pairs):
                if table.rows:
                    problem = table.parquet()
                    if problem:
                        say(f"no Parquet: {problem}")


def pair_row(pair_key: str, mode: str, solo_a: dict, solo_b: dict, shared_a: dict, shared_b: dict) -> dict:
    """The original project's definitions: slowdown = shared time / solo time - 1; packing saving =
    1 - max(shared times) / (sum of solo times); with the mode's settings of each side (modes.Mode.pair_columns)."""
    sa, sb = solo_a["duration_seconds"], solo_b["duration_seconds"]
    ta, tb = shared_a["duration_seconds"], shared_b["duration_seconds"]
    return {
        "pair_key": pair_key,
        "status": "ok",
        "mode": mode,
        **modes.MODES[mode].pair_columns(),
        "solo_a_key": solo_a["key"],
        "solo_b_key": solo_b["key"],
        "shared_a_key": shared_a["key"],
        "shared_b_key": shared_b["key"],
        "solo_a_seconds": sa,
        "solo_b_seconds": sb,
        "shared_a_seconds": ta,
        "shared_b_seconds": tb,
        "slowdown_a": ta / sa - 1,
        "slowdown_b": tb / sb - 1,
        "packing_saving": 1 - max(ta, tb) / (sa + sb),
        "measured_at": time.time(),
    }


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def say(line: str) -> None:
    print(f"campaign: {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Runs the dataset's grid under the intercepts, recorded by the exporter "
        "and Prometheus, and profiles each job into DIR/runs.csv; pairs into DIR/pairs.csv.",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="The campaign's directory (resumed when it has rows)."
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--families", nargs="+", choices=tuple(grid.MODELS), help="Only these families.")
    parser.add_argument("--models", nargs="+", help="Only these models.")
    parser.add_argument("--batch-sizes", nargs="+", type=int_at_least(1), help="Only these batch sizes.")
    parser.add_argument("--precisions", nargs="+", choices=grid.PRECISIONS, help="Only these precisions.")
    parser.add_argument("--workers", nargs="+", type=int_at_least(0), help="Only these DataLoader worker counts.")
    parser.add_argument(
        "--repeats", type=int_at_least(1), default=1, help="Repeats of every configuration (default 1)."
    )
    parser.add_argument("--steps", type=int_at_least(1), help="Every job trains this many steps instead of the grid's.")
    parser.add_argument(
        "--pairs",
        nargs="*",
        default=[],
        metavar="PAIR",
        help="auto:N, or A+B with each side family:model:batch[:precision[:workers]].",
    )
    parser.add_argument(
        "--pairs-only",
        action="store_true",
        help="Run only the pairs and their solo baselines, not every chosen configuration.",
    )
    parser.add_argument(
        "--pair-modes",
        type=comma_separated(_mode),
        default=list(modes.DEFAULT),
        help=f"Comma-separated, of {modes.names()} (default: {','.join(modes.DEFAULT)}): limit-A-B sets "
        "ALNAIR_COMPUTE_LIMIT (a cap) of side a to A and of b to B, share-A-B ALNAIR_COMPUTE_SHARE (a "
        "share). A pair's first mode of each kind (time-sliced, capped, shared) runs in one block.",
    )
    parser.add_argument(
        "--other-modes-pairs",
        type=int_at_least(0),
        metavar="K",
        help="Only the first K pairs (in the plan's order) run the modes after each kind's first "
        "(share-30-70 after share-50-50), each right after its pair's first ones, on the same "
        "baselines; default: every pair, after the targets.",
    )
    parser.add_argument(
        "--budget-seconds", type=float, help="Stop before a job that would not end in this many seconds."
    )
    parser.add_argument(
        "--estimate-seconds",
        type=float,
        help="A job's expected wall time before one like it was measured (default: the grid's H200 estimate).",
    )
    parser.add_argument(
        "--prometheus-binary",
        default=shutil.which("prometheus") or "prometheus",
        metavar="PATH",
        help="Prometheus's binary (default: prometheus on PATH).",
    )
    parser.add_argument(
        "--scratch",
        metavar="DIR",
        help="Where Prometheus's data and the segments go (default: --out); "
        "on the GPU machine a local disk, so --out holds only the rows and logs that come back.",
    )
    parser.add_argument("--retry-failed", action="store_true", help="Run configurations whose last row failed again.")
    parser.add_argument(
        "--list", action="store_true", help="Print the configurations and pairs, with their state; run nothing."
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="Print the plan in the order it runs, each step's expected block and what the rows would cover "
        "after it, and when the targets are reached; run nothing.",
    )
    parser.add_argument(
        "--core",
        type=int_at_least(1),
        default=plan.REPEATED_TARGET,
        help="The first N configurations of the interleaved order get their repeats early and make up "
        f"the auto pairs (default {plan.REPEATED_TARGET}).",
    )
    parser.add_argument(
        "--block-seconds",
        type=float,
        default=plan.BLOCK_SECONDS,
        help=f"--plan: the campaign budget of one block (default {plan.BLOCK_SECONDS:g}).",
    )
    return parser


def coverage_of(campaign: Campaign, items: list[plan.Item]) -> list[plan.Step]:
    """The plan walked from the rows there (ok solo rows; the pairs whose planned modes all ran on one GPU, as every
    block is taken to run on a GPU the rows have not seen), with the runner's estimates and budget rule."""
    solo = [r for r in campaign.runs.rows if r["role"] == "solo" and r["status"] == "ok"]
    campaign.planned = plan.target_blocks(items, campaign.options.pair_modes)
    coverage = plan.Coverage(
        {r["key"] for r in solo},
        {i.key for i in items if i.pair is not None and campaign.on_one_gpu(*i.pair, i.mode)},
        {r["key"]: r["run_family"] for r in solo},
        {r["key"]: row_settings(r) for r in solo},
    )

    def expected(config: Config) -> float:
        same = campaign.measured(config)
        return sum(same) / len(same) if same else grid.estimated_seconds(config.run)

    return plan.walk(
        items,
        coverage,
        campaign.options.repeats,
        campaign.options.pair_modes,
        campaign.estimate,
        expected,
        job_fits,
        profile_seconds=PROFILE_OVERHEAD,
        startup_seconds=STACK_STARTUP,
        reserve_seconds=PROFILE_RESERVE,
        block_seconds=campaign.options.block_seconds,
    )


def print_plan(campaign: Campaign, items: list[plan.Item]) -> None:
    """--plan: one line a step (index, block, state, expected seconds, solo runs / families / repeated
    configurations / pairs after it, key), then when each target is reached."""
    steps = coverage_of(campaign, items)
    print("step\tblock\tseconds\tsolo\tfamilies\trepeated\tpairs\tkey")
    for s in steps:
        p = s.progress
        print(
            f"{s.index}\t{s.block or 'done'}\t{s.seconds:.0f}\t"
            f"{p.solo}\t{p.families}\t{p.repeated}\t{p.pairs}\t{s.item.key}"
        )
    for line in plan_summary(
        steps, campaign.options.repeats, campaign.options.block_seconds, campaign.options.pair_modes
    ):
        print(line)


def plan_summary(steps: list[plan.Step], repeats: int, block_seconds: float, pair_modes: list[str]) -> list[str]:
    todo = [s for s in steps if s.block]
    lines = [
        f"plan: {len(steps)} steps, {len(steps) - len(todo)} in the rows, {len(todo)} to do "
        f"(~{sum(s.seconds for s in todo) / 3600:.1f} h in {max([s.block for s in todo], default=0)} blocks of "
        f"{block_seconds:g} s)"
    ]
    targets = [
        ("solo runs", lambda p: p.solo >= plan.SOLO_TARGET, plan.SOLO_TARGET),
        ("families", lambda p: p.families >= len(grid.MODELS), len(grid.MODELS)),
        ("configurations with every repeat", lambda p: p.repeated >= plan.REPEATED_TARGET, plan.REPEATED_TARGET),
        (f"pairs in {sharing_kinds(pair_modes)}", lambda p: p.pairs >= plan.PAIR_TARGET, plan.PAIR_TARGET),
    ]
    if repeats < 3:
        targets.pop(2)
    for name, met, target in targets:
        at = next((s for s in steps if met(s.progress)), None)
        lines.append(
            f"plan: {target} {name}: "
            + (
                "never (not in the plan)"
                if at is None
                else "reached already"
                if at.block == 0
                else f"in block {at.block}, after {steps.index(at) + 1 - (len(steps) - len(todo))} steps to do"
            )
        )
    return lines


def sharing_kinds(pair_modes: list[str]) -> str:
    """The kinds of sharing the pair target asks for: "timeslice and limit", "timeslice and share", ..."""
    return " and ".join(k for k in modes.KINDS if any(modes.kind_of(m) == k for m in pair_modes))


def _mode(text: str) -> str:
    if text not in modes.MODES:
        raise ValueError(f"not a pair mode ({modes.names()}): {text!r}")
    return text


def _on_signal(signum, frame):
    raise Stop(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        configs = configurations(options)
        pairs = pair_specs(options, configs)
    except ValueError as e:
        fail(PROG, str(e))
    if not configs and not pairs:
        fail(PROG, "no configuration matches the filters")
    if not (options.list or options.plan) and shutil.which(options.prometheus_binary) is None:
        fail(PROG, f"--prometheus-binary: no executable {options.prometheus_binary!r}")
    campaign = Campaign(options)
    items = build_plan(options, configs, pairs)
    if options.plan:
        print_plan(campaign, items)
        return 0
    if options.list:  # every solo run, then every pair and mode, with its state
        for item in [i for i in items if i.config is not None] + [i for i in items if i.pair is not None]:
            if item.config is not None:
                done = campaign.runs.done(item.key)
                print(f"{item.key}\t{done['status'] if done else 'to do'}\t~{campaign.estimate(item.config):.0f} s")
            else:
                print(f"{item.key}\t{'ok' if campaign.pairs.done(item.key, ('ok',)) else 'to do'}")
        return 0
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        campaign.run(items)
    except Stop as e:
        say(f"stopped by {e}: the running jobs' rows are marked incomplete")
        return 143
    except ProfileError as e:
        fail(PROG, str(e))
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    c = campaign.counts
    state = "stopped by the budget" if campaign.stopped_by_budget else "done"
    say(
        f"{state}: {c['ok']} ok, {c['failed']} failed, {c['incomplete']} incomplete, {c['skipped']} already measured, "
        f"{c['pairs']} pairs, {c['waiting']} waiting for the next block; "
        f"{len([r for r in campaign.runs.rows if r['status'] == 'ok'])} ok rows in {campaign.runs.path} "
        f"in {time.monotonic() - campaign.began:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
