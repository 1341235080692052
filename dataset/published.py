"""The published 66-column schema: how each column is computed from one run of the campaign's rich table (or why it
cannot be), the converter, and the column dictionary it writes. `python -m alnair.dataset.published` regenerates
dataset/data/published-schema/ from the committed runs."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from alnair.dataset import sources

# the synthetic inputs stand for these datasets (docs/dataset.md, Workloads)
DATASET_OF_FAMILY = {"classify": "GTSRB-like", "segment": "Oxford-Pet-like", "dqn": "CartPole",
                     "dcgan": "MNIST-like", "bert": "IMDB-like"}

NO_PROCESS_SERIES = "not measured: Alnair exports no per-process RSS or thread count"
NO_PSUTIL = "not measured: the campaign records no per-run psutil {what}"
NO_POWER_LIMIT = "not measured: the exporter serves power in watts (gpu_power_watts_*), not the power limit"


@dataclass(frozen=True)
class Column:
    name: str
    how: str                                                   # for the column dictionary
    compute: Callable[[pd.DataFrame], pd.Series] | None        # None: cannot be measured, left empty


def _percent(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda runs: runs[column] * 100.0


def _same(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda runs: runs[column]


def _percent_col(name: str, column: str) -> Column:
    return Column(name, f"`{column}` x 100", _percent(column))


def _absent(name: str, why: str) -> Column:
    return Column(name, why, None)


def _psutil(names: list[str], what: str) -> list[Column]:
    return [_absent(name, NO_PSUTIL.format(what=what)) for name in names]


COLUMNS: list[Column] = [
    Column("ID", "1..n: the solo `ok` rows in the order they started (`keys.csv` maps each ID to its campaign key)",
           lambda runs: pd.Series(np.arange(1, len(runs) + 1), index=runs.index)),
    Column("Model", "`run_model`", _same("run_model")),
    Column("Dataset", "the family's synthetic input: " + ", ".join(f"{f} {d}" for f, d in DATASET_OF_FAMILY.items()),
           lambda runs: runs["run_family"].map(DATASET_OF_FAMILY)),
    Column("Epoch", "`epochs`: DataLoader passes the record counted (a run is `run_steps` steps, not epochs)",
           _same("epochs")),
    Column("BS", "`run_batch_size`", _same("run_batch_size")),
    Column("Run_Env", "`gpu_name`, `node_cpus` CPUs, `run_precision`, `run_workers` workers (the original: the Colab runtime)",
           lambda runs: runs["gpu_name"].astype(str) + ", " + runs["node_cpus"].astype("Int64").astype(str) + " CPUs, "
           + runs["run_precision"].astype(str) + ", " + runs["run_workers"].astype(str) + " workers"),
    _percent_col("CPU_Util_%_ran", "cpu_util_ratio_range"),
    _percent_col("Max_CPU_Util_%", "cpu_util_ratio_max"),
    _percent_col("Min_CPU_Util_%", "cpu_util_ratio_min"),
    _percent_col("GPU_Util_%_ran", "gpu_util_ratio_range"),
    _percent_col("MGUP", "gpu_util_ratio_max"),
    _percent_col("Min_GPU_Util_%", "gpu_util_ratio_min"),
    _percent_col("Sys_Mem_Util_%_ran", "sys_memory_util_ratio_range"),
    _percent_col("Max_Sys_Mem_Util_%", "sys_memory_util_ratio_max"),
    _percent_col("Min_Sys_Mem_Util_%", "sys_memory_util_ratio_min"),
    _absent("MaPMiU(non swap)", NO_PROCESS_SERIES),
    _absent("PMiU(non swap)_%", NO_PROCESS_SERIES),
    _absent("CPU_Thds", NO_PROCESS_SERIES),
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
    *_psutil(["SCT_user", "SCT_nice", "SCT_sys", "SCT_idle", "SCT_iowait", "SCT_irq", "SCT_softirq", "SCT_steal",
              "SCT_guest", "SCT_guest_nice"], "CPU times (the original's are counters since boot)"),
    Column("Cor_in_Sys", "`node_cpus`", _same("node_cpus")),
    *_psutil(["CS_ctx_switches", "CS_interrupts", "CS_soft_interrupts", "CS_syscalls"],
             "CPU statistics (the original's are counters since boot)"),
    Column("SMU_total", "`node_memory_total_bytes`", _same("node_memory_total_bytes")),
    *_psutil(["SMU_available", "SMU_percent", "SMU_used", "SMU_free", "SMU_active", "SMU_inactive", "SMU_buffers",
              "SMU_cached", "SMU_shared", "SMU_slab"], "memory reading at the run's end (`Max_Sys_Mem_Util_%` has the run's range)"),
    *_psutil(["DU_total", "DU_used", "DU_free", "DU_percent"], "disk usage"),
    *_psutil(["NIOB_sent", "NIOB_received", "NIOP_sent", "NIO_received", "NIO_errin", "NIO_errout", "NIO_dropin",
              "NIO_dropout"], "network counters (the original's are counters since boot)"),
]

DECIMALS = 4  # the published table has 2; a ratio x 100 keeps its sampled precision with 4

NAMES = [c.name for c in COLUMNS]
MEASURED = [c.name for c in COLUMNS if c.compute is not None]


def convert(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table in the published schema, ID -> key): one row per solo run that ran to its end, values per run."""
    solo = sources.solo_runs(runs)
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
        f"Made by `python -m alnair.dataset.published` from the {origin} campaign's rich runs table (its columns are in",
        "docs/dataset.md); every value is per run: statistics over the samples inside the run (1 s scrapes of 500 ms",
        "samples), never counters since boot. Only solo runs with status `ok` are rows; pairs are in the pairs table.",
        f"{len(MEASURED)} of the 66 columns are measured; the other {len(NAMES) - len(MEASURED)} are empty (no value in the CSV,",
        "null in Parquet) because nothing Alnair records measures them per run. Names and order are the published",
        "table's (`../published/alnair-open-data-columns.md` says what each meant there).",
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
