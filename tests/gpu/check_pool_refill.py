"""At the memory limit, an allocation that fits in memory its pool already holds is never refused: PyTorch's
cudaMallocAsync backend and CuPy's MemoryAsyncPool, each under a 4 GiB limit, on a real GPU.

    python3 tests/gpu/check_pool_refill.py      (from the repository root, on the GPU machine; no install)

Each child allocates 256 MiB blocks until the limit refuses one (the framework's out-of-memory error), frees two
blocks in the middle (the pool keeps them, in chunks shared with live blocks), then asks for 256 MiB again and for
8,000 bytes. Both must be granted, and the published count of refusals (limit_denied_allocations) must not grow.
Before the fix CuPy's case refused the 8,000 bytes with 256 MiB free in its pool (denials 3 -> 6).
Results also go to $OUT/pool_refill.json when OUT is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_memory_pools import ROOT, shim  # noqa: E402

BLOCK = 256 << 20
TORCH = r"""
import torch
def block(n): return torch.empty(n, dtype=torch.uint8, device="cuda")
OOM = torch.OutOfMemoryError
sync = torch.cuda.synchronize
"""
CUPY = r"""
import cupy
cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
def block(n): return cupy.empty(n, dtype=cupy.uint8)
OOM = cupy.cuda.memory.OutOfMemoryError
sync = cupy.cuda.Device().synchronize
"""
REFILL = rf"""
import sys
held = []
try:
    while len(held) < 64:
        held.append(block({BLOCK}))
except OOM:
    pass
sync()
print("full", len(held), flush=True)
sys.stdin.readline()
del held[len(held) // 2], held[len(held) // 2]  # two blocks in the middle: their chunks hold live blocks too
sync()
results = []
for size in ({BLOCK}, 8000):
    try:
        held.append(block(size))
        results.append("granted")
    except OOM:
        results.append("refused")
sync()
print("refill", *results, flush=True)
sys.stdin.readline()
"""


def denials(shm: str, pid: int) -> int:
    """The child's published limit_denied_allocations on device 0, from a publish made after now."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    since, deadline = time.time_ns(), time.monotonic() + 5
    while time.monotonic() < deadline:
        for parsed in SegmentDirectory(shm, layout.KIND_CUDA, reclaim=False).read():
            if parsed.segment.holder_pid == pid and parsed.segment.header.update_time_ns > since + 20_000_000:
                return parsed.record.devices[0].limit_denied_allocations
        time.sleep(0.01)
    raise RuntimeError("no publish from the child")


def run(framework: str, prelude: str) -> dict:
    shm = tempfile.mkdtemp(prefix="alnair-shm-")
    env = {
        **os.environ,
        "LD_PRELOAD": str(ROOT / "intercept" / "build" / "libalnair.so"),
        "ALNAIR_SHM_DIR": shm,
        "ALNAIR_MEMORY_LIMIT": "4Gi",
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
        "PYTHONUNBUFFERED": "1",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", prelude + REFILL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    full = child.stdout.readline().split()
    before = denials(shm, child.pid)
    child.stdin.write("go\n")
    child.stdin.flush()
    refill = child.stdout.readline().split()
    after = denials(shm, child.pid)
    child.stdin.write("go\n")
    child.stdin.flush()
    code = child.wait(60)
    result = {
        "framework": framework,
        "blocks_at_the_limit": int(full[1]) if len(full) == 2 else None,
        "refill": refill[1:],
        "denials_before": before,
        "denials_after": after,
        "exit_code": code,
    }
    result["ok"] = result["refill"] == ["granted", "granted"] and after == before and code == 0
    print(
        f"{framework}: {result['blocks_at_the_limit']} blocks of 256 MiB at the limit; 256 MiB and 8,000 B again: "
        f"{' and '.join(result['refill'])}; denials {before} -> {after}: {'ok' if result['ok'] else 'FAIL'}",
        flush=True,
    )
    return result


def main() -> int:
    subprocess.run(["make", "-s", "-C", str(ROOT / "intercept")], check=True)
    sys.path.insert(0, str(shim()))
    results = [run("torch cudaMallocAsync", TORCH), run("cupy MemoryAsyncPool", CUPY)]
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "pool_refill.json").write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
