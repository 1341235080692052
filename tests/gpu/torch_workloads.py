"""PyTorch workloads for the GPU checks, run as child processes (under LD_PRELOAD or not).

torch_workloads.py profile STEPS   train; at each "mark" wait for a line on stdin so the
                                   parent can read the segment; report the profiler's kernels
torch_workloads.py oom             allocate until PyTorch's out-of-memory error, then go on
torch_workloads.py matmul SECONDS [BATCH [common [SIZE]]]  a loop of SIZE x SIZE (4096) matmuls
                                   synchronising every BATCH (10) iterations; report iterations
                                   per second (common: over the span FROM UNTIL its parent writes
                                   to stdin); a small SIZE makes the loop launch-bound
torch_workloads.py train STEPS     time STEPS training steps; report seconds
"""

from __future__ import annotations

import sys
import time

import torch
from torch.autograd import DeviceType


def say(*words) -> None:
    print(*words, flush=True)


def mark(name: str) -> None:
    torch.cuda.synchronize()
    say("mark", name)
    sys.stdin.readline()


def model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 1024, device="cuda"), torch.randn(256, 1024, device="cuda")
    return model, optimizer, x, y


def step(model, optimizer, x, y) -> None:
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def profile(steps: int) -> None:
    model, optimizer, x, y = model_and_data()
    for _ in range(5):
        step(model, optimizer, x, y)  # warm-up: allocator, cuBLAS handles
    say("memory_reserved_trained", torch.cuda.memory_reserved())
    mark("trained")  # before the profiler, which takes device memory of its own
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        mark("before")
        for _ in range(steps):
            step(model, optimizer, x, y)
        torch.cuda.synchronize()
    kernels = [
        e for e in prof.events() if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))
    ]
    say("profiler_kernels", len(kernels))
    say("memory_reserved", torch.cuda.memory_reserved())
    mark("after")


def oom() -> None:
    free, total = torch.cuda.mem_get_info()
    say("mem_get_info_total", total)
    held = []
    try:
        while True:
            held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        say("oom_after_bytes", sum(t.numel() for t in held))
        say("oom_message", str(e).splitlines()[0][:120])
    held.clear()
    torch.cuda.empty_cache()
    after = torch.ones(1024, device="cuda").sum().item()  # the process is alive and computes
    say("alive_result", after)
    mark("done")


def matmul(seconds: float, batch: int = 10, common_window: bool = False, size: int = 4096) -> None:
    """bf16 SIZE x SIZE matmuls, a sync every `batch`; iterations per second over the last 3/4 of
    `seconds`, or with common_window over the epoch times FROM UNTIL read from stdin once started
    (every process of a group measured over the same span; it runs until UNTIL + 0.5 s)."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    say("started", time.time())
    if common_window:
        measure_from, measure_until = map(float, sys.stdin.readline().split())
    else:
        measure_until = time.time() + seconds
        measure_from = measure_until - seconds * 0.75  # after ramp-up
    n, first, last = 0, None, None
    while time.time() < measure_until + 0.5:
        for _ in range(batch):
            a @ b
        torch.cuda.synchronize()
        now = time.time()
        if measure_from <= now <= measure_until:
            first = first or (now, n)
            last = (now, n + batch)
        n += batch
    say("iterations_per_second", (last[1] - first[1]) / (last[0] - first[0]) if first and last[0] > first[0] else -1)


def train(steps: int) -> None:
    model, optimizer, x, y = model_and_data()
    for _ in range(20):
        step(model, optimizer, x, y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(model, optimizer, x, y)
    torch.cuda.synchronize()
    say("seconds", time.perf_counter() - start)


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "0"
    {
        "profile": lambda: profile(int(arg)),
        "oom": oom,
        "matmul": lambda: matmul(
            float(arg),
            int(sys.argv[3]) if len(sys.argv) > 3 else 10,
            sys.argv[4:5] == ["common"],
            int(sys.argv[5]) if len(sys.argv) > 5 else 4096,
        ),
        "train": lambda: train(int(arg)),
    }[mode]()
