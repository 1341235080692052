"""On the GPU machine: what NVML's GPU utilization samples (nvmlDeviceGetSamples) say while one training loop runs
alone, against torch.profiler's kernel time for the same loop: their clock (CLOCK_REALTIME or CLOCK_MONOTONIC, in
us), their period and whether the busy fraction they add up to matches the kernels' time (the facts GPU time's
calibration by the device's busy time rests on); then, with the loop stepping 0.3 s and idling 0.3 s in turn, how far
a sample's stamp is from the end of the time it measured (the stamp offset that fits the samples to the steps best:
positive, the samples measured time after their stamps); then, with ResNet-18 b32 stepping, whether the samples
read every 100 ms and every 500 ms are the same, without and with another thread asking for the utilization rates
every 50 ms (as check_gpu_time.py does). Prints JSON lines; no check."""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time

from device_watch import Rates, open_nvml
from training_loops import finish, make_importable, new_shm_dir, read_rate, start, tell, wait_ready

UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES


class Sample(ctypes.Structure):
    _fields_ = [("timestamp_us", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]  # nvmlSample_t


def nvml():
    lib, handle, took = open_nvml()
    print(json.dumps({"nvml_init_ms": took * 1000}), flush=True)
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


def samples_for(lib, handle, after_us: int, seconds: float) -> list[tuple[int, int]]:
    """The samples newer than `after_us`, gathered every 0.1 s for `seconds`."""
    seen, began = [], time.time()
    while time.time() - began < seconds:
        time.sleep(0.1)
        seen += samples(lib, handle, seen[-1][0] if seen else after_us)
    return seen


def overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def fit_offset(seen: list[tuple[int, int]], spans: list[tuple[float, float]]) -> dict:
    """The offset (us, 5 ms steps within 400 ms) that makes the samples (stamp, %) fit busy spans (us, the samples'
    clock) best, each span busy at one part of its time (fitted too): the offset, that part and the rms error."""
    best = None
    for offset in range(-400_000, 400_001, 5_000):
        predicted = [overlap(a + offset, b + offset, spans) / (b - a) for (a, _), (b, _) in zip(seen, seen[1:])]
        measured = [v / 100 for _, v in seen[1:]]
        norm = sum(f * f for f in predicted)
        part = sum(f * m for f, m in zip(predicted, measured)) / norm if norm else 0.0
        rms = (sum((part * f - m) ** 2 for f, m in zip(predicted, measured)) / len(measured)) ** 0.5
        if best is None or rms < best["rms"]:
            best = {"offset_ms": offset / 1000, "busy_part": part, "rms": rms}
    return best


def read_cadence(
    lib, handle, spec: str, seconds: float = 6.0, periods: tuple[float, ...] = (0.1, 0.5), poll_rates: bool = False
) -> dict:
    """One loop stepping `seconds` while a thread per period reads NVML's new samples that often, each after the
    newest it saw (as the library's NVML thread does): whether the samples, their values and their busy time over
    the spell depend on how often they are read, and how late each was first seen (the library read every 500 ms
    counted the ResNet-18 loops 3-11 points under NVML's busy time, every 100 ms within 2). With `poll_rates`,
    another thread asks nvmlDeviceGetUtilizationRates every 50 ms meanwhile, as check_gpu_time.py does: whether that
    changes the samples' periods."""
    model, batch = spec.split(":")
    child = start(model, int(batch), seconds, new_shm_dir(), env={"LD_PRELOAD": ""})
    wait_ready([child])
    first = samples(lib, handle, 0)[-1][0]
    seen: dict[float, dict[int, tuple[int, int]]] = {period: {} for period in periods}
    stop = threading.Event()

    def read(period: float) -> None:
        last = first
        while not stop.wait(period):
            now_us = time.clock_gettime_ns(time.CLOCK_REALTIME) // 1000
            for stamp, value in samples(lib, handle, last):
                seen[period].setdefault(stamp, (value, now_us - stamp))
                last = max(last, stamp)

    def poll() -> None:
        rates = Rates()
        while not stop.wait(0.05):
            lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates))

    readers = [threading.Thread(target=read, args=(period,), daemon=True) for period in periods]
    readers += [threading.Thread(target=poll, daemon=True)] if poll_rates else []
    for reader in readers:
        reader.start()
    tell([child])
    read_rate(child)
    time.sleep(1.5)  # the last samples of the spell
    stop.set()
    for reader in readers:
        reader.join()
    finish([child])
    common = sorted(set.intersection(*(set(got) for got in seen.values())))
    gaps = sorted((b - a) / 1000 for a, b in zip(common, common[1:]))
    result = {"loop": spec, "poll_rates": poll_rates, "common": len(common)}
    result["period_ms_p10_median_p90"] = (
        [gaps[len(gaps) // 10], gaps[len(gaps) // 2], gaps[9 * len(gaps) // 10]] if gaps else None
    )
    for period, got in seen.items():
        stamps = sorted(s for s in got if common and common[0] <= s <= common[-1])
        busy_s = sum(got[b][0] / 100 * (b - a) / 1e6 for a, b in zip(stamps, stamps[1:]))
        lateness = sorted(late for _, late in got.values())
        result[f"every_{period}s"] = {
            "samples": len(got),
            "only_here": len(set(got) - set(common)),
            "busy_s_over_common_span": busy_s,
            "late_ms_median": lateness[len(lateness) // 2] / 1000 if lateness else None,
            "late_ms_max": lateness[-1] / 1000 if lateness else None,
        }
    values = [[seen[period][s][0] for period in periods] for s in common]
    result["values_differ"] = sum(len(set(v)) > 1 for v in values)
    result["span_s"] = (common[-1] - common[0]) / 1e6 if common else 0
    return result


def stamp_offset(lib, handle, spec: str, on: float = 0.3, off: float = 0.3, seconds: float = 6.0) -> dict:
    """A loop stepping `on` s and idling `off` s in turn: its busy spans from its step ends, against NVML's samples."""
    model, batch = spec.split(":")
    child = start(model, int(batch), seconds, new_shm_dir(), env={"LD_PRELOAD": ""}, on_off=f"{on}:{off}")
    wait_ready([child])
    last = samples(lib, handle, 0)[-1][0]
    tell([child])
    seen = samples_for(lib, handle, last, seconds + 1)
    _, times = read_rate(child)
    finish([child])
    to_real_us = (time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()) / 1000
    phases: dict[int, float] = {}
    for end in times["ends"]:
        phase = int((end - times["start"]) // (on + off))
        phases[phase] = max(phases.get(phase, 0.0), end)
    spans = [((times["start"] + k * (on + off)) * 1e6 + to_real_us, e * 1e6 + to_real_us) for k, e in phases.items()]
    return {"loop": spec, "on_off_s": [on, off], "samples": len(seen), **fit_offset(seen, spans)}


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
        wait_ready([child])
        last = samples(lib, handle, 0)[-1][0]
        tell([child])
        seen = samples_for(lib, handle, last, 4.0)
        last = seen[-1][0] if seen else last
        rate, _ = read_rate(child)
        tell([child])
        kernels_ms = float(child.stdout.readline().split()[1])
        finish([child])
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
    print(json.dumps(stamp_offset(lib, handle, "resnet18:128")), flush=True)
    for poll_rates in (False, True):
        print(json.dumps(read_cadence(lib, handle, "resnet18:32", poll_rates=poll_rates)), flush=True)
    return 0


if __name__ == "__main__":
    make_importable()
    sys.exit(main())
