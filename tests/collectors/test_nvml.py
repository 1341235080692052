"""The nvml collector against a pynvml test double: per-GPU, per-process, MIG, failing GPUs, no driver, XID errors,
GPM."""

from __future__ import annotations

import argparse
import logging
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pynvml
import pytest

import alnair.collectors.nvml as nvml_module
import alnair.collectors.nvml_gpm as gpm_module
from alnair.collectors.nvml import NvmlCollector
from alnair.exporter.plugin import CollectorUnavailable
from alnair.exporter.registry import CollectorSpec
from alnair.exporter.sampler import CollectorRunner
from fake_pynvml import GPM_IDS, FakeGpu, FakeNvml
from support import parse_samples, require_binary, wait_until

A = 'gpu="0",uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"'
B = 'gpu="1",uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000"'
WATCH_UP, ERRORS, BY_CODE = (
    "alnair_nvml_xid_watch_up",
    "alnair_nvml_xid_errors_total",
    "alnair_nvml_xid_errors_by_code_total",
)
RETRY_SECONDS = (0.05, 0.1)
MADE: list[NvmlCollector] = []  # closed after each test: their XID watchers are threads


@pytest.fixture(autouse=True)
def quick_xid_watch(monkeypatch):
    """XID waits and back-offs in milliseconds, so a watcher stops and retries quickly; every collector is closed."""
    monkeypatch.setattr(nvml_module, "XID_WAIT_MS", 20)
    monkeypatch.setattr(nvml_module, "XID_RETRY_SECONDS", RETRY_SECONDS)
    yield
    while MADE:
        made = MADE.pop()
        made.nvml.hang_waits(False)  # a test that failed while waits hung
        made.close()


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu("GPU-aaaaaaaa-0000-0000-0000-000000000000"), FakeGpu("GPU-bbbbbbbb-0000-0000-0000-000000000000")]


def collector(nvml: FakeNvml, procfs: str = "/proc") -> NvmlCollector:
    MADE.append(NvmlCollector(argparse.Namespace(procfs=procfs), nvml=nvml))
    return MADE[-1]


def sample(c: NvmlCollector) -> dict[str, float]:
    return parse_samples(c.collect().decode())


def sample_when(c: NvmlCollector, condition) -> dict[str, float]:
    """The first sample that meets `condition`: the XID watcher works on its own thread."""
    return wait_until(lambda: s if condition(s := sample(c)) else None)


def watched(*gpus: str):
    return lambda s: all(s.get(f"{WATCH_UP}{{{gpu}}}") == 1 for gpu in gpus)


def logged(caplog, level: int, text: str = "") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def test_per_gpu_metrics_are_in_base_units():
    gpus = two_gpus()
    gpus[0].__dict__.update(
        memory_used=2 * 2**30,
        utilization=(97, 41),
        temperature=61,
        power_mw=612_345,
        energy_mj=9_000_500,
        clocks_mhz=(1755, 2619),
        pcie_kb_per_s=(100, 2000),
        throttle=0x4 | 0x20,
        ecc=(3, 1),
        retired_pages=(2, 0),
        remapped_rows=(5, 1, 1, 0),
    )
    s = sample(collector(FakeNvml(gpus, driver_version="560.35.03")))
    assert (
        s[f'alnair_nvml_gpu_info{{driver_version="560.35.03",{A[:8]}name="NVIDIA H200",parent_uuid="",{A[8:]}}}'] == 1
    )
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
    # XIDs: the watcher's
    assert [k for k in s if B[8:] in k and not k.startswith("alnair_nvml_xid_")] == [f"alnair_nvml_up{{{B}}}"]
    assert not any('pid="99"' in k for k in s)
    assert s[f"alnair_nvml_temperature_celsius{{{A}}}"] == 40
    gpus[1].lost = False
    s = sample(c)
    assert (
        s[f"alnair_nvml_up{{{B}}}"] == 1
        and s[f'alnair_nvml_process_memory_used_bytes{{gpu="1",pid="99",{B[8:]}}}'] == 2**30
    )


