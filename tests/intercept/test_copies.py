"""Copies per device and direction, from every cuMemcpy* entry point, published by the monitor thread.

The client's `copies` scenario calls each entry point with ends of each kind (host, an allocation, an interior
pointer, a peer device, a CUDA array, a mapped virtual memory range, memory the process did not allocate, freed
memory) and prints what each call should count as: `copy NAME DEVICE DIRECTION BYTES SYNC`, written by hand
in the client, not computed."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from alnair.abi import layout
from conftest import published_record
from support import wait_until

DIRECTIONS = {"h2d": layout.COPY_HOST_TO_DEVICE, "d2h": layout.COPY_DEVICE_TO_HOST, "d2d": layout.COPY_DEVICE_TO_DEVICE}
CUDA_DRIVER = Path(__file__).resolve().parents[2] / "intercept" / "cuda_driver.h"


def copy_table_names() -> set[str]:
    """The entry points of the intercept's copy table (ALNAIR_COPY_HOOKS), as the preprocessor expands it."""
    source = '#include "cuda_driver.h"\n#define ROW(X, name, family, kind) COPY name\nALNAIR_COPY_HOOKS(ROW, X)\n'
    out = subprocess.run(
        ["gcc", "-E", "-P", f"-I{CUDA_DRIVER.parent}", "-"], input=source, capture_output=True, text=True, check=True
    ).stdout
    return set(re.findall(r"COPY (\w+)", out))


def expected(client) -> tuple[Counter, Counter, Counter]:
    """(device, direction) -> copies, bytes and synchronous copies, from the client's own account."""
    copies, nbytes, synchronous = Counter(), Counter(), Counter()
    for _name, device, direction, size, sync in client.values("copy"):
        if direction != "none":
            key = (int(device), DIRECTIONS[direction])
            copies[key] += 1
            nbytes[key] += int(size)
            synchronous[key] += int(sync)
    return copies, nbytes, synchronous


def counted(record) -> tuple[Counter, Counter, Counter]:
    copies, nbytes, sync_ns = Counter(), Counter(), Counter()
    for device, ext in zip(record.devices, record.devices_ext):
        for direction, c in enumerate(ext.copies):
            if c.copies or c.bytes or c.sync_ns:
                key = (device.device_index, direction)
                copies[key], nbytes[key], sync_ns[key] = c.copies, c.bytes, c.sync_ns
    return copies, nbytes, sync_ns


def settled(shm_dir, client, want_copies: Counter):
    """The published record once it holds the client's copies (the monitor publishes every 10 ms)."""
    return wait_until(
        lambda: (
            (r := published_record(shm_dir, client.proc.pid))
            and r.devices_ext is not None
            and counted(r)[0] == want_copies
            and r
        )
    )


@pytest.mark.parametrize("lookup", ["gpa", "dlsym", "direct"])
def test_every_copy_entry_point_is_counted_with_its_device_direction_and_bytes(run_client, shm_dir, lookup):
    client = run_client(lookup, "copies")
    wrapped = dict(client.values("wrapped"))
    assert set(wrapped) == copy_table_names() and len(wrapped) == 56 and set(wrapped.values()) == {"yes"}, wrapped
    called = {name for name, *_ in client.values("copy")}
    assert called == set(wrapped)  # every entry point is exercised, and described
    reached = {name: int(n) for name, n in client.values("driver")}
    assert set(reached) == set(wrapped) and min(reached.values()) >= 1
    want_copies, want_bytes, _ = expected(client)
    record = settled(shm_dir, client, want_copies)
    copies, nbytes, _ = counted(record)
    assert nbytes == want_bytes
    assert len(copies) == 12  # every direction on each of the 4 devices (the array's device 3 among them)
    # a peer copy from device 1's allocation to device 2's counts once, where it lands
    assert [line[1:3] for line in client.values("copy") if line[0] == "cuMemcpyPeer"] == [["2", "d2d"]]
    assert all(int(code) != 0 for _, code in client.values("refused"))  # refused copies reached the driver...
    assert sum(copies.values()) == sum(1 for c in client.values("copy") if c[2] != "none")  # ...and none counted


def test_synchronous_copies_are_timed_and_asynchronous_ones_are_not(run_client, shm_dir):
    copy_ns = 20_000_000  # every copy call takes 20 ms in the fake driver, asynchronous ones too
    client = run_client("gpa", "copies", env={"FAKE_CUDA_COPY_NS": str(copy_ns)})
    want_copies, _, synchronous = expected(client)
    record = settled(shm_dir, client, want_copies)
    _, _, sync_ns = counted(record)
    for key in want_copies:
        assert sync_ns[key] >= synchronous[key] * copy_ns, key
    asynchronous = sum(want_copies.values()) - sum(synchronous.values())
    assert (sum(synchronous.values()), asynchronous) == (30, 30)
    # timing the 30 asynchronous calls too would add 600 ms; oversleeping on a loaded machine, far less
    assert sum(sync_ns.values()) < 30 * copy_ns + 300_000_000


def test_pass_through_counts_no_copies(run_client, shm_dir):
    client = run_client("dlsym", "copies", env={"ALNAIR_INTERCEPT": "off"})
    assert set(dict(client.values("wrapped")).values()) == {"no"}
    assert min(int(n) for _, n in client.values("driver")) >= 1
    assert published_record(shm_dir, client.proc.pid) is None
