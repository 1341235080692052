"""alnair top's table: the node's live writer processes read straight from shared memory, cuda and
python segments joined by pid, with rates between two reads and each process's state (starting up, idle, its
compute cap and share). Read only: nothing is ever removed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from alnair.abi import layout
from alnair.abi.records import OTHER_KERNELS, kernel_key
from alnair.abi.segments import SegmentDirectory


@dataclass
class ProcessCounters:
    """What one process has published, as read once; times are the writers' publish times."""

    pid: str
    comm: str = ""
    pod_uid: str = ""
    gpus: list[int] = field(default_factory=list)
    cuda_time_ns: int = 0
    kernel_launches: int = 0
    memory_used: int = 0
    memory_limit: int = 0
    throttled_ns: int = 0
    # by device index, only devices whose GPU time is measured
    gpu_time_ns: dict[int, int] = field(default_factory=dict)
    memory_known: bool = False  # the writer publishes pool, context and charged memory (older ones do not)
    context_memory: int = 0
    memory_charged: int = 0
    activity_known: bool = False  # the writer publishes its first and last launch (older ones do not)
    first_launch_ns: int = 0
    last_launch_time_ns: int = 0
    caps: list[int] = field(default_factory=list)  # compute_limit_percent of each device with a cap
    shares: list[int] = field(default_factory=list)  # compute_share_percent of each device with a share
    turn_shares: list[float] = field(default_factory=list)  # quota / period of each device taking turns (older writers)
    kernels: dict[tuple[int, str], int] = field(default_factory=dict)  # (device, name): launches, named rows only
    copies_known: bool = False  # the writer counts copies (older ones do not)
    host_to_device_bytes: int = 0
    device_to_host_bytes: int = 0
    python_time_ns: int = 0
    steps: int = 0
    data_wait_ns: int = 0
    step_ns: int = 0


@dataclass
class Row:
    pid: str
    comm: str
    pod: str
    gpus: str
    launches_per_s: float | None
    memory_used: int | None
    memory_limit: int | None
    context_memory: int | None
    memory_charged: int | None
    state: str | None
    host_to_device_per_s: float | None
    device_to_host_per_s: float | None
    gpu_time_pct: float | None
    throttled_pct: float | None
    stall_pct: float | None
    steps_per_s: float | None


class NodeReader:
    """The cuda and python segments of one directory, read without reclaiming anything."""

    def __init__(self, shm_dir: str):
        self.cuda = SegmentDirectory(shm_dir, layout.KIND_CUDA, reclaim=False)
        self.python = SegmentDirectory(shm_dir, layout.KIND_PYTHON, reclaim=False)

    def read(self) -> dict[str, ProcessCounters]:
        processes: dict[str, ProcessCounters] = {}

        def process(segment) -> ProcessCounters:
            p = processes.setdefault(segment.pid_label, ProcessCounters(segment.pid_label))
            p.comm, p.pod_uid = segment.comm, segment.pod_uid
            return p

        for parsed in self.cuda.read():
            p = process(parsed.segment)
            devices = parsed.record.devices
            p.gpus = [d.device_index for d in devices]
            p.cuda_time_ns = parsed.segment.header.update_time_ns
            p.kernel_launches = sum(d.kernel_launches + d.graph_launches for d in devices)
            p.memory_used = sum(d.bytes_in_use for d in devices)
            p.memory_limit = sum(d.memory_limit_bytes for d in devices)
            p.throttled_ns = sum(d.throttled_ns for d in devices)
            p.gpu_time_ns = {d.device_index: d.gpu_time_ns for d in devices if d.flags & layout.CUDA_DEVICE_GPU_TIME}
            memory = parsed.record.devices_memory
            p.memory_known = memory is not None
            p.context_memory = sum(m.context_bytes for m in memory or ())
            p.memory_charged = sum(m.charged_bytes for m in memory or ())
            activity = parsed.record.activity
            p.activity_known = activity is not None
            if activity is not None:
                p.first_launch_ns, p.last_launch_time_ns = activity.first_launch_ns, activity.last_launch_time_ns
            p.caps = [d.compute_limit_percent for d in devices if d.compute_limit_percent]
            p.shares = [d.compute_share_percent for d in devices if d.compute_share_percent]
            p.turn_shares = [d.compute_quota_ns / d.compute_period_ns for d in devices if d.compute_period_ns]
            p.kernels = {
                kernel_key(k): k.launches for k in parsed.record.kernels or () if kernel_key(k)[1] != OTHER_KERNELS
            }
            extensions = parsed.record.devices_ext
            p.copies_known = extensions is not None
            p.host_to_device_bytes = sum(e.copies[layout.COPY_HOST_TO_DEVICE].bytes for e in extensions or ())
            p.device_to_host_bytes = sum(e.copies[layout.COPY_DEVICE_TO_HOST].bytes for e in extensions or ())
        for parsed in self.python.read():
            p = process(parsed.segment)
            r = parsed.record
            p.python_time_ns = parsed.segment.header.update_time_ns
            p.steps, p.data_wait_ns, p.step_ns = r.steps, r.data_wait_ns, r.step_ns
        return processes

    def unreadable(self) -> int:
        return self.cuda.skipped["unreadable"] + self.python.skipped["unreadable"]


