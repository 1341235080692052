"""The nvml collector against a pynvml test double: per-GPU, per-process, MIG, failing GPUs, no driver."""
from __future__ import annotations

import argparse
import subprocess

import pytest

from alnair.collectors.nvml import NvmlCollector
from alnair.exporter.plugin import CollectorUnavailable
from alnair.exporter.registry import CollectorSpec
from alnair.exporter.sampler import CollectorRunner
from fake_pynvml import FakeGpu, FakeNvml
from support import parse_samples, require_binary

A = 'gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"'
B = 'gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"'


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu("GPU-aaaaaaaa-0000-0000-0000-000000000000"), FakeGpu("GPU-bbbbbbbb-0000-0000-0000-000000000000")]


def collector(nvml: FakeNvml, procfs: str = "/proc") -> NvmlCollector:
    return NvmlCollector(argparse.Namespace(procfs=procfs), nvml=nvml)


def sample(c: NvmlCollector) -> dict[str, float]:
    return parse_samples(c.collect().decode())


def test_per_gpu_metrics_are_in_base_units():
    gpus = two_gpus()
    gpus[0].__dict__.update(memory_used=2 * 2**30, utilization=(97, 41), temperature=61, power_mw=612_345,
                            energy_mj=9_000_500, clocks_mhz=(1755, 2619), pcie_kb_per_s=(100, 2000),
                            throttle=0x4 | 0x20, ecc=(3, 1), retired_pages=(2, 0), remapped_rows=(5, 1, 1, 0))
    s = sample(collector(FakeNvml(gpus, driver_version="560.35.03")))
    assert s[f'alnair_nvml_gpu_info{{driver_version="560.35.03",{A[:8]}name="NVIDIA H200",parent_uuid="",{A[8:]}}}'] == 1
    assert s[f"alnair_nvml_up{{{A}}}"] == 1 and s[f"alnair_nvml_up{{{B}}}"] == 1
    assert s[f"alnair_nvml_memory_used_bytes{{{A}}}"] == 2 * 2**30
    assert s[f"alnair_nvml_memory_total_bytes{{{A}}}"] == 150_000 * 2**20
    assert s[f"alnair_nvml_sm_utilization_ratio{{{A}}}"] == 0.97
    assert s[f"alnair_nvml_memory_utilization_ratio{{{A}}}"] == 0.41
    assert s[f"alnair_nvml_temperature_celsius{{{A}}}"] == 61
    assert s[f"alnair_nvml_power_watts{{{A}}}"] == pytest.approx(612.345)
    assert s[f"alnair_nvml_energy_joules_total{{{A}}}"] == pytest.approx(9000.5)
    assert s[f"alnair_nvml_sm_clock_hertz{{{A}}}"] == 1755e6
    assert s[f"alnair_nvml_memory_clock_hertz{{{A}}}"] == 2619e6
    assert s[f"alnair_nvml_pcie_transmit_bytes_per_second{{{A}}}"] == 100 * 1024
    assert s[f"alnair_nvml_pcie_receive_bytes_per_second{{{A}}}"] == 2000 * 1024
    assert s[f'alnair_nvml_throttle_reason_active{{gpu="0",reason="sw_power_cap",{A[8:]}}}'] == 1
    assert s[f'alnair_nvml_throttle_reason_active{{gpu="0",reason="sw_thermal_slowdown",{A[8:]}}}'] == 1
    assert s[f'alnair_nvml_throttle_reason_active{{gpu="0",reason="gpu_idle",{A[8:]}}}'] == 0
    assert s[f'alnair_nvml_ecc_errors_total{{gpu="0",type="corrected",{A[8:]}}}'] == 3
    assert s[f'alnair_nvml_ecc_errors_total{{gpu="0",type="uncorrected",{A[8:]}}}'] == 1
    assert s[f'alnair_nvml_retired_pages{{cause="single_bit_ecc",{A}}}'] == 2
    assert s[f'alnair_nvml_remapped_rows{{gpu="0",type="correctable",{A[8:]}}}'] == 5
    assert s[f"alnair_nvml_remapped_rows_pending{{{A}}}"] == 1


