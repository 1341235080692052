"""On the GPU machine: what NVML's GPU utilization samples (nvmlDeviceGetSamples) say while one training loop runs
alone, against torch.profiler's kernel time for the same loop: their clock (CLOCK_REALTIME or CLOCK_MONOTONIC, in
us), their period and whether the busy fraction they add up to matches the kernels' time (the facts GPU time's
calibration by the device's busy time rests on). Prints JSON lines; no check."""

from __future__ import annotations

import ctypes
import json
import sys
import time

from training_loops import make_importable, new_shm_dir, start

UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES


class Sample(ctypes.Structure):
    _fields_ = [("timestamp_us", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]  # nvmlSample_t


def nvml():
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    started = time.perf_counter()
    assert lib.nvmlInit_v2() == 0
    print(json.dumps({"nvml_init_ms": (time.perf_counter() - started) * 1000}), flush=True)
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    return lib, handle


def samples(lib, handle, last_us: int) -> list[tuple[int, int]]:
    kind, count = ctypes.c_int(), ctypes.c_uint(256)
    buffer = (Sample * 256)()
    r = lib.nvmlDeviceGetSamples(
        handle, UTILIZATION_SAMPLES, ctypes.c_ulonglong(last_us), ctypes.byref(kind), ctypes.byref(count), buffer
    )
    if r != 0:
        return []
    mask = 0xFFFFFFFF if kind.value == 1 else ~0  # NVML_VALUE_TYPE_UNSIGNED_INT: the low 32 bits
    return [(buffer[i].timestamp_us, buffer[i].value & mask) for i in range(count.value)]


def median_us(call, times: int = 200) -> float:
    took = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    return sorted(took)[times // 2] * 1e6


def main() -> int:
    lib, handle = nvml()
    clocks = {
        "realtime_us": time.clock_gettime_ns(time.CLOCK_REALTIME) // 1000,
        "monotonic_us": time.monotonic_ns() // 1000,
    }
    first = samples(lib, handle, 0)
    costs = {
        "get_samples_us_median": median_us(lambda: samples(lib, handle, 0)),
        # as the monitor thread asks: only what came after the newest it has
        "new_samples_us_median": median_us(lambda: samples(lib, handle, first[-1][0])),
    }
    print(json.dumps(costs), flush=True)
    print(json.dumps({"clocks": clocks, "latest_samples": first[-5:], "n": len(first)}), flush=True)
    for spec in sys.argv[1:] or ["resnet18:128", "transformer:32"]:
        model, batch = spec.split(":")
        child = start(model, int(batch), 4.0, new_shm_dir(), env={"LD_PRELOAD": ""}, profile_steps=20)
        assert child.stdout.readline().startswith("ready")
        last = samples(lib, handle, 0)[-1][0]
        child.stdin.write("\n"), child.stdin.flush()
        seen, began = [], time.time()
        while time.time() - began < 4.0:
            time.sleep(0.1)
            new = samples(lib, handle, last)
            if new:
                last = new[-1][0]
                seen += new
        rate = child.stdout.readline().split()
        child.stdout.readline()  # times
        child.stdin.write("\n"), child.stdin.flush()
        kernels_ms = float(child.stdout.readline().split()[1])
        child.stdin.write("\n"), child.stdin.flush()
        child.wait()
        periods = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
        inner = seen[2:-2]  # samples wholly inside the loop's 4 s
        busy = sum(v for _, v in inner) / max(len(inner), 1) / 100
        print(
            json.dumps(
                {
                    "loop": spec,
                    "steps_per_s": float(rate[1]),
                    "step_ms": float(rate[2]),
                    "kernels_ms_per_step": kernels_ms,
                    "profiler_busy": kernels_ms * float(rate[1]) / 1000,
                    "nvml_busy": busy,
                    "periods_us": sorted(periods)[len(periods) // 2] if periods else None,
                    "n": len(seen),
                    "values": [v for _, v in seen],
                    "now_realtime_us": time.clock_gettime_ns(time.CLOCK_REALTIME) // 1000,
                    "last_sample_us": last,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    make_importable()
    sys.exit(main())