def _rate(now: int, before: int, seconds: float) -> float | None:
    return (now - before) / seconds if seconds > 0 else (0.0 if now == before else None)


def _ratio_pct(part: int, whole: int) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def _gpu_time_pct(now: dict[int, int], before: dict[int, int], seconds: float) -> float | None:
    """The share of its GPUs' time the process got between two reads, in percent: the GPU time it gained on the
    devices measured in both reads over the time between the two publishes, times the number of those devices (the
    mean of its GPUs' shares). None without a device measured in both: a writer older than GPU time."""
    measured = now.keys() & before.keys()
    if not measured:
        return None
    got = _rate(sum(now[i] for i in measured), sum(before[i] for i in measured), seconds * len(measured))
    return None if got is None else min(100.0, got / 1e7)  # ns per s -> percent


IDLE_AFTER = 60.0  # seconds without a launch before a process that has launched is idle (--idle-after)


def state(p: ProcessCounters, idle_after: float = IDLE_AFTER) -> str | None:
    """What the process's GPU side is doing, judged at its last publish: "starting" before its first launch,
    "idle" when it has not launched for `idle_after` seconds; else, active, its compute limits: "cap:NN%" under a
    cap (ALNAIR_COMPUTE_LIMIT), "share:NN%" under a share (ALNAIR_COMPUTE_SHARE), both joined by a comma, each the
    lowest of its devices'; "turns:NN%" from a writer before the GPU-time limits while it takes turns (NN: its
    window's share of each period now, the lowest of its devices'); else "active". None without a cuda record, or
    from a writer older than the activity fields."""
    if not p.cuda_time_ns or not p.activity_known:
        return None
    if not p.first_launch_ns:
        return "starting"
    if p.cuda_time_ns - p.last_launch_time_ns > idle_after * 1e9:
        return "idle"
    if p.turn_shares:
        return f"turns:{100 * min(p.turn_shares):.0f}%"
    limits = [f"{kind}:{min(percents)}%" for kind, percents in (("cap", p.caps), ("share", p.shares)) if percents]
    return ",".join(limits) or "active"


def row(now: ProcessCounters, before: ProcessCounters | None, idle_after: float = IDLE_AFTER) -> Row:
    """Rates over the time between the two publishes read; None where there is no earlier read."""
    has_cuda, has_python = bool(now.cuda_time_ns), bool(now.python_time_ns)
    launches = gpu_time = throttled = stall = steps = to_device = to_host = None
    if before is not None and has_cuda and before.cuda_time_ns:
        seconds = (now.cuda_time_ns - before.cuda_time_ns) / 1e9
        launches = _rate(now.kernel_launches, before.kernel_launches, seconds)
        if now.copies_known and before.copies_known:
            to_device = _rate(now.host_to_device_bytes, before.host_to_device_bytes, seconds)
            to_host = _rate(now.device_to_host_bytes, before.device_to_host_bytes, seconds)
        busy = _rate(now.throttled_ns, before.throttled_ns, seconds * max(1, len(now.gpus)))
        throttled = None if busy is None else min(100.0, busy / 1e7)  # ns per s -> percent
        gpu_time = _gpu_time_pct(now.gpu_time_ns, before.gpu_time_ns, seconds)
    if before is not None and has_python and before.python_time_ns:
        seconds = (now.python_time_ns - before.python_time_ns) / 1e9
        steps = _rate(now.steps, before.steps, seconds)
        stall = _ratio_pct(now.data_wait_ns - before.data_wait_ns, now.step_ns - before.step_ns)
    return Row(
        pid=now.pid,
        comm=now.comm,
        pod=now.pod_uid[:8] or "-",
        gpus=",".join(map(str, now.gpus)) or "-",
        launches_per_s=launches,
        memory_used=now.memory_used if has_cuda else None,
        memory_limit=(now.memory_limit or None) if has_cuda else None,
        context_memory=(now.context_memory or None) if now.memory_known else None,  # 0: not measured
        memory_charged=now.memory_charged if has_cuda and now.memory_known else None,
        state=state(now, idle_after),
        host_to_device_per_s=to_device,
        device_to_host_per_s=to_host,
        gpu_time_pct=gpu_time,
        throttled_pct=throttled,
        stall_pct=stall,
        steps_per_s=steps,
    )


def rows(
    now: dict[str, ProcessCounters], before: dict[str, ProcessCounters], idle_after: float = IDLE_AFTER
) -> list[Row]:
    return [row(p, before.get(pid), idle_after) for pid, p in now.items()]


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return "-"


def _number(fmt: str) -> Callable[[float | None], str]:
    return lambda v: "-" if v is None else format(v, fmt)


@dataclass(frozen=True)
class Column:
    title: str
    key: str  # the Row field and the --sort name
    width: int
    text: Callable[[object], str]
    numeric: bool = True


