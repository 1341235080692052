"""The published 66-column schema: how each column is computed from one run of the campaign's rich table (or why it
cannot be), the converter, and the column dictionary it writes. `python -m alnair_dataset.published` regenerates
dataset/data/published-schema/ from the committed runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from alnair_dataset import process_sampler, sources

# the synthetic inputs stand for these datasets (docs/dataset.md, Workloads)
DATASET_OF_FAMILY = {
    "classify": "GTSRB-like",
    "segment": "Oxford-Pet-like",
    "dqn": "CartPole",
    "dcgan": "MNIST-like",
    "bert": "IMDB-like",
}

NO_POWER_LIMIT = "not measured: the exporter serves power in watts (gpu_power_watts_*), not the power limit"


@dataclass(frozen=True)
class Column:
    name: str
    how: str  # for the column dictionary
    compute: Callable[[pd.DataFrame], pd.Series] | None  # None: cannot be measured, left empty


def _percent(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda runs: runs[column] * 100.0


def _same(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda runs: runs[column]


def _percent_col(name: str, column: str) -> Column:
    return Column(name, f"`{column}` x 100", _percent(column))


def _absent(name: str, why: str) -> Column:
    return Column(name, why, None)


def _psutil(pairs: list[tuple[str, str]], how: str) -> list[Column]:
    """Published columns that are one psutil column of the rich table each (process_sampler), `how` the rule."""
    return [Column(name, f"`{column}`: {how}", _same(column)) for name, column in pairs]


COLUMNS: list[Column] = [
    Column(
        "ID",
        "1..n: the solo `ok` rows in the order they started (`keys.csv` maps each ID to its campaign key)",
        lambda runs: pd.Series(np.arange(1, len(runs) + 1), index=runs.index),
    ),
    Column("Model", "`run_model`", _same("run_model")),
    Column(
        "Dataset",
        "the family's synthetic input: " + ", ".join(f"{f} {d}" for f, d in DATASET_OF_FAMILY.items()),
        lambda runs: runs["run_family"].map(DATASET_OF_FAMILY),
    ),
    Column(
        "Epoch",
        "`epochs`: DataLoader passes the record counted (a run is `run_steps` steps, not epochs)",
        _same("epochs"),
    ),
    Column("BS", "`run_batch_size`", _same("run_batch_size")),
    Column(
        "Run_Env",
        "`gpu_name`, `node_cpus` CPUs, `run_precision`, `run_workers` workers (the original: the Colab runtime)",
        lambda runs: (
            runs["gpu_name"].astype(str)
            + ", "
            + runs["node_cpus"].astype("Int64").astype(str)
            + " CPUs, "
            + runs["run_precision"].astype(str)
            + ", "
            + runs["run_workers"].astype(str)
            + " workers"
        ),
    ),
    _percent_col("CPU_Util_%_ran", "cpu_util_ratio_range"),
    _percent_col("Max_CPU_Util_%", "cpu_util_ratio_max"),
    _percent_col("Min_CPU_Util_%", "cpu_util_ratio_min"),
    Column(
        "GPU_Util_%_ran",
        "(`gpu_util_ratio_max` - `gpu_util_ratio_training_min`) x 100: over training, as Min_GPU_Util_%",
        lambda runs: (runs["gpu_util_ratio_max"] - runs["gpu_util_ratio_training_min"]) * 100.0,
    ),
    _percent_col("MGUP", "gpu_util_ratio_max"),
    Column(
        "Min_GPU_Util_%",
        "`gpu_util_ratio_training_min` x 100: between the second step and the last, as the "
        "original profiler watched training (over the whole run it is the idle start-up's 0); empty in campaign "
        "blocks 1-21, whose Prometheus data was not kept",
        _percent("gpu_util_ratio_training_min"),
    ),
    _percent_col("Sys_Mem_Util_%_ran", "sys_memory_util_ratio_range"),
    _percent_col("Max_Sys_Mem_Util_%", "sys_memory_util_ratio_max"),
    _percent_col("Min_Sys_Mem_Util_%", "sys_memory_util_ratio_min"),
    Column(
        "MaPMiU(non swap)",
        "`proc_rss_bytes_max` / 2^20: the job's process tree's largest RSS in MiB (psutil, "
        "sampled every 0.5 s; the original: the process's)",
        lambda runs: runs["proc_rss_bytes_max"] / 2**20,
    ),
    Column(
        "PMiU(non swap)_%",
        "`proc_rss_bytes_max` / `node_memory_total_bytes` x 100: psutil's largest RSS over the "
        "node's memory (the original: #16 / #44)",
        lambda runs: runs["proc_rss_bytes_max"] / runs["node_memory_total_bytes"] * 100.0,
    ),
    Column(
        "CPU_Thds",
        "`proc_threads_max`: most threads of the job's process tree at one psutil sample",
        _same("proc_threads_max"),
    ),
    Column("GPU_Temp_ran", "`gpu_temperature_celsius_range`", _same("gpu_temperature_celsius_range")),
    Column("Max_GPU_Temp", "`gpu_temperature_celsius_max`", _same("gpu_temperature_celsius_max")),
    Column("Min_GPU_Temp", "`gpu_temperature_celsius_min`", _same("gpu_temperature_celsius_min")),
    _percent_col("GTSAMPR", "gpu_memory_busy_ratio_range"),
    _percent_col("MaGTSAMP", "gpu_memory_busy_ratio_max"),
    _percent_col("MiGTSAMP", "gpu_memory_busy_ratio_min"),
    _percent_col("MGMAP", "gpu_memory_used_ratio_max"),
    _absent("GPUPR", NO_POWER_LIMIT),
    _absent("MaGPUPR", NO_POWER_LIMIT),
    _absent("MiGPUPR", NO_POWER_LIMIT),
    *_psutil(
        [
            (f"SCT_{'sys' if m == 'system' else m}", f"sys_cpu_{m}_seconds")
            for m in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
        ],
        "the node's CPU seconds in that mode over the run, all CPUs (psutil.cpu_times() at the end less at the "
        "start; the original's: since boot)",
    ),
    Column("Cor_in_Sys", "`node_cpus`", _same("node_cpus")),
    *_psutil(
        [
            ("CS_ctx_switches", "sys_ctx_switches"),
            ("CS_interrupts", "sys_interrupts"),
            ("CS_soft_interrupts", "sys_soft_interrupts"),
            ("CS_syscalls", "sys_syscalls"),
        ],
        "the node's count over the run (psutil.cpu_stats() at the end less at the start; the original's: since "
        "boot; syscalls are 0 on Linux)",
    ),
    Column("SMU_total", "`node_memory_total_bytes`", _same("node_memory_total_bytes")),
    *_psutil(
        [
            ("SMU_available", "sys_memory_available_bytes"),
            ("SMU_percent", "sys_memory_percent"),
            ("SMU_used", "sys_memory_used_bytes"),
            ("SMU_free", "sys_memory_free_bytes"),
            ("SMU_active", "sys_memory_active_bytes"),
            ("SMU_inactive", "sys_memory_inactive_bytes"),
            ("SMU_buffers", "sys_memory_buffers_bytes"),
            ("SMU_cached", "sys_memory_cached_bytes"),
            ("SMU_shared", "sys_memory_shared_bytes"),
            ("SMU_slab", "sys_memory_slab_bytes"),
        ],
        "psutil.virtual_memory() at the run's last sample, while the job ran (`Max_Sys_Mem_Util_%` has the run's "
        "range)",
    ),
    *_psutil(
        [
            ("DU_total", "disk_total_bytes"),
            ("DU_used", "disk_used_bytes"),
            ("DU_free", "disk_free_bytes"),
            ("DU_percent", "disk_percent"),
        ],
        "psutil.disk_usage('/') at the run's last sample",
    ),
    *_psutil(
        [
            ("NIOB_sent", "net_bytes_sent"),
            ("NIOB_received", "net_bytes_recv"),
            ("NIOP_sent", "net_packets_sent"),
            ("NIO_received", "net_packets_recv"),
            ("NIO_errin", "net_errin"),
            ("NIO_errout", "net_errout"),
            ("NIO_dropin", "net_dropin"),
            ("NIO_dropout", "net_dropout"),
        ],
        "the node's count over the run, all interfaces (psutil.net_io_counters() at the end less at the start; "
        "the original's: since boot)",
    ),
]

DECIMALS = 4  # the published table has 2; a ratio x 100 keeps its sampled precision with 4

NAMES = [c.name for c in COLUMNS]
MEASURED = [c.name for c in COLUMNS if c.compute is not None]


def convert(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table in the published schema, ID -> key): one row per solo run that ran to its end, values per run."""
    solo = sources.solo_runs(runs)
    missing = [n for n in process_sampler.NAMES if n not in solo.columns]  # rows from before the psutil sampler
    solo = solo.reindex(columns=[*solo.columns, *missing])  # those columns empty, not an error
    table = pd.DataFrame(index=solo.index)
    for column in COLUMNS:
        table[column.name] = column.compute(solo) if column.compute else np.nan
    floats = table.select_dtypes("float").columns
    table[floats] = table[floats].round(DECIMALS)
    keys = pd.DataFrame({"ID": table["ID"], "key": solo["key"]})
    return table, keys


