"""The campaign's runs in the published 66-column schema: the published names in their order, values per run from
the rich table's columns (x 100 for ratios; the psutil ones from the campaign's sampler of each job), empty where
nothing measures them, and committed files that the converter regenerates byte for byte."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from alnair_dataset import published, sources


@pytest.fixture(scope="module")
def campaign():
    return sources.load_campaign()


def test_the_published_copy_is_the_original_file():
    digest = hashlib.sha256(sources.PUBLISHED_CSV.read_bytes()).hexdigest()
    assert digest == "9163c60351e25648a078ffb4e4d68d86c885704bcd137bc7c722180c95faecbd"
    assert sources.load_published().shape == (49, 66)


def test_names_and_order_are_the_published_tables():
    header = sources.PUBLISHED_CSV.read_text().splitlines()[0].split(",")
    assert published.NAMES == header
    assert len(published.MEASURED) == 63  # all but the power ratios


def test_each_value_comes_from_its_run(campaign):
    table, keys = published.convert(campaign.runs)
    solo = campaign.runs[(campaign.runs.role == "solo") & (campaign.runs.status == "ok")]
    assert len(table) == len(solo) and list(table.ID) == list(range(1, len(solo) + 1))
    rich = campaign.runs.set_index("key").loc[keys.key]
    assert np.allclose(table.MGUP, (rich.gpu_util_ratio_max * 100).round(4))
    assert np.allclose(table.MGMAP, (rich.gpu_memory_used_ratio_max * 100).round(4))
    assert np.allclose(table["CPU_Util_%_ran"], (rich.cpu_util_ratio_range * 100).round(4))
    assert np.allclose(table.GPU_Temp_ran, rich.gpu_temperature_celsius_range)
    assert list(table.BS) == list(rich.run_batch_size)
    assert set(table.Dataset) <= set(published.DATASET_OF_FAMILY.values())
    resnet = table[(table.Model == "resnet50") & (table.BS == 128)].iloc[0]
    assert resnet.MGUP == 100.0 and resnet.Cor_in_Sys == 16


def test_columns_nothing_measures_are_empty_and_say_why(campaign):
    table, _ = published.convert(campaign.runs)
    empty = [c.name for c in published.COLUMNS if c.compute is None]
    assert empty == ["GPUPR", "MaGPUPR", "MiGPUPR"] and table[empty].isna().all().all()
    sampled = [c.name for c in published.COLUMNS if c.compute is not None and "psutil" in c.how]
    # RSS (2), threads, CPU times (10), CPU statistics (4), memory (10), disk (4), network (8)
    assert len(sampled) == 39
    training = ["Min_GPU_Util_%", "GPU_Util_%_ran"]
    assert table[[c for c in published.MEASURED if c not in sampled + training]].notna().all().all()
    # the training minimum's columns are there in every row profiled with it, and only there
    solo = sources.solo_runs(campaign.runs)
    profiled = solo["gpu_util_ratio_training_min"].notna().values
    assert table.loc[profiled, training].notna().all().all() and table.loc[~profiled, training].isna().all().all()
    # the psutil columns are there in every row the sampler measured, and only there
    has_samples = solo["proc_samples"].notna() if "proc_samples" in solo else pd.Series(False, index=solo.index)
    assert table.loc[has_samples.values, [c for c in sampled if c != "CS_syscalls"]].notna().all().all()
    assert table.loc[~has_samples.values, sampled].isna().all().all()
    text = published.dictionary("calibration")
    for column in published.COLUMNS:
        assert f"|{column.name}|{column.how}|" in text
    assert "not measured" in text and "since boot" in text


def test_only_solo_runs_that_ended_are_rows(campaign):
    one = campaign.runs[campaign.runs.role == "solo"].iloc[[0, 0, 0, 0]].copy()
    one["key"] = ["late", "failed", "shared", "early"]
    one["status"] = ["ok", "failed", "ok", "ok"]
    one["role"] = ["solo", "solo", "shared", "solo"]
    one["started_at"] = [2.0, 1.0, 0.0, 1.5]
    table, keys = published.convert(one)
    assert list(keys.key) == ["early", "late"] and list(table.ID) == [1, 2]


def test_committed_files_are_what_the_converter_writes(tmp_path):
    published.write(tmp_path)
    for name in ("runs.csv", "keys.csv", "columns.md"):
        assert (tmp_path / name).read_bytes() == (sources.CONVERTED / name).read_bytes(), name
    assert pd.read_parquet(tmp_path / "runs.parquet").equals(pd.read_parquet(sources.CONVERTED / "runs.parquet"))


def test_the_gpu_minimum_and_range_are_over_training(campaign):
    # rows profiled before the column existed load with it empty, and so do their two columns
    runs = campaign.runs.assign(gpu_util_ratio_training_min=np.nan)
    assert published.convert(runs)[0][["Min_GPU_Util_%", "GPU_Util_%_ran"]].isna().all().all()
    runs = runs.assign(gpu_util_ratio_training_min=0.25, gpu_util_ratio_max=0.75)
    table = published.convert(runs)[0]
    assert (table["Min_GPU_Util_%"] == 25).all() and (table["GPU_Util_%_ran"] == 50).all()
