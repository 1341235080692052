"""A job's profile: its processes' final records as one JSON document, written whole (docs/profile.md has the schema
by example; profile_summary.py the lines printed beside it)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter, defaultdict
from dataclasses import dataclass

from alnair.abi import layout
from alnair.abi.records import OTHER_KERNELS, device_uuid, kernel_key, text

from .job_segments import FinalRecord

SCHEMA_VERSION = 1
TOP_KERNELS = 20  # kernels named per GPU in the job's totals, the rest summed as "(other)": as each record keeps them
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")  # the resolution of process start times
# each device's, summed over the job's processes
DEVICE_FIELDS = (
    "kernel_launches",
    "graph_launches",
    "allocations",
    "failed_allocations",
    "limit_denied_allocations",
    "peak_bytes",
    "throttled_ns",
)
LIMIT_FIELDS = ("memory_limit_bytes", "compute_limit_percent", "compute_share_percent")
TRAINING_FIELDS = ("steps", "samples", "epochs", "optimizer_steps", "data_wait_ns", "step_ns")
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class JobEnd:
    """What the watcher knows of the job itself."""

    command: list[str]
    started_unix: float
    start_ticks: int  # the command's process start, in clock ticks after boot, as segment headers count it
    wall_ns: int
    status: int  # as waitpid gave it


def build(job: JobEnd, finals: list[FinalRecord]) -> dict:
    processes = [_process(job, kinds) for kinds in _by_process(finals).values()]
    processes.sort(key=lambda p: (p["started_ns"], p["pid"]))
    cuda = [p["cuda"] for p in processes if "cuda" in p]
    python = [p["python"] for p in processes if "python" in p]
    return {
        "profile_version": SCHEMA_VERSION,
        "command": job.command,
        "exit": _exit(job.status),
        "started_unix": round(job.started_unix, 3),
        "wall_ns": job.wall_ns,
        "first_allocation_ns": _first(processes, "first_allocation_ns"),
        "first_launch_ns": _first(processes, "first_launch_ns"),
        "devices": _device_totals(cuda, job.wall_ns),
        "training": _training(python),
        "processes": processes,
    }


def _by_process(finals: list[FinalRecord]) -> dict[tuple[int, int], dict[int, FinalRecord]]:
    """The records joined by process: pid and start time (a pid may be reused within a job)."""
    joined: dict[tuple[int, int], dict[int, FinalRecord]] = defaultdict(dict)
    for final in finals:
        joined[(final.header.writer_pid, final.header.start_time_ticks)][final.kind] = final
    return joined


def _process(job: JobEnd, kinds: dict[int, FinalRecord]) -> dict:
    any_kind = next(iter(kinds.values()))
    section = {
        "pid": any_kind.header.writer_pid,
        "comm": text(any_kind.header.comm),
        "started_ns": max(0, any_kind.header.start_time_ticks - job.start_ticks) * TICK_NS,
        "running": any(final.running for final in kinds.values()),
    }
    if layout.KIND_CUDA in kinds:
        section["cuda"] = _cuda(kinds[layout.KIND_CUDA].record)
    if layout.KIND_PYTHON in kinds:
        section["python"] = _python(kinds[layout.KIND_PYTHON].record)
    return section


def _cuda(record) -> dict:
    activity = record.activity
    section = {
        "first_allocation_ns": (activity.first_allocation_ns or None) if activity else None,
        "first_launch_ns": (activity.first_launch_ns or None) if activity else None,
        "devices": [
            _cuda_device(device, record.devices_ext[i] if record.devices_ext else None)
            for i, device in enumerate(record.devices)
        ],
    }
    if record.kernels is not None:  # a writer older than the kernel table has none: absent, not empty
        section["kernels"] = [
            {"index": index, "name": name, "launches": k.launches}
            for k in record.kernels
            for index, name in [kernel_key(k)]
        ]
    return section


def _cuda_device(device: layout.CudaDevice, ext: layout.CudaDeviceExt | None) -> dict:
    measured = bool(device.flags & layout.CUDA_DEVICE_GPU_TIME)  # older writers: absent, not zero
    entry = {"index": device.device_index, "uuid": device_uuid(device) if any(device.uuid) else None}
    entry.update({field: getattr(device, field) for field in DEVICE_FIELDS + LIMIT_FIELDS})
    entry["gpu_time_ns"] = device.gpu_time_ns if measured else None
    entry["busy_ns"] = ext.busy_ns if measured and ext else None
    if ext is not None:
        entry["copies"] = {
            name: {"copies": c.copies, "bytes": c.bytes, "sync_ns": c.sync_ns}
            for name, c in zip(layout.COPY_DIRECTION_NAMES, ext.copies)
        }
    return entry


def _python(record: layout.PythonRecord) -> dict:
    section = {field: getattr(record, field) for field in TRAINING_FIELDS}
    section.update(
        {
            "first_step_ns": record.first_step_ns or None,
            "dataloader_worker": bool(record.flags & layout.PYTHON_DATALOADER_WORKER),
            "samples_per_second": _ratio(record.samples, record.step_ns / 1e9),
            "data_stall_fraction": _ratio(record.data_wait_ns, record.step_ns),
            "counters": {text(c.name): c.value for c in record.counters[: record.counter_count]},
            "phases": {
                text(p.name): {"count": p.count, "total_ns": p.total_ns} for p in record.phases[: record.phase_count]
            },
        }
    )
    return section


def _ratio(part: float, whole: float) -> float | None:
    return round(part / whole, 6) if whole else None


def _first(processes: list[dict], field: str) -> int | None:
    """The job's first event: each process's own time to it, from the job's start."""
    times = [p["started_ns"] + p["cuda"][field] for p in processes if p.get("cuda", {}).get(field)]
    return min(times, default=None)


