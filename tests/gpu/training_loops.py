"""Real training loops for the GPU sharing checks, run as child processes under the intercept: torchvision's
ResNet-18 and a transformer encoder, bf16 autocast, `loss.item()` every step (a sync each step, as loops that
log their loss do), at a batch size that sets the step time.

A child builds its model and warms up, prints `ready`, waits for a line on stdin, steps for the given seconds
(or, given on:off seconds, steps `on` and idles `off` in turn), prints its `rate` and the `times` its steps ended
(time.monotonic: CLOCK_MONOTONIC, the same in every process) and waits for another line; asked for a profile, it
then runs that many steps under torch.profiler, prints the GPU time of their kernels and copies per step (`kernels`, ms)
and the seconds those steps took, and waits for a line again before it exits. The parent reads what the intercept
published between those lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time, torch
model_name, batch, seconds, profile_steps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
on, off = map(float, sys.argv[5].split(":"))  # steps for `on` seconds, then idles for `off` (0:0: always on)
torch.manual_seed(0)
if model_name == "resnet18":
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (batch,), device="cuda")
    loss_of = lambda out: torch.nn.functional.cross_entropy(out, y)
else:  # a transformer encoder: 8 layers (transformer2: 2), d_model 1024, 16 heads, sequences of 256 tokens
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, norm_first=True)
    layers = 2 if model_name == "transformer2" else 8
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda()
    x = torch.randn(batch, 256, 1024, device="cuda")
    loss_of = lambda out: out.float().pow(2).mean()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_of(model(x))
    loss.backward()
    optimizer.step()
    return loss.item()
for _ in range(20):
    step()
print("ready", flush=True)
sys.stdin.readline()
n, start, ends = 0, time.monotonic(), []
while time.monotonic() - start < seconds:
    if on and (time.monotonic() - start) % (on + off) >= on:
        time.sleep(0.001)
        continue
    step()
    ends.append(time.monotonic())
    n += 1
elapsed = time.monotonic() - start
print("rate", n / elapsed, elapsed / n * 1000, n, flush=True)
print("times", json.dumps({"start": start, "ends": ends}), flush=True)
sys.stdin.readline()
if profile_steps:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        began = time.monotonic()
        for _ in range(profile_steps):
            step()
        profiled = time.monotonic() - began
    gpu_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type.name == "CUDA")
    print("kernels", gpu_us / 1000 / profile_steps, profiled, flush=True)
    sys.stdin.readline()
"""


def make_importable() -> None:
    """`alnair` importable from this checkout (the device machine has it uninstalled)."""
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    from check_memory_pools import shim

    sys.path.insert(0, str(shim()))


def prepare() -> None:
    """The intercept built and `alnair` importable, before any child starts."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "intercept")], check=True)
    make_importable()


def loops(spec: str) -> list[tuple[str, str, int]]:
    """`model:batch,...` as (the spec's item, model, batch)."""
    return [(item, item.split(":")[0], int(item.split(":")[1])) for item in spec.split(",")]


def save(report: list | dict, name: str) -> None:
    """The report as $OUT/name, where the device tool brings it back."""
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], name).write_text(json.dumps(report, indent=1))


def start(
    model: str,
    batch: int,
    seconds: float,
    shm: str,
    env: dict[str, str] | None = None,
    profile_steps: int = 0,
    on_off: str = "0:0",
    code: str = CHILD,
) -> subprocess.Popen:
    """A child running `code` (CHILD, or a variant taking the same arguments) under the intercept."""
    environment = {
        **os.environ,
        "LD_PRELOAD": str(ROOT / "intercept" / "build" / "libalnair.so"),
        "ALNAIR_SHM_DIR": shm,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-c", code, model, str(batch), str(seconds), str(profile_steps), on_off],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    )


def new_shm_dir() -> str:
    return tempfile.mkdtemp(prefix="alnair-shm-", dir="/dev/shm")


def published_all(shm: str, pids: list[int]) -> list[dict]:
    """Device 0 of the record each child published (its limit figures and GPU time; {} for none), from one read
    of the directory, so the children's figures are of one moment."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    found = {}
    for parsed in SegmentDirectory(shm, layout.KIND_CUDA, reclaim=False).read():
        d, ext = parsed.record.devices[0], parsed.record.devices_ext[0]
        found[parsed.segment.holder_pid] = {
            "throttled_s": d.throttled_ns / 1e9,
            "gpu_time_s": d.gpu_time_ns / 1e9,
            "busy_s": ext.busy_ns / 1e9,
            "gpu_time_measured": bool(d.flags & layout.CUDA_DEVICE_GPU_TIME),
        }
    return [found.get(pid, {}) for pid in pids]


def tell(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()


def wait_ready(children: list[subprocess.Popen]) -> None:
    for child in children:
        line = child.stdout.readline().split()
        assert line == ["ready"], line


def finish(children: list[subprocess.Popen]) -> None:
    tell(children)
    for child in children:
        child.stdin.close()
        child.wait(120)


def read_rate(child: subprocess.Popen) -> tuple[list[str], dict]:
    """A child's `rate` line (split) and its `times`."""
    rate = child.stdout.readline().split()
    times = child.stdout.readline().split(maxsplit=1)
    assert rate[0] == "rate" and times[0] == "times", (rate, times)
    return rate, json.loads(times[1])