def dictionary(origin: str) -> str:
    """The converted table's column dictionary, in markdown: how each column is computed, or why it is empty."""
    lines = [
        "# The campaign's runs in the published 66-column schema: columns",
        "",
        f"Made by `python -m alnair_dataset.published` from the {origin} campaign's rich runs table "
        "(its columns are in",
        "docs/dataset.md); every value is per run: statistics over the samples inside the run (1 s scrapes of 500 ms",
        "samples), never counters since boot. Only solo runs with status `ok` are rows; pairs are in the pairs table.",
        f"{len(MEASURED)} of the 66 columns are measured; the other {len(NAMES) - len(MEASURED)} are empty (no value "
        "in the CSV,",
        "null in Parquet) because nothing the campaign records measures them per run. The psutil columns (process RSS",
        "and threads, CPU times and statistics, memory, disk, network) come from the campaign's sampler of each job",
        "(`dataset/process_sampler.py`): they are empty in rows measured before it (the first H200 block's).",
        "Names and order are the published table's (`../published/alnair-open-data-columns.md` says what each meant "
        "there).",
        "",
        "|#|Column|How it is computed here|",
        "|-|-|-|",
    ]
    lines += [f"|{i}|{c.name}|{c.how}|" for i, c in enumerate(COLUMNS, 1)]
    return "\n".join(lines) + "\n"


def write(out: Path = sources.CONVERTED, data: Path = sources.DATA) -> pd.DataFrame:
    campaign = sources.load_campaign(data)
    table, keys = convert(campaign.runs)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "runs.csv", index=False)
    keys.to_csv(out / "keys.csv", index=False)
    (out / "columns.md").write_text(dictionary(campaign.origin))
    try:
        table.to_parquet(out / "runs.parquet", index=False)
    except ImportError:  # pyarrow is the dataset extra's
        print("pyarrow not installed: no runs.parquet", file=sys.stderr)
    return table


def main(argv: list[str] | None = None) -> int:
    args = sources.command_line("published", __doc__, "published-schema").parse_args(argv)
    table = write(args.out or args.data / "published-schema", args.data)
    print(f"{len(table)} runs x {len(table.columns)} columns ({len(MEASURED)} measured) in the published schema")
    return 0


if __name__ == "__main__":
    sys.exit(main())