def test_mig_instances_are_their_own_devices():
    instance = FakeGpu(
        "MIG-11111111-2222-3333-4444-555555555555",
        name="NVIDIA H200 MIG 1g.18gb",
        memory_total=18 * 2**30,
        processes={500: None},
        unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"},
    )
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
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope\n"
    )
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")
    gpus = two_gpus()
    gpus[0].processes = {4242: 2**30, 77: 2**20}
    s = sample(collector(FakeNvml(gpus), procfs=str(tmp_path)))
    assert (
        s[
            f'alnair_nvml_process_info{{container="<unknown>",container_id="containerd://{container}",namespace="<unknown>",'
            f'pid="4242",pod="<unknown>",pod_uid="{pod}"}}'
        ]
        == 1
    )
    assert (
        s[
            'alnair_nvml_process_info{container="<none>",container_id="",namespace="<none>",pid="77",pod="<none>",pod_uid="<none>"}'
        ]
        == 1
    )


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

    snapshot = CollectorRunner(
        CollectorSpec.of("nvml", NoDriver), argparse.Namespace(procfs="/proc"), 1.0
    ).sample_once()
    assert (snapshot.state, snapshot.text) == ("unavailable", b"")
    assert "Library Not Found" in snapshot.detail


def test_promtool_check_metrics_is_clean():
    gpus = two_gpus()
    gpus[0].processes = {4242: 2**30}
    gpus[0].utilization_samples = [(4242, 100, 80, 30)]
    gpus[1].mig = [FakeGpu("MIG-11111111-2222-3333-4444-555555555555")]
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    sample_when(c, watched(A, B))
    nvml.inject_xid(gpus[1], 79)
    sample_when(c, lambda s: s.get(f"{ERRORS}{{{B}}}") == 1)
    text = c.collect().decode()
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_xid_counters_exist_at_zero_once_registered():
    c = collector(FakeNvml(two_gpus()))
    s = sample_when(c, watched(A, B))
    assert s[f"{ERRORS}{{{A}}}"] == 0 and s[f"{ERRORS}{{{B}}}"] == 0
    assert not any(k.startswith(BY_CODE) for k in s)  # a series per code seen


def test_an_xid_increments_both_counters_of_its_gpu_exactly():
    gpus = two_gpus()
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    sample_when(c, watched(A, B))
    nvml.inject_xid(gpus[1], 79)
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{B}}}") == 1)
    assert s[f'{BY_CODE}{{{B},xid="79"}}'] == 1
    assert s[f"{ERRORS}{{{A}}}"] == 0 and not any(k.startswith(BY_CODE) and A in k for k in s)
    nvml.inject_xid(gpus[1], 79)
    nvml.inject_xid(gpus[1], 48)
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{B}}}") == 3)
    assert (s[f'{BY_CODE}{{{B},xid="79"}}'], s[f'{BY_CODE}{{{B},xid="48"}}']) == (2, 1)
    assert s[f"{ERRORS}{{{A}}}"] == 0


def test_xid_codes_past_32_per_gpu_are_counted_as_other():
    gpus = two_gpus()
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    sample_when(c, watched(A, B))
    for code in range(1, 41):
        nvml.inject_xid(gpus[0], code)
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 40)
    by_code = {k: v for k, v in s.items() if k.startswith(BY_CODE)}
    assert by_code == {
        **{f'{BY_CODE}{{{A},xid="{code}"}}': 1 for code in range(1, 33)},
        f'{BY_CODE}{{{A},xid="other"}}': 8,
    }
    nvml.inject_xid(gpus[0], 5)  # a code already counted keeps its series
    nvml.inject_xid(gpus[0], 99)
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 42)
    assert (s[f'{BY_CODE}{{{A},xid="5"}}'], s[f'{BY_CODE}{{{A},xid="other"}}']) == (2, 9)


@pytest.mark.parametrize(
    "refusal",
    [
        {"supported_events": 0},
        {"unsupported": {"nvmlDeviceRegisterEvents"}},
        {"register_error": pynvml.NVML_ERROR_NO_PERMISSION},
    ],
    ids=["not-among-supported-events", "register-not-supported", "not-root"],
)
def test_a_gpu_nvml_will_not_watch_has_watch_up_0_said_once(refusal, caplog):
    gpus = two_gpus()
    gpus[1].__dict__.update(refusal)
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    wait_until(lambda: nvml.waiting == 1)  # registration is over: the watcher waits on GPU 0 alone
    nvml.inject_xid(gpus[0], 31)
    for _ in range(3):
        s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 1)
    assert s[f"{WATCH_UP}{{{B}}}"] == 0 and s[f"{WATCH_UP}{{{A}}}"] == 1
    assert f"{ERRORS}{{{B}}}" not in s and s[f"alnair_nvml_up{{{B}}}"] == 1
    assert len(logged(caplog, logging.WARNING, "GPU 1 (GPU-bbbbbbbb")) == 1


