"""Copies and activity on a real GPU under the CUDA intercept: what issue 16 (c) asks, measured and printed.

    python3 tests/gpu/check_copies.py            (from the repository root on the GPU machine; no install)

It builds the intercept (make -C intercept), runs a PyTorch child under LD_PRELOAD and, between the child's
steps, reads its cuda segment, checking each step's change per direction exactly:
  - `tensor.to("cuda")` of N pageable bytes adds exactly N host-to-device bytes (and nothing else);
  - `.cpu()` of N device bytes adds exactly N device-to-host bytes;
  - a pinned tensor's `.to("cuda", non_blocking=True)` adds exactly N host-to-device bytes;
  - a DataLoader with pin_memory=True (2 workers) runs, and the host-to-device bytes it added equal the bytes
    of the batches moved to the GPU;
and prints the first-allocation and first-launch times (after the process start, before now) and the last
launch's. Results also go to $OUT/copies.json when OUT is set. Exit status 1 if a check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "intercept" / "build" / "libalnair.so"
PERIOD_NS = 10_000_000  # the intercept's default publish period
N = 64 * 2**20 + 12345  # an odd size: a rounded count shows


def import_alnair_from_the_tree() -> None:
    """`alnair.abi` from this checkout without installing it: the package layout pyproject.toml maps."""
    shim = Path(tempfile.mkdtemp(prefix="alnair-shim-")) / "alnair"
    shim.mkdir()
    (shim / "__init__.py").write_text("")
    (shim / "abi").symlink_to(ROOT / "abi")
    sys.path.insert(0, str(shim.parent))


# ---- the child: a PyTorch program taking one step per line on stdin ---------------------------------------


def child() -> None:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.full((3, 64, 64), float(i)), torch.tensor(i)

    def step(name: str) -> None:
        print(f"ready {name}", flush=True)
        sys.stdin.readline()

    step("start")
    torch.cuda.init()
    warm = torch.ones(1, device="cuda") + 1  # context, first allocation, first launch
    torch.cuda.synchronize()
    pageable = torch.empty(N, dtype=torch.uint8).fill_(7)
    pinned = torch.empty(N, dtype=torch.uint8, pin_memory=True).fill_(9)
    step("warm")
    on_gpu = pageable.to("cuda")
    torch.cuda.synchronize()
    step("h2d")
    back = on_gpu.cpu()
    assert back[0].item() == 7
    step("d2h")
    pinned_on_gpu = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    step("pinned")
    moved = batches = 0
    for x, y in DataLoader(Samples(), batch_size=8, num_workers=2, pin_memory=True):
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        moved += x.nbytes + y.nbytes
        batches += 1
    torch.cuda.synchronize()
    print(f"moved {moved} {batches}", flush=True)
    step("dataloader")
    del warm, on_gpu, pinned_on_gpu


# ---- the parent: the checks -----------------------------------------------------------------------------

RESULTS: dict[str, object] = {}


def check(name: str, ok: bool, **numbers) -> None:
    RESULTS[name] = {"ok": ok, **numbers}
    print(f"{'PASS' if ok else 'FAIL'} {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()), flush=True)


class Child:
    def __init__(self, shm: Path):
        env = {**os.environ, "LD_PRELOAD": str(LIBRARY), "ALNAIR_SHM_DIR": str(shm)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.shm = shm
        self.lines: dict[str, str] = {}
        self.read_until("ready start")

    def read_until(self, prefix: str) -> None:
        for line in self.proc.stdout:
            key, _, value = line.strip().partition(" ")
            self.lines[key] = value
            if line.startswith(prefix):
                return
        raise RuntimeError(f"the child ended before {prefix!r}: {self.proc.wait()}")

    def next(self, name: str):
        """Runs the child's next step; returns its record once a publish after the step's end holds it."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.read_until(f"ready {name}")
        return self.settled(time.time_ns())

    def settled(self, done_ns: int):
        from alnair.abi import layout
        from alnair.abi.segments import SegmentDirectory

        directory = SegmentDirectory(str(self.shm), layout.KIND_CUDA, reclaim=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for parsed in directory.read():
                # a publish that ended a period after the step's end began after it: it holds every count
                if (
                    parsed.segment.holder_pid == self.proc.pid
                    and parsed.segment.header.update_time_ns > done_ns + 2 * PERIOD_NS
                ):
                    return parsed
            time.sleep(0.005)
        raise RuntimeError("no publish from the child after its step")

    def finish(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.close()
        self.proc.wait(60)


def totals(parsed) -> list[tuple[int, int, int]]:
    """(copies, bytes, sync_ns) per direction, summed over the process's devices."""
    from alnair.abi import layout

    ext = parsed.record.devices_ext or []
    return [
        tuple(sum(getattr(e.copies[k], f) for e in ext) for f in ("copies", "bytes", "sync_ns"))
        for k in range(layout.COPY_DIRECTIONS)
    ]


def change(before, after) -> dict[str, dict[str, int]]:
    from alnair.abi import layout

    a, b = totals(after), totals(before)
    return {
        name: {"copies": a[k][0] - b[k][0], "bytes": a[k][1] - b[k][1], "sync_ns": a[k][2] - b[k][2]}
        for k, name in enumerate(layout.COPY_DIRECTION_NAMES)
    }


def only(delta: dict[str, dict[str, int]], direction: str, nbytes: int) -> bool:
    """Exactly nbytes in `direction`, nothing in the others."""
    return delta[direction]["bytes"] == nbytes and all(
        d["bytes"] == 0 and d["copies"] == 0 for name, d in delta.items() if name != direction
    )


def main() -> int:
    subprocess.run(["make", "-s", "-C", str(ROOT / "intercept")], check=True)
    import_alnair_from_the_tree()
    shm = Path(tempfile.mkdtemp(prefix="alnair-shm-"))
    kid = Child(shm)
    try:
        warm = kid.next("warm")
        h2d = kid.next("h2d")
        delta = change(warm, h2d)
        check("c_to_cuda_adds_exactly_n_host_to_device_bytes", only(delta, "host_to_device", N), n=N, change=delta)
        d2h = kid.next("d2h")
        delta = change(h2d, d2h)
        check("c_cpu_adds_exactly_n_device_to_host_bytes", only(delta, "device_to_host", N), n=N, change=delta)
        pinned = kid.next("pinned")
        delta = change(d2h, pinned)
        check(
            "c_pinned_non_blocking_adds_exactly_n_host_to_device_bytes",
            only(delta, "host_to_device", N),
            n=N,
            change=delta,
        )
        loaded = kid.next("dataloader")
        moved, batches = map(int, kid.lines["moved"].split())
        delta = change(pinned, loaded)
        check(
            "c_dataloader_pin_memory_copies_counted",
            batches == 8 and only(delta, "host_to_device", moved),
            batches=batches,
            moved_bytes=moved,
            change=delta,
        )
        activity(loaded)
    finally:
        kid.finish()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "copies.json").write_text(json.dumps(RESULTS, indent=2))
    return 0 if all(r["ok"] for r in RESULTS.values()) else 1


def activity(parsed) -> None:
    """First allocation and first launch after the process start and before now; the last launch recent."""
    a = parsed.record.activity
    start_ns = parsed.segment.header.start_time_ticks * 10**9 // os.sysconf("SC_CLK_TCK")
    age_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - start_ns  # the clock the intercept reckons from
    ok = 0 < a.first_allocation_ns <= age_ns and 0 < a.first_launch_ns <= age_ns
    ok = ok and 0 < time.time_ns() - a.last_launch_time_ns < 60 * 10**9
    check(
        "activity_times",
        ok,
        first_allocation_s=a.first_allocation_ns / 1e9,
        first_launch_s=a.first_launch_ns / 1e9,
        process_age_s=age_ns / 1e9,
        last_launch_ago_s=(time.time_ns() - a.last_launch_time_ns) / 1e9,
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        child()
    else:
        sys.exit(main())