COLUMNS = [
    Column("PID", "pid", 9, str, numeric=False),
    Column("COMM", "comm", 15, str, numeric=False),
    Column("POD", "pod", 8, str, numeric=False),
    Column("GPU", "gpus", 5, str, numeric=False),
    Column("STATE", "state", 17, lambda v: v or "-", numeric=False),  # cap:NN%,share:NN%
    Column("LAUNCH/s", "launches_per_s", 9, _number(".0f")),
    Column("MEM", "memory_used", 9, _bytes),
    Column("LIMIT", "memory_limit", 9, _bytes),
    Column("CTX", "context_memory", 9, _bytes),  # the contexts' own memory, which no allocation shows
    Column("CHARGED", "memory_charged", 9, _bytes),  # what the limit is checked against
    Column("H2D/s", "host_to_device_per_s", 9, _bytes),  # copy throughput: bytes a second, each way
    Column("D2H/s", "device_to_host_per_s", 9, _bytes),
    Column("GPU%", "gpu_time_pct", 6, _number(".1f")),  # the GPU's time the process got: its share of a shared GPU
    Column("THR%", "throttled_pct", 6, _number(".1f")),
    Column("STALL%", "stall_pct", 7, _number(".1f")),
    Column("STEP/s", "steps_per_s", 8, _number(".1f")),
]
SORT_KEYS = [c.key for c in COLUMNS]


def _sort_value(r: Row, key: str):
    value = getattr(r, key)
    if key == "pid":  # numerically; a pid from an invisible namespace is "pid@namespace"
        return int(value.split("@")[0])
    return value


def sorted_rows(table: list[Row], key: str, descending: bool) -> list[Row]:
    """Missing values sort last either way; ties keep pid order."""
    table = sorted(table, key=lambda r: _sort_value(r, "pid"))
    present = [r for r in table if getattr(r, key) is not None]
    missing = [r for r in table if getattr(r, key) is None]
    return sorted(present, key=lambda r: _sort_value(r, key), reverse=descending) + missing


def format_line(cells: list[str], columns: list[Column] = COLUMNS) -> str:
    return " ".join(
        cell[: c.width].ljust(c.width) if not c.numeric else cell[: c.width].rjust(c.width)
        for c, cell in zip(columns, cells)
    ).rstrip()


def header_line(columns: list[Column] = COLUMNS) -> str:
    return format_line([c.title for c in columns], columns)


def table_lines(table: list, columns: list[Column] = COLUMNS) -> list[str]:
    return [format_line([c.text(getattr(r, c.key)) for c in columns], columns) for r in table]


@dataclass
class KernelRow:
    pid: str
    gpu: int
    kernel: str
    launches: int
    launches_per_s: float | None


def kernel_rows(now: dict[str, ProcessCounters], before: dict[str, ProcessCounters], limit: int) -> list[KernelRow]:
    """The node's `limit` kernels launched most often between the two reads (by name, per process and device; a
    kernel not named in the earlier read has no rate yet and comes after those that have)."""
    table = []
    for pid, p in now.items():
        earlier = before.get(pid)
        seconds = (p.cuda_time_ns - earlier.cuda_time_ns) / 1e9 if earlier else 0
        for (gpu, name), launches in p.kernels.items():
            was = earlier.kernels.get((gpu, name)) if earlier else None
            rate = _rate(launches, was, seconds) if was is not None and seconds > 0 else None
            table.append(KernelRow(pid, gpu, name, launches, rate))
    table.sort(key=lambda r: (r.launches_per_s is None, -(r.launches_per_s or 0), -r.launches))
    return table[:limit]


KERNEL_COLUMNS = [
    Column("PID", "pid", 9, str, numeric=False),
    Column("GPU", "gpu", 5, str, numeric=False),
    Column("LAUNCH/s", "launches_per_s", 9, _number(".0f")),
    Column("LAUNCHES", "launches", 12, str),
    Column("KERNEL", "kernel", 120, str, numeric=False),  # demangled where the process could; cut here, not in /metrics
]


def kernel_lines(kernels: list[KernelRow]) -> list[str]:
    """The kernels' table's header and rows; nothing without kernels."""
    return [header_line(KERNEL_COLUMNS), *table_lines(kernels, KERNEL_COLUMNS)] if kernels else []


# The node's GPUs (node_gpus.GpuRow), above the processes.
GPU_COLUMNS = [
    Column("GPU", "index", 5, str, numeric=False),
    Column("NAME", "name", 26, str, numeric=False),
    Column("UTIL%", "utilization_pct", 6, _number(".0f")),  # NVML: some kernel ran during the last sample period
    Column("SMACT%", "sm_active_pct", 7, _number(".1f")),  # GPM: the share of SMs busy, between two reads
    Column("MEMBW%", "memory_utilization_pct", 7, _number(".0f")),  # NVML: device memory read or written
    Column("MEM", "memory_used", 9, _bytes),
    Column("TOTAL", "memory_total", 9, _bytes),
]


def gpu_lines(gpus: list) -> list[str]:
    """The GPU table's header and rows; nothing without GPUs."""
    return [header_line(GPU_COLUMNS), *table_lines(gpus, GPU_COLUMNS)] if gpus else []