def test_a_hung_wait_never_delays_a_sample():
    gpus = two_gpus()
    nvml = FakeNvml(gpus)
    nvml.hang_waits(True)
    c = collector(nvml)
    wait_until(lambda: nvml.waiting == 1)
    nvml.inject_xid(gpus[1], 79)  # queued behind the hung wait
    with ThreadPoolExecutor(1) as pool:
        s = pool.submit(sample, c).result(timeout=10)  # a collect() that blocked would raise TimeoutError here
    assert nvml.waiting == 1  # the watcher is still inside NVML
    assert s[f"{WATCH_UP}{{{A}}}"] == s[f"{WATCH_UP}{{{B}}}"] == 1 and s[f"{ERRORS}{{{B}}}"] == 0
    assert s[f"alnair_nvml_up{{{A}}}"] == 1 and s[f"alnair_nvml_memory_total_bytes{{{B}}}"] == 150_000 * 2**20
    nvml.hang_waits(False)
    assert sample_when(c, lambda s: s.get(f"{ERRORS}{{{B}}}") == 1)[f'{BY_CODE}{{{B},xid="79"}}'] == 1


def test_nvml_errors_in_wait_are_survived_with_back_off_and_said_once(caplog):
    caplog.set_level(logging.INFO, logger=nvml_module.__name__)
    gpus = two_gpus()
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    sample_when(c, watched(A, B))
    nvml.inject_xid(gpus[0], 64)
    sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 1)
    nvml.wait_errors = [pynvml.NVML_ERROR_UNKNOWN] * 3
    s = sample_when(c, lambda s: len(nvml.event_sets) == 4 and watched(A, B)(s))
    assert s[f"{ERRORS}{{{A}}}"] == 1 and s[f"{ERRORS}{{{B}}}"] == 0  # counts outlive the event sets
    assert [e.freed for e in nvml.event_sets] == [True, True, True, False]
    gaps = [later.created_at - earlier.created_at for earlier, later in zip(nvml.event_sets, nvml.event_sets[1:])]
    assert all(gap >= pause for gap, pause in zip(gaps, [*RETRY_SECONDS, RETRY_SECONDS[-1]]))  # backing off, never busy
    # once a new set's wait worked
    assert wait_until(lambda: logged(caplog, logging.INFO)) == ["watching XID errors again"]
    assert len(logged(caplog, logging.WARNING, "Unknown Error")) == 1
    nvml.inject_xid(gpus[0], 64)
    assert sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 2)[f'{BY_CODE}{{{A},xid="64"}}'] == 2


def test_a_lost_gpu_is_not_watched_until_it_returns_and_the_others_go_on():
    gpus = two_gpus()
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    sample_when(c, watched(A, B))
    gpus[1].lost = True  # waits fail with GPU_IS_LOST; the set is built again without it
    s = sample_when(c, lambda s: s.get(f"{WATCH_UP}{{{B}}}") == 0 and watched(A)(s))
    assert s[f"{ERRORS}{{{B}}}"] == 0 and s[f"alnair_nvml_up{{{B}}}"] == 0
    nvml.inject_xid(gpus[0], 79)
    sample_when(c, lambda s: s.get(f"{ERRORS}{{{A}}}") == 1)
    gpus[1].lost = False
    sample_when(c, watched(A, B))
    nvml.inject_xid(gpus[1], 79)
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{B}}}") == 1)
    assert s[f"{ERRORS}{{{A}}}"] == 1


def test_an_event_naming_a_gpu_not_registered_is_counted_under_its_index_and_uuid():
    gpus = [*two_gpus(), FakeGpu("GPU-cccccccc-0000-0000-0000-000000000000", unsupported={"nvmlDeviceGetName"})]
    nvml = FakeNvml(gpus)
    c = collector(nvml)  # GPU 2 cannot be opened: the collector does not know it
    sample_when(c, watched(A, B))
    nvml.inject_xid(gpus[1], 94, device=gpus[2])
    C = 'gpu="2",uuid="GPU-cccccccc-0000-0000-0000-000000000000"'
    s = sample_when(c, lambda s: s.get(f"{ERRORS}{{{C}}}") == 1)
    assert s[f'{BY_CODE}{{{C},xid="94"}}'] == 1 and s[f"{ERRORS}{{{B}}}"] == 0


