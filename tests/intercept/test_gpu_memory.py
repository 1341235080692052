"""Memory as the GPU sees it: what stream-ordered pools hold reserved is counted and charged against the memory
limit (trimmed when it stands in an allocation's way), and a context's own memory is measured, published, and
charged with ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT=on. The fake driver's pools reserve in 2 MiB granules and its
contexts hold FAKE_CUDA_CONTEXT_BYTES each."""

from __future__ import annotations

import pytest

from conftest import published_record
from support import wait_until

MIB = 1 << 20
CONTEXT = 300 * MIB
CUDA_ERROR_OUT_OF_MEMORY = 2


def report(client) -> dict[str, int]:
    """The latest value of each key the client printed."""
    return {k: int(v[0]) for k, *v in (line.split() for line in client.lines)}


def next_step(client) -> None:
    client.proc.stdin.write("\n")
    client.proc.stdin.flush()
    client.read_until_ready()


def published_at(shm_dir, pid: int) -> int | None:
    """When the writer with this pid last published (its header's CLOCK_REALTIME ns), or None."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, reclaim=False)
    return next((p.segment.header.update_time_ns for p in directory.read() if p.segment.holder_pid == pid), None)


def device_memory(shm_dir, pid: int, ready=lambda d, m: True, device: int = 0):
    """(CudaDevice, CudaDeviceMemory) of the device once ready(...) holds for the published pair."""

    def look():
        record = published_record(shm_dir, pid)
        if not record or record.devices_memory is None:
            return None
        pairs = {d.device_index: (d, m) for d, m in zip(record.devices, record.devices_memory)}
        pair = pairs.get(device)
        return pair if pair and ready(*pair) else None

    return wait_until(look)


# ---- pools ------------------------------------------------------------------------------------


def test_pool_reservations_are_counted_beside_exact_allocations(run_client, shm_dir):
    client = run_client("gpa", "pools")
    r = report(client)
    assert (r["allocated"], r["reserved"], r["used"]) == (19 * MIB, 38 * MIB, 19 * MIB)  # the fake's own figures
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: m.pool_reserved_bytes == 38 * MIB)
    assert d.bytes_in_use == 19 * MIB  # each allocation's exact bytes, frees subtracted
    assert m.pool_used_bytes == 19 * MIB
    assert m.charged_bytes == 38 * MIB  # allocations + the pools' cache (reserved - used)
    assert m.context_bytes == 0  # the fake's contexts hold nothing unless told


def test_the_limit_charges_pool_caches_and_trims_them_rather_than_refusing(run_client, shm_dir):
    client = run_client("gpa", "pools", env={"ALNAIR_MEMORY_LIMIT": "64Mi"})
    device_memory(shm_dir, client.proc.pid, lambda d, m: m.pool_reserved_bytes == 38 * MIB)
    next_step(client)  # 1 MiB allocations from the default pool until refused
    r = report(client)
    assert r["refused_result"] == CUDA_ERROR_OUT_OF_MEMORY
    assert r["reserved"] <= 64 * MIB  # the pools never end above the limit ...
    assert r["most_reserved"] <= 64 * MIB + 2 * MIB  # ... nor pass it by more than one growth step between readings
    assert r["custom_after"] < r["custom_before"]  # the other pool's cache was trimmed to make room
    # the memory was used, not refused early: at most one partly used granule per pool is left unusable
    assert 19 * MIB + r["granted"] * MIB >= 64 * MIB - 2 * 2 * MIB
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: d.limit_denied_allocations >= 1)
    assert d.bytes_in_use == (19 + r["granted"]) * MIB and d.failed_allocations == 0
    assert m.charged_bytes <= 64 * MIB

    next_step(client)  # every default-pool allocation freed, the default pool trimmed to nothing
    r = report(client)
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: m.pool_reserved_bytes == r["reserved"])
    assert d.bytes_in_use == 3 * MIB == r["used"]  # frees subtract exactly what their allocations added
    assert m.charged_bytes == r["reserved"]  # the custom pool's one live block and its granule


def test_at_the_limit_an_allocation_the_pools_cache_holds_is_never_refused(run_client, shm_dir):
    """The hardening of GPU sharing, item 3: CuPy's pool under a limit refused 8,000 bytes with 256 MiB free in it."""
    # 8 MiB granules: the two freed MiB share theirs with live blocks, so no trim can release them
    client = run_client(
        "gpa", "pool-refill", env={"ALNAIR_MEMORY_LIMIT": "64Mi", "FAKE_CUDA_POOL_GRANULE": str(8 * MIB)}
    )
    r = report(client)
    assert r["refused_result"] == CUDA_ERROR_OUT_OF_MEMORY and r["granted"] >= 60
    assert (r["again_result"], r["small_result"]) == (0, 0)  # both fit in the two freed MiB the pool holds
    assert r["reserved_after"] == r["reserved_before"]  # served from the cache: nothing trimmed, nothing grown
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: d.allocations == r["granted"] + 2)
    assert d.limit_denied_allocations == 1 and m.charged_bytes <= 64 * MIB


def test_without_a_limit_pools_are_never_trimmed(run_client, shm_dir):
    client = run_client("gpa", "pools")
    next_step(client)
    r = report(client)
    assert r["custom_after"] == r["custom_before"] and r["refused_result"] == 0  # 4096 blocks, all granted
    assert r["granted"] == 4096 - 2


# ---- the context's own memory ---------------------------------------------------------------


