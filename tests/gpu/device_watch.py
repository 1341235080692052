"""What the GPU did while a check's processes stepped: NVML's utilization.gpu (the % of time a kernel ran over its
sample period), the SM clock, the power drawn and the reasons the clocks were held down, polled every 50 ms on a
thread of its own (polling leaves NVML's busy samples as they are: probe_nvml_samples.py's `read_cadence`).

A loop's solo rate moved 11% between two runs minutes apart on an H100 (docs/benchmarks.md, 2026-12-07, night);
the clocks say whether the GPU ran slower or the loop did. A figure this NVML does not give is None.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import statistics
import threading
import time

CLOCK_SM = 1  # nvmlClockType_t


class Rates(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]  # nvmlUtilization_t


def open_nvml() -> tuple[ctypes.CDLL, ctypes.c_void_p, float]:
    """NVML initialised: the library, device 0's handle, and the seconds nvmlInit_v2 took."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    started = time.perf_counter()
    assert lib.nvmlInit_v2() == 0
    took = time.perf_counter() - started
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
    return lib, handle, took


class DeviceWatch:
    """Device 0, polled from `with watch:` to its end; `summary()` then. Reusable."""

    def __init__(self, interval: float = 0.05):
        self.nvml, self.handle, _ = open_nvml()
        # the clocks' event reasons: the name since driver 535, the older one before
        self.reasons = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.interval = interval
        self.rows: list[tuple[int | None, int | None, int | None, int | None]] = []
        self.running = False

    def _read(self, name: str, value: ctypes._SimpleCData, *args) -> int | None:
        call = getattr(self.nvml, name, None)
        return value.value if call and call(self.handle, *args, ctypes.byref(value)) == 0 else None

    def _poll(self) -> None:
        rates = Rates()
        while self.running:
            busy = rates.gpu if self.nvml.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(rates)) == 0 else None
            sm = self._read("nvmlDeviceGetClockInfo", ctypes.c_uint(), CLOCK_SM)
            power = self._read("nvmlDeviceGetPowerUsage", ctypes.c_uint())
            reasons = ctypes.c_ulonglong()
            held = reasons.value if self.reasons and self.reasons(self.handle, ctypes.byref(reasons)) == 0 else None
            self.rows.append((busy, sm, power, held))
            time.sleep(self.interval)

    def __enter__(self) -> DeviceWatch:
        self.rows, self.running = [], True
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()

    def summary(self) -> dict:
        """busy: mean utilization (0..1); sm_mhz: median SM clock and its lowest; power_w: mean; clock_reasons: every
        reason seen (NVML's bit mask, OR'd; 0x1 is the GPU idle, 0x4 the power cap, 0x20/0x40 thermal)."""

        def column(i: int) -> list[int]:
            return [row[i] for row in self.rows if row[i] is not None]

        busy, sm, power, reasons = column(0), column(1), column(2), column(3)
        held = functools.reduce(operator.or_, reasons, 0)
        return {
            "busy": sum(busy) / len(busy) / 100 if busy else None,
            "sm_mhz": statistics.median(sm) if sm else None,
            "sm_mhz_min": min(sm) if sm else None,
            "power_w": sum(power) / len(power) / 1000 if power else None,
            "clock_reasons": hex(held) if reasons else None,
            "polls": len(self.rows),
        }