def test_close_stops_the_watcher_then_shuts_nvml_down():
    nvml = FakeNvml(two_gpus())
    c = collector(nvml)
    MADE.remove(c)
    wait_until(lambda: nvml.waiting == 1)
    c.close()
    assert nvml.waiting == 0 and all(e.freed for e in nvml.event_sets) and nvml.initialised == 0


def test_close_leaves_nvml_initialised_while_a_wait_hangs(monkeypatch, caplog):
    monkeypatch.setattr(nvml_module, "XID_STOP_SECONDS", 0.1)
    nvml = FakeNvml(two_gpus())
    nvml.hang_waits(True)
    c = collector(nvml)
    MADE.remove(c)
    wait_until(lambda: nvml.waiting == 1)
    c.close()
    assert nvml.initialised == 1 and len(logged(caplog, logging.WARNING, "still inside NVML")) == 1
    nvml.hang_waits(False)
    wait_until(lambda: nvml.waiting == 0 and all(e.freed for e in nvml.event_sets))  # it ends once NVML returns


# GPM: what each GPU runs at (percent, MiB/s) and the series it must give, as ratios and bytes/s.
MIB = 2**20
GPM_RATES = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 97.5,
    pynvml.NVML_GPM_METRIC_SM_UTIL: 94.7,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 14.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 91.9,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.5,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: 12.25,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: 3.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 17.3,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1200.0,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 56343.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 250_000.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 125_000.5,
}


def gpm_expected(device: str, rates: dict[int, float]) -> dict[str, float]:
    """The GPM samples `device` ('gpu="0",uuid="..."') must have at `rates`."""
    gpu, uuid = device.split(",")
    ids = GPM_IDS
    ratios = {
        f"alnair_nvml_graphics_engine_active_ratio{{{device}}}": "GRAPHICS_UTIL",
        f"alnair_nvml_sm_active_ratio{{{device}}}": "SM_UTIL",
        f"alnair_nvml_sm_occupancy_ratio{{{device}}}": "SM_OCCUPANCY",
        f'alnair_nvml_pipe_active_ratio{{{gpu},pipe="tensor",{uuid}}}': "ANY_TENSOR_UTIL",
        f'alnair_nvml_pipe_active_ratio{{{gpu},pipe="fp64",{uuid}}}': "FP64_UTIL",
        f'alnair_nvml_pipe_active_ratio{{{gpu},pipe="fp32",{uuid}}}': "FP32_UTIL",
        f'alnair_nvml_pipe_active_ratio{{{gpu},pipe="fp16",{uuid}}}': "FP16_UTIL",
        f"alnair_nvml_dram_active_ratio{{{device}}}": "DRAM_BW_UTIL",
    }
    links = {
        f'alnair_nvml_link_bytes_per_second{{direction="{direction}",{gpu},link="{link}",{uuid}}}': metric
        for direction, link, metric in (
            ("transmit", "pcie", "PCIE_TX_PER_SEC"),
            ("receive", "pcie", "PCIE_RX_PER_SEC"),
            ("transmit", "nvlink", "NVLINK_TOTAL_TX_PER_SEC"),
            ("receive", "nvlink", "NVLINK_TOTAL_RX_PER_SEC"),
        )
    }
    return {
        **{key: rates[ids[m]] / 100 for key, m in ratios.items() if ids[m] in rates},
        **{key: rates[ids[m]] * MIB for key, m in links.items() if ids[m] in rates},
    }


def gpm_of(s: dict[str, float], device: str = "") -> dict[str, float]:
    """The GPM samples of `s`, of one device if given."""
    return {k: v for k, v in s.items() if k.startswith(tuple(gpm_module.FAMILIES)) and device.split(",")[-1] in k}