def _device_totals(cuda: list[dict], wall_ns: int) -> list[dict]:
    """Per GPU (by UUID: ranks see one GPU under different ordinals), summed over the processes.
    peak_bytes sums each process's own peak: exact for one process per device, an upper bound for several."""
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    kernels: dict[str, Counter[str]] = defaultdict(Counter)  # only the GPUs of processes that have the table
    for section in cuda:
        gpus = {device["index"]: gpu_key(device) for device in section["devices"]}
        for device in section["devices"]:
            by_gpu[gpu_key(device)].append(device)
        for kernel in section.get("kernels", ()):
            kernels[gpus[kernel["index"]]][kernel["name"]] += kernel["launches"]
    totals = []
    for gpu, entries in sorted(by_gpu.items()):
        totals.append(_device_total(entries, wall_ns))
        if gpu in kernels:
            totals[-1]["kernels"] = _top_kernels(kernels[gpu])
    return totals


def gpu_key(device: dict) -> str:
    """A GPU across the job's processes: its UUID, or where a process ended before it learnt it (within its first
    publish period), the ordinal it saw."""
    return device["uuid"] or f"device {device['index']}"


def _top_kernels(launches: Counter[str]) -> list[dict]:
    """The TOP_KERNELS names launched most on a GPU over the job, most first; then one "(other)" row for the rest and
    the processes' own "(other)" rows (launches of kernels their tables did not name)."""
    other = launches.pop(OTHER_KERNELS, 0)
    top = launches.most_common(TOP_KERNELS)
    other += sum(launches.values()) - sum(n for _, n in top)
    return [{"name": name, "launches": n} for name, n in top] + [{"name": OTHER_KERNELS, "launches": other}]


def _device_total(entries: list[dict], wall_ns: int) -> dict:
    uuid = entries[0]["uuid"]
    total = {"uuid": uuid, **({} if uuid else {"index": entries[0]["index"]}), "processes": len(entries)}
    total.update({field: sum(e[field] for e in entries) for field in DEVICE_FIELDS})
    for field in ("gpu_time_ns", "busy_ns"):
        measured = [e[field] for e in entries if e[field] is not None]
        total[field] = sum(measured) if measured else None
    with_copies = [e["copies"] for e in entries if "copies" in e]
    if with_copies:
        total["copies"] = {
            name: _copy_total([c[name] for c in with_copies], wall_ns) for name in layout.COPY_DIRECTION_NAMES
        }
    return total


def _copy_total(directions: list[dict], wall_ns: int) -> dict:
    total = {key: sum(d[key] for d in directions) for key in ("copies", "bytes", "sync_ns")}
    total["bytes_per_second"] = _ratio(total["bytes"], wall_ns / 1e9)  # over the job's wall time, not the link's speed
    return total


def _training(python: list[dict]) -> dict | None:
    if not python:
        return None
    total = {field: sum(p[field] for p in python) for field in TRAINING_FIELDS}
    # Processes that train at once (ranks) add their rates; a process's own rate is over its time in steps.
    rates = [p["samples_per_second"] for p in python if p["samples_per_second"] is not None]
    total["samples_per_second"] = round(sum(rates), 6) if rates else None
    total["data_stall_fraction"] = _ratio(total["data_wait_ns"], total["step_ns"])
    return total


def _exit(status: int) -> dict:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return {"signal": number, "name": _signal_name(number)}
    return {"code": os.waitstatus_to_exitcode(status)}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def write(path: str, profile: dict) -> str:
    """Writes the profile whole under a temporary name, then renames it: a reader never finds half of it.
    Returns "" or why it could not."""
    temp = temp_name(path)
    try:
        fd = os.open(temp, _CREATE_FLAGS, 0o666)
        with os.fdopen(fd, "w") as f:
            json.dump(profile, f, indent=1)
            f.write("\n")
        os.replace(temp, path)
    except OSError as e:
        _remove(temp)
        return e.strerror or str(e)
    return ""


def unwritable(path: str) -> str:
    """Why the profile could not be written at `path` ("" if it could): what write() does, tried at the start."""
    if os.path.isdir(path):
        return "it is a directory"
    temp = temp_name(path)
    try:
        os.close(os.open(temp, _CREATE_FLAGS, 0o666))
    except OSError as e:
        return e.strerror or str(e)
    _remove(temp)
    return ""


def temp_name(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.tmp")


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