def test_unsupported_queries_are_absent_and_not_asked_again():
    gpus = two_gpus()
    gpus[1].unsupported = {"nvmlDeviceGetRetiredPages", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPowerUsage"}
    c = collector(FakeNvml(gpus))
    s = sample(c)
    assert s[f"alnair_nvml_up{{{B}}}"] == 1
    assert f"alnair_nvml_power_watts{{{B}}}" not in s and f"alnair_nvml_power_watts{{{A}}}" in s
    assert not any(B[8:] in k for k in s if "ecc" in k or "retired" in k)
    gpus[1].unsupported = set()  # support is decided once: the collector does not ask again
    assert f"alnair_nvml_power_watts{{{B}}}" not in sample(c)


def test_process_utilization_is_the_mean_of_new_samples_and_memory_is_per_process():
    gpus = two_gpus()
    gpus[0].processes = {4242: 3 * 2**30, 77: 2**20}
    gpus[0].utilization_samples = [(4242, 100, 80, 30), (4242, 200, 100, 50)]
    c = collector(FakeNvml(gpus))
    s = sample(c)
    p = f'gpu="0",pid="4242",{A[8:]}'
    assert s[f"alnair_nvml_process_sm_utilization_ratio{{{p}}}"] == 0.9
    assert s[f"alnair_nvml_process_memory_utilization_ratio{{{p}}}"] == 0.4
    assert s[f"alnair_nvml_process_memory_used_bytes{{{p}}}"] == 3 * 2**30
    assert s[f'alnair_nvml_process_sm_utilization_ratio{{gpu="0",pid="77",{A[8:]}}}'] == 0  # held memory, ran nothing
    gpus[0].utilization_samples.append((4242, 300, 10, 0))
    assert sample(c)[f"alnair_nvml_process_sm_utilization_ratio{{{p}}}"] == 0.1  # only samples newer than the last read
    assert sample(c)[f"alnair_nvml_process_sm_utilization_ratio{{{p}}}"] == 0  # none since: idle


def test_gpu_failing_mid_run_drops_only_its_series_and_comes_back():
    gpus = two_gpus()
    gpus[1].processes = {99: 2**30}
    c = collector(FakeNvml(gpus))
    assert f"alnair_nvml_memory_used_bytes{{{B}}}" in sample(c)
    gpus[1].lost = True
    s = sample(c)
    assert s[f"alnair_nvml_up{{{B}}}"] == 0 and s[f"alnair_nvml_up{{{A}}}"] == 1
    assert [k for k in s if B[8:] in k] == [f"alnair_nvml_up{{{B}}}"]
    assert not any('pid="99"' in k for k in s)
    assert s[f"alnair_nvml_temperature_celsius{{{A}}}"] == 40
    gpus[1].lost = False
    s = sample(c)
    assert s[f"alnair_nvml_up{{{B}}}"] == 1 and s[f'alnair_nvml_process_memory_used_bytes{{gpu="1",pid="99",{B[8:]}}}'] == 2**30


def test_mig_instances_are_their_own_devices():
    instance = FakeGpu("MIG-11111111-2222-3333-4444-555555555555", name="NVIDIA H200 MIG 1g.18gb", memory_total=18 * 2**30,
                       processes={500: None}, unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"})
    gpus = two_gpus()
    gpus[1].mig = [None, instance]
    s = sample(collector(FakeNvml(gpus)))
    mig = 'gpu="1",uuid="MIG-11111111-2222-3333-4444-555555555555"'
    assert s[f"alnair_nvml_up{{{mig}}}"] == 1
    assert s[f"alnair_nvml_memory_total_bytes{{{mig}}}"] == 18 * 2**30
    info = [k for k in s if k.startswith("alnair_nvml_gpu_info") and "MIG-" in k]
    assert len(info) == 1 and 'parent_uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"' in info[0]
    assert f"alnair_nvml_sm_utilization_ratio{{{mig}}}" not in s
    assert any('pid="500"' in k for k in s if k.startswith("alnair_nvml_process_info"))
    assert not any('pid="500"' in k for k in s if k.startswith("alnair_nvml_process_memory_used"))  # hidden by NVML


def test_process_info_carries_pod_identity_and_marks_host_processes(tmp_path):
    pod = "6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11"
    container = "0f" * 32
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope\n")
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    gpus = two_gpus()
    gpus[0].processes = {4242: 2**30, 77: 2**20}
    s = sample(collector(FakeNvml(gpus), procfs=str(tmp_path)))
    assert s[f'alnair_nvml_process_info{{container="<unknown>",container_id="containerd://{container}",namespace="<unknown>",'
             f'pid="4242",pod="<unknown>",pod_uid="{pod}"}}'] == 1
    assert s['alnair_nvml_process_info{container="<none>",container_id="",namespace="<none>",pid="77",pod="<none>",pod_uid="<none>"}'] == 1


def test_no_driver_or_no_gpu_makes_the_collector_unavailable():
    with pytest.raises(CollectorUnavailable, match="NVML"):
        collector(FakeNvml(two_gpus(), driver_loaded=False))
    nvml = FakeNvml([])
    with pytest.raises(CollectorUnavailable, match="no GPU"):
        collector(nvml)
    assert nvml.initialised == 0  # shut down again


def test_runner_reports_a_missing_driver_as_unavailable_not_error():
    class NoDriver(NvmlCollector):
        def __init__(self, options):
            super().__init__(options, nvml=FakeNvml([], driver_loaded=False))

    snapshot = CollectorRunner(CollectorSpec.of("nvml", NoDriver), argparse.Namespace(procfs="/proc"), 1.0).sample_once()
    assert (snapshot.state, snapshot.text) == ("unavailable", b"")
    assert "Library Not Found" in snapshot.detail


def test_promtool_check_metrics_is_clean():
    gpus = two_gpus()
    gpus[0].processes = {4242: 2**30}
    gpus[0].utilization_samples = [(4242, 100, 80, 30)]
    gpus[1].mig = [FakeGpu("MIG-11111111-2222-3333-4444-555555555555")]
    text = collector(FakeNvml(gpus)).collect().decode()
    result = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