def test_gpm_families_are_the_rates_each_gpu_ran_at_over_the_interval():
    gpus = two_gpus()
    gpus[0].gpm_rates = dict(GPM_RATES)
    # a PCIe card
    gpus[1].gpm_rates = {
        m: rate / 2
        for m, rate in GPM_RATES.items()
        if m not in (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC)
    }
    c = collector(FakeNvml(gpus))
    assert gpm_of(sample(c)) == {}  # the first collect has no previous sample to measure from
    s = sample(c)
    assert gpm_of(s, A) == pytest.approx(gpm_expected(A, GPM_RATES)) and len(gpm_of(s, A)) == 12
    assert gpm_of(s, B) == pytest.approx(gpm_expected(B, gpus[1].gpm_rates)) and len(gpm_of(s, B)) == 10
    assert s[f'alnair_nvml_link_bytes_per_second{{direction="receive",gpu="0",link="pcie",{A[8:]}}}'] == pytest.approx(
        56343 * MIB
    )
    assert s[f"alnair_nvml_sm_active_ratio{{{A}}}"] == pytest.approx(0.947)
    gpus[0].gpm_rates[pynvml.NVML_GPM_METRIC_SM_UTIL] = 20.0  # from the last collect on
    assert sample(c)[f"alnair_nvml_sm_active_ratio{{{A}}}"] == pytest.approx(0.2)  # this interval's, not a running mean


def test_first_collect_has_no_gpm_series_but_their_families():
    text = collector(FakeNvml(two_gpus())).collect().decode()
    assert gpm_of(parse_samples(text)) == {}
    assert all(f"# TYPE {family} gauge" in text for family in gpm_module.FAMILIES)


@pytest.mark.parametrize(
    "refusal",
    [{"gpm_supported": False}, {"unsupported": {"nvmlGpmQueryDeviceSupport"}}, {"unsupported": {"nvmlGpmSampleGet"}}],
    ids=["before-hopper", "query-not-supported", "sample-not-supported"],
)
def test_a_gpu_without_gpm_lacks_its_series_said_once(refusal, caplog):
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)
    gpus = two_gpus()
    gpus[1].__dict__.update(refusal)
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    for _ in range(3):
        s = sample(c)
    assert gpm_of(s, B) == {} and s[f"alnair_nvml_up{{{B}}}"] == 1 and f"alnair_nvml_power_watts{{{B}}}" in s
    assert gpm_of(s, A) == pytest.approx(gpm_expected(A, dict.fromkeys(GPM_RATES, 0.0)))
    assert len(logged(caplog, logging.INFO, "GPU 1 (GPU-bbbbbbbb")) == 1 and not logged(caplog, logging.INFO, "GPU 0")
    gpus[1].__dict__.update(gpm_supported=True, unsupported=set())  # decided once: not asked again
    assert gpm_of(sample(c), B) == {}
    assert all(sample.freed for sample in nvml.gpm_samples.values() if sample.gpu is None)  # its buffers, if any


def test_a_driver_before_gpm_leaves_every_gpu_without_it_said_once_each(caplog):
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)
    nvml = FakeNvml(two_gpus(), missing={"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet"})
    c = collector(nvml)
    for _ in range(3):
        s = sample(c)
    assert gpm_of(s) == {} and s[f"alnair_nvml_up{{{A}}}"] == s[f"alnair_nvml_up{{{B}}}"] == 1
    assert [len(logged(caplog, logging.INFO, f"GPU {i} (GPU-")) for i in (0, 1)] == [1, 1]
    assert "Function Not Found" in logged(caplog, logging.INFO)[0] and nvml.gpm_samples == {}


def test_mig_instances_have_their_own_gpm_where_the_gpu_measures_them(caplog):
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)
    gpus = two_gpus()
    small, large = (
        FakeGpu("MIG-11111111-0000-0000-0000-000000000000", gpu_instance_id=9),
        FakeGpu("MIG-22222222-0000-0000-0000-000000000000", gpu_instance_id=1),
    )
    small.gpm_rates = {pynvml.NVML_GPM_METRIC_SM_UTIL: 40.0, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 35.0}
    large.gpm_rates = {pynvml.NVML_GPM_METRIC_SM_UTIL: 80.0, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3000.0}
    gpus[1].mig = [small, None, large]
    gpus[0].mig = [FakeGpu("MIG-33333333-0000-0000-0000-000000000000", gpu_instance_id=1)]
    gpus[0].unsupported = {"nvmlGpmMigSampleGet"}  # GPM on the GPU, not on its instances
    c = collector(FakeNvml(gpus))
    sample(c)
    s = sample(c)
    small_labels, large_labels = (f'gpu="1",uuid="{g.uuid}"' for g in (small, large))
    assert gpm_of(s, small_labels) == pytest.approx(gpm_expected(small_labels, small.gpm_rates))
    assert gpm_of(s, large_labels) == pytest.approx(gpm_expected(large_labels, large.gpm_rates))
    assert len(gpm_of(s, B)) == 12 and len(gpm_of(s, A)) == 12  # the GPUs themselves
    assert gpm_of(s, 'gpu="0",uuid="MIG-33333333-0000-0000-0000-000000000000"') == {}
    assert logged(caplog, logging.INFO) == [
        "GPU 0 (MIG-33333333-0000-0000-0000-000000000000): no GPM metrics (SM active, occupancy, pipes, DRAM, link "
        "bytes): Not Supported"
    ]


