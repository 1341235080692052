"""PyTorch's cudaMallocAsync backend under a 4 GiB memory limit, on a real GPU: what the pool caches is charged,
and the GPU never holds more than the limit plus the measured context.

    python3 tests/gpu/check_memory_pools.py      (from the repository root, on the GPU machine; no install)

It builds the intercept, runs a child with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync and
ALNAIR_MEMORY_LIMIT=4Gi that runs one matmul (a cuBLAS handle and its workspace), then allocates 64 MiB tensors,
freeing every fourth one (so the pool caches memory), until PyTorch raises its out-of-memory error. At each step
the parent reads the child's published record and NVML's per-process memory (also sampled every 5 ms in between);
it checks
  (a) NVML's per-process memory never exceeds the limit plus the measured context size;
  (b) the counted (charged) bytes equal torch.cuda.memory_reserved() plus cuBLAS's workspace, 64 MiB + 129 KiB per
      handle (measured before: /work/shared/GPU-FACTS.md), at every step;
and prints the context size. Results also go to $OUT/memory_pools.json when OUT is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 4 << 30
WORKSPACE_PER_HANDLE = (64 << 20) + (129 << 10)

CHILD = r"""
import sys, torch
def mark(name):
    torch.cuda.synchronize()
    print("mark", name, torch.cuda.memory_reserved(), torch.cuda.memory_allocated(), flush=True)
    sys.stdin.readline()
a = torch.randn(1024, 1024, device="cuda")
(a @ a).sum().item()
mark("matmul")
held = []
step = 0
try:
    while True:
        held.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
        step += 1
        if step % 4 == 0:
            del held[-2]  # back to the pool's cache
        mark(f"step{step}")
except torch.OutOfMemoryError as e:
    print("oom", str(e).splitlines()[0].replace(" ", "_")[:200], flush=True)
    mark("after_oom")
"""


def shim() -> Path:
    """A directory holding `alnair` as symlinks into this checkout, for sys.path (what run_intercept.sh does)."""
    top = Path(tempfile.mkdtemp(prefix="alnair-shim-"))
    package = top / "alnair"
    package.mkdir()
    for part in ("abi", "exporter", "collectors", "intercept"):
        (package / part).symlink_to(ROOT / part)
    for module in (ROOT / "sdk").glob("*.py"):
        (package / module.name).symlink_to(module)
    return top


def main() -> int:
    subprocess.run(["make", "-s", "-C", str(ROOT / "intercept")], check=True)
    sys.path.insert(0, str(shim()))
    import pynvml

    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    shm = tempfile.mkdtemp(prefix="alnair-shm-")
    env = {
        **os.environ,
        "LD_PRELOAD": str(ROOT / "intercept" / "build" / "libalnair.so"),
        "ALNAIR_SHM_DIR": shm,
        "ALNAIR_MEMORY_LIMIT": "4Gi",
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
        "PYTHONUNBUFFERED": "1",
    }
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )

    def nvml_bytes() -> int:
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == child.pid and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
        return 0

    nvml_max = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                nvml_max[0] = max(nvml_max[0], nvml_bytes())
            except pynvml.NVMLError:
                pass
            time.sleep(0.005)

    def record():
        """(device 0, its memory fields) from a publish made after now: the counters have settled."""
        since = time.time_ns()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for parsed in SegmentDirectory(shm, layout.KIND_CUDA, reclaim=False).read():
                if parsed.segment.holder_pid == child.pid and parsed.segment.header.update_time_ns > since + 20_000_000:
                    return parsed.record.devices[0], parsed.record.devices_memory[0]
            time.sleep(0.01)
        raise RuntimeError("no publish from the child")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    steps, oom_message = [], None
    for line in child.stdout:
        words = line.split()
        if words[0] == "oom":
            oom_message = words[1]
            continue
        _, stage, reserved, allocated = words
        d, m = record()
        now = nvml_bytes()
        nvml_max[0] = max(nvml_max[0], now)
        outside = m.charged_bytes - int(reserved)
        steps.append(
            {
                "stage": stage,
                "memory_reserved": int(reserved),
                "memory_allocated": int(allocated),
                "bytes_in_use": d.bytes_in_use,
                "pool_reserved": m.pool_reserved_bytes,
                "pool_used": m.pool_used_bytes,
                "charged": m.charged_bytes,
                "context": m.context_bytes,
                "nvml": now,
                "charged_minus_reserved": outside,
            }
        )
        print(
            f"{stage:10s} reserved={int(reserved):>11d} in_use={d.bytes_in_use:>11d} pool={m.pool_reserved_bytes:>11d}"
            f"/{m.pool_used_bytes:>11d} charged={m.charged_bytes:>11d} charged-reserved={outside:>10d} nvml={now:>11d}",
            flush=True,
        )
        child.stdin.write("go\n")
        child.stdin.flush()
    code = child.wait()
    stop.set()
    sampler.join()

    context = steps[-1]["context"] if steps else 0
    handles = round(steps[0]["charged_minus_reserved"] / WORKSPACE_PER_HANDLE) if steps else 0
    expected_outside = max(handles, 1) * WORKSPACE_PER_HANDLE
    exact = [s["stage"] for s in steps if s["charged_minus_reserved"] != expected_outside]
    results = {
        "context_bytes": context,
        "limit": LIMIT,
        "nvml_max": nvml_max[0],
        "nvml_bound": LIMIT + context,
        "nvml_within_limit_plus_context": 0 < context and nvml_max[0] <= LIMIT + context,
        "nvml_margin_bytes": LIMIT + context - nvml_max[0],
        "cublas_handles": handles,
        "charged_equals_reserved_plus_workspace": bool(steps) and not exact,
        "steps_not_equal": exact,
        "oom_raised": oom_message is not None,
        "oom_message": oom_message,
        "exit_code": code,
        "held_at_oom": steps[-1]["charged"] if steps else None,
        "steps": steps,
    }
    print(f"context size (measured by the intercept): {context} B = {context / 2**20:.1f} MiB")
    print(
        f"(a) NVML per-process max {nvml_max[0]} B <= limit + context {LIMIT + context} B: "
        f"{results['nvml_within_limit_plus_context']} (margin {results['nvml_margin_bytes']} B)"
    )
    print(
        f"(b) charged == memory_reserved + {max(handles, 1)} x (64 MiB + 129 KiB) at every step: "
        f"{results['charged_equals_reserved_plus_workspace']} (steps off: {exact[:10]})"
    )
    print(f"OOM raised by PyTorch: {results['oom_raised']} ({oom_message}); child exit {code}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "memory_pools.json").write_text(json.dumps(results, indent=1))
    ok = results["nvml_within_limit_plus_context"] and results["charged_equals_reserved_plus_workspace"]
    return 0 if ok and results["oom_raised"] and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
