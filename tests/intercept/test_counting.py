"""Exact launch and memory counts, published by the intercept's monitor thread."""

from __future__ import annotations

from conftest import published
from support import wait_until


def test_exact_launch_counts_from_16_threads_on_4_devices(run_client, shm_dir):
    client = run_client("gpa", "launches", "16", "25000", "4")
    expected = {int(d): int(n) for d, n in client.values("launches")}
    assert expected == {0: 100000, 1: 100000, 2: 100000, 3: 100000}
    devices = wait_until(
        lambda: (
            (p := published(shm_dir, client.proc.pid))
            and {i: d.kernel_launches for i, d in p.items()} == expected
            and p
        )
    )
    assert all(d.graph_launches == 0 and d.bytes_in_use == 0 for d in devices.values())
    assert bytes(devices[2].uuid)[15] == 2  # the fake driver's UUID for device 2


def test_exact_bytes_in_use_after_interleaved_alloc_and_free_on_three_devices(run_client, shm_dir):
    client = run_client("dlsym", "memory", "3000")
    expected = {int(d): int(b) for d, b in client.values("bytes")}
    assert all(expected.values())
    wait_until(lambda: {i: d.bytes_in_use for i, d in published(shm_dir, client.proc.pid).items()} == expected)
    devices = published(shm_dir, client.proc.pid)
    for d in devices.values():
        assert d.peak_bytes >= d.bytes_in_use and d.failed_allocations == 0
        assert d.allocations > 400


def test_every_entry_point_is_wrapped_counted_and_reaches_the_driver(run_client, shm_dir):
    for lookup in ("gpa", "dlsym", "direct"):
        client = run_client(lookup, "every-entry")
        wrapped = dict(client.values("wrapped"))
        assert len(wrapped) == 46 and set(wrapped.values()) == {"yes"}, (lookup, wrapped)
        reached = {name: int(n) for name, n in client.values("driver")}
        assert len(reached) == 46 and min(reached.values()) >= 1, (lookup, reached)
        in_use = int(client.values("bytes")[0][1])
        # the monitor publishes every 10 ms: wait for the publish after the last free
        devices = wait_until(
            lambda pid=client.proc.pid, in_use=in_use: (
                (p := published(shm_dir, pid)) and 1 in p and p[0].bytes_in_use == in_use and p
            )
        )
        assert devices[0].kernel_launches == 7  # 6 single-device launch paths + the multi-device one
        assert devices[1].kernel_launches == 1  # its second device
        assert devices[0].graph_launches == 2
        assert devices[0].allocations == 11
        client.stop()