def test_mig_instances_of_a_gpu_without_gpm_are_not_asked(caplog):
    caplog.set_level(logging.INFO, logger=gpm_module.__name__)
    gpus = two_gpus()
    gpus[1].__dict__.update(gpm_supported=False, mig=[FakeGpu("MIG-11111111-0000-0000-0000-000000000000")])
    c = collector(FakeNvml(gpus))
    for _ in range(2):
        s = sample(c)
    assert gpm_of(s, 'gpu="1",uuid="MIG-11111111-0000-0000-0000-000000000000"') == {} and gpm_of(s, B) == {}
    assert len(logged(caplog, logging.INFO)) == 1 and "GPU 1 (GPU-bbbbbbbb" in logged(caplog, logging.INFO)[0]


def test_gpm_samples_are_allocated_once_per_device_and_freed():
    gpus = two_gpus()
    gpus[1].mig = [FakeGpu("MIG-11111111-0000-0000-0000-000000000000", gpu_instance_id=3)]
    nvml = FakeNvml(gpus)
    c = collector(nvml)
    MADE.remove(c)
    for _ in range(4):
        sample(c)
    assert len(nvml.gpm_samples) == 6 and not any(s.freed for s in nvml.gpm_samples.values())  # two per device, reused
    gpus[1].mig = [None]  # the instance is gone: its samples go with it
    sample(c)
    assert [s.freed for s in nvml.gpm_samples.values()] == [False] * 4 + [True] * 2
    c.close()
    assert all(s.freed for s in nvml.gpm_samples.values()) and nvml.initialised == 0


def test_an_nvml_error_on_one_gpm_sample_leaves_out_only_that_gpus_gpm_series():
    gpus = two_gpus()
    gpus[0].gpm_rates = dict(GPM_RATES)
    c = collector(FakeNvml(gpus))
    sample(c)
    gpus[0].gpm_errors = [pynvml.NVML_ERROR_UNKNOWN]
    s = sample(c)
    assert gpm_of(s, A) == {} and len(gpm_of(s, B)) == 12
    assert s[f"alnair_nvml_up{{{A}}}"] == 1 and s[f"alnair_nvml_temperature_celsius{{{A}}}"] == 40
    assert gpm_of(sample(c), A) == {}  # the interval starts again at this sample
    assert gpm_of(sample(c), A) == pytest.approx(gpm_expected(A, GPM_RATES))


def test_a_lost_gpu_measures_a_new_interval_when_it_returns():
    gpus = two_gpus()
    c = collector(FakeNvml(gpus))
    sample(c)
    gpus[1].lost = True
    assert gpm_of(sample(c), B) == {}
    gpus[1].lost = False
    assert gpm_of(sample(c), B) == {}  # not an average over the time it was lost
    assert len(gpm_of(sample(c), B)) == 12


def test_the_double_checks_gpm_requests_as_nvml_does():
    gpu = FakeGpu("GPU-aaaaaaaa-0000-0000-0000-000000000000")
    nvml = FakeNvml([gpu])
    older, newer = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(gpu, older)
    nvml.nvmlGpmSampleGet(gpu, newer)
    request = pynvml.c_nvmlGpmMetricsGet_t(numMetrics=1, sample1=older, sample2=newer)
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        nvml.nvmlGpmMetricsGet(request)
    request.version, request.sample1, request.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, newer, older
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # older first
        nvml.nvmlGpmMetricsGet(request)
    nvml.nvmlGpmSampleFree(older)
    with pytest.raises(AssertionError, match="freed"):
        nvml.nvmlGpmSampleGet(gpu, older)