def test_each_contexts_own_memory_is_measured_published_and_given_back(run_client, shm_dir):
    client = run_client("gpa", "contexts", env={"FAKE_CUDA_CONTEXT_BYTES": str(CONTEXT)})
    d0, m0 = device_memory(shm_dir, client.proc.pid, lambda d, m: d.kernel_launches == 1, device=0)
    assert m0.context_bytes == CONTEXT  # the primary context, measured by a probe context's cost
    d1, m1 = device_memory(shm_dir, client.proc.pid, lambda d, m: d.kernel_launches == 1, device=1)
    assert m1.context_bytes == 2 * CONTEXT  # two created contexts, each charged once
    assert m0.flags == 0 and m0.charged_bytes == 0  # by default the limit leaves the context out
    assert report(client)["reported_total"] == 16 << 30  # no limit: the device as the driver reports it
    next_step(client)  # one context of device 1 destroyed
    device_memory(shm_dir, client.proc.pid, lambda d, m: m.context_bytes == CONTEXT, device=1)
    assert client.stop() == ""


def granted_under(run_client, switch: str | None):
    env = {"ALNAIR_MEMORY_LIMIT": "1Gi", "FAKE_CUDA_CONTEXT_BYTES": str(CONTEXT)}
    if switch is not None:
        env["ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT"] = switch
    client = run_client("gpa", "limit", "1", env=env)
    return report(client), client


@pytest.mark.parametrize("switch", ["on", "ON", "1", "true", "yes"])
def test_with_the_option_on_the_limit_includes_the_context(run_client, shm_dir, switch):
    r, client = granted_under(run_client, switch)
    assert r["granted"] == (1 << 30) - CONTEXT
    assert r["reported_free"] == (1 << 30) - CONTEXT and r["reported_total"] == 1 << 30
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: d.limit_denied_allocations >= 2)
    assert m.flags == 1 and m.context_bytes == CONTEXT and m.charged_bytes == 1 << 30
    assert client.stop() == ""


@pytest.mark.parametrize("switch", [None, "", "off", "0", "false", "NO"])
def test_by_default_and_with_the_option_off_the_limit_leaves_the_context_out(run_client, shm_dir, switch):
    r, client = granted_under(run_client, switch)
    assert r["granted"] == 1 << 30 and r["reported_free"] == 1 << 30
    d, m = device_memory(shm_dir, client.proc.pid, lambda d, m: d.limit_denied_allocations >= 2)
    assert m.flags == 0 and m.context_bytes == CONTEXT and m.charged_bytes == 1 << 30
    assert client.stop() == ""


@pytest.mark.parametrize(
    "switch, shown", [("maybe", "maybe"), ("on ", "on "), ("2", "2"), ("include", "include"), ("on\n", "on\\x0a")]
)
def test_a_bad_option_value_costs_one_line_and_the_context_stays_out(run_client, switch, shown):
    r, client = granted_under(run_client, switch)
    assert r["granted"] == 1 << 30
    assert client.stop() == (
        f'alnair: ignoring ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT="{shown}": want on, 1, true or yes '
        "(or off, 0, false, no); the memory limit leaves the context out\n"
    )


# ---- what contexts gain after their creation, as NVML shows it ------------------------------

GROWTH = 32 << 20  # e.g. cuBLAS's modules, loaded at its first use


@pytest.mark.parametrize("switch", ["off", "on"])
def test_context_growth_nvml_shows_is_published_and_charged_with_the_option(
    run_client, shm_dir, fake_nvml_dir, fake_driver_dir, switch
):
    env = {
        "LD_LIBRARY_PATH": f"{fake_nvml_dir}:{fake_driver_dir}",
        "FAKE_NVML_CONTEXT_GROWTH_BYTES": str(GROWTH),
        "ALNAIR_MEMORY_LIMIT": "1Gi",
        "ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT": switch,
        "FAKE_CUDA_CONTEXT_BYTES": str(CONTEXT),
    }
    client = run_client("gpa", "limit", "1", env=env)
    granted = report(client)["granted"]  # allocated at once, before a second NVML reading confirmed the growth
    # the probe's figure and what NVML shows beyond the counters (readings taken while the scenario allocated
    # may see less: the figure reaches it in steps that two readings agree on)
    _, m = device_memory(shm_dir, client.proc.pid, lambda d, m: m.context_bytes == CONTEXT + GROWTH)
    assert m.context_growth_bytes == GROWTH  # published apart too
    assert m.charged_bytes == granted + (CONTEXT + GROWTH if switch == "on" else 0)
    assert client.stop() == ""


def test_without_nvml_the_context_is_the_probes_figure(run_client, shm_dir):
    client = run_client(
        "gpa",
        "limit",
        "1",
        env={
            "ALNAIR_MEMORY_LIMIT": "1Gi",
            "FAKE_CUDA_CONTEXT_BYTES": str(CONTEXT),
            "FAKE_NVML_CONTEXT_GROWTH_BYTES": str(GROWTH),
        },
    )
    first = wait_until(lambda: published_at(shm_dir, client.proc.pid))
    # a publish 2.5 s later: the monitor took two held-memory readings (once a second) meanwhile, had NVML been there
    wait_until(lambda: published_at(shm_dir, client.proc.pid) >= first + 2_500_000_000)
    _, m = device_memory(shm_dir, client.proc.pid)
    assert (m.context_bytes, m.context_growth_bytes) == (CONTEXT, 0)
    assert client.stop() == ""
