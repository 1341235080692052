"""What psutil sees of one campaign job while it runs: its process tree (the job and its DataLoader workers) sampled
at a fixed interval (CPU, RSS, threads, I/O, context switches), and the node's CPU times, CPU statistics and network
counters as differences over the run, with its memory and disk at the run's last sample: the per-run values of the
published table's psutil columns, which Alnair's series do not carry."""

from __future__ import annotations

import threading
import time

SAMPLE_INTERVAL = 0.5  # seconds, as the exporter's collectors sample for the campaign

CPU_TIMES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
CPU_STATS = ("ctx_switches", "interrupts", "soft_interrupts", "syscalls")
MEMORY = ("available", "used", "free", "active", "inactive", "buffers", "cached", "shared", "slab")
NET = (
    ("bytes_sent", "bytes sent"),
    ("bytes_recv", "bytes received"),
    ("packets_sent", "packets sent"),
    ("packets_recv", "packets received"),
    ("errin", "receive errors"),
    ("errout", "send errors"),
    ("dropin", "incoming packets dropped"),
    ("dropout", "outgoing packets dropped"),
)
STATISTICS = ("min", "max", "mean", "range")
GAUGES = (
    (
        "proc_cpu_percent",
        "CPU use of the job's process tree per sample interval, percent of one CPU (summed over "
        "its processes: 200 is two CPUs busy)",
    ),
    (
        "proc_rss_bytes",
        "resident memory of the job's process tree (summed over its processes; pages forked "
        "workers share with the job count in each)",
    ),
    ("proc_threads", "threads of the job's process tree (summed over its processes)"),
)


def _columns() -> list[tuple[str, type, str]]:
    out = [
        (
            "proc_samples",
            int,
            f"psutil samples of the job's process tree (one every {SAMPLE_INTERVAL:g} s while it ran)",
        ),
        (
            "proc_processes_max",
            int,
            "most processes in the job's tree at one sample (the job and its DataLoader workers)",
        ),
    ]
    for name, meaning in GAUGES:
        out += [(f"{name}_{s}", float, f"{meaning}: {s} over the samples") for s in STATISTICS]
    out += [
        ("proc_cpu_user_seconds", float, "user CPU time of the job's processes (each one's last sample, summed)"),
        ("proc_cpu_system_seconds", float, "system CPU time of the job's processes (each one's last sample, summed)"),
        (
            "proc_read_bytes",
            float,
            "bytes the job's processes read from storage (/proc/PID/io read_bytes, summed; "
            "empty where psutil cannot read it)",
        ),
        ("proc_write_bytes", float, "bytes the job's processes wrote to storage (write_bytes, summed)"),
        ("proc_ctx_switches_voluntary", float, "voluntary context switches of the job's processes, summed"),
        ("proc_ctx_switches_involuntary", float, "involuntary context switches of the job's processes, summed"),
    ]
    out += [
        (
            f"sys_cpu_{m}_seconds",
            float,
            f"the node's {m} CPU time over the run (all CPUs: psutil.cpu_times() at the end less at the start)",
        )
        for m in CPU_TIMES
    ]
    out += [
        (
            f"sys_{s}",
            float,
            f"the node's {s.replace('_', ' ')} over the run (psutil.cpu_stats() at the end less at the start)",
        )
        for s in CPU_STATS
    ]
    out += [
        (f"sys_memory_{m}_bytes", float, f"the node's {m} memory at the run's last sample (psutil.virtual_memory())")
        for m in MEMORY
    ]
    out += [
        (
            "sys_memory_percent",
            float,
            "the node's memory in use at the run's last sample: psutil's percent, (total - available) / total x 100",
        )
    ]
    out += [
        (f"disk_{d}_bytes", float, f"{d} bytes of the file system of / at the run's last sample (psutil.disk_usage)")
        for d in ("total", "used", "free")
    ]
    out += [("disk_percent", float, "used / (used + free) x 100 of / at the run's last sample")]
    out += [
        (
            f"net_{n}",
            float,
            f"the node's network {meaning} over the run (psutil.net_io_counters(), all interfaces, "
            "at the end less at the start)",
        )
        for n, meaning in NET
    ]
    return out


COLUMNS = _columns()
NAMES = [name for name, _, _ in COLUMNS]


def _node_counters(psutil) -> dict:
    out = {}
    times = psutil.cpu_times()
    out.update({f"sys_cpu_{m}_seconds": getattr(times, m, None) for m in CPU_TIMES})
    stats = psutil.cpu_stats()
    out.update({f"sys_{s}": getattr(stats, s, None) for s in CPU_STATS})
    net = psutil.net_io_counters()
    out.update({f"net_{n}": getattr(net, n, None) if net is not None else None for n, _ in NET})
    return out


def _node_levels(psutil) -> dict:
    memory = psutil.virtual_memory()
    out = {f"sys_memory_{m}_bytes": float(getattr(memory, m)) if hasattr(memory, m) else None for m in MEMORY}
    out["sys_memory_percent"] = float(memory.percent)
    disk = psutil.disk_usage("/")
    out.update(
        {
            "disk_total_bytes": float(disk.total),
            "disk_used_bytes": float(disk.used),
            "disk_free_bytes": float(disk.free),
            "disk_percent": float(disk.percent),
        }
    )
    return out


class ProcessSampler:
    """Samples the tree of `pid` every `interval` seconds in a thread from its start until `stop()` (or until the
    job exits); `columns()` then gives the row's values (COLUMNS)."""

    def __init__(self, pid: int, interval: float = SAMPLE_INTERVAL):
        import psutil  # the exporter extra's, there wherever the campaign runs the exporter

        self.psutil, self.pid, self.interval = psutil, pid, interval
        self.start_counters = _node_counters(psutil)
        self.levels: dict = {}
        self.gauges: dict[str, list[float]] = {name: [] for name, _ in GAUGES}
        self.processes_max = 0
        self.samples = 0
        self.cache: dict[tuple[int, float], object] = {}  # (pid, create time) -> psutil.Process
        self.last: dict[tuple[int, float], dict] = {}  # its last reading
        self.previous_time: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"psutil-{pid}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            if not self.sample():
                return
            next_at += self.interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _tree(self) -> list:
        psutil = self.psutil
        try:
            root = psutil.Process(self.pid)
            if root.status() == psutil.STATUS_ZOMBIE:
                return []
            procs = [root] + root.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return []
        out = []
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            out.append((key, self.cache.setdefault(key, proc)))
        return out

    def sample(self) -> bool:
        """One sample of the tree; False when the job is gone (nothing left to sample)."""
        psutil = self.psutil
        now = time.monotonic()
        tree = self._tree()
        if not tree:
            return False
        rss = threads = cpu_delta = 0.0
        seen = 0
        for key, proc in tree:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    reading = {
                        "rss": proc.memory_info().rss,
                        "threads": proc.num_threads(),
                        "user": times.user,
                        "system": times.system,
                    }
                    switches = proc.num_ctx_switches()
                    reading["voluntary"], reading["involuntary"] = switches.voluntary, switches.involuntary
                    try:
                        io = proc.io_counters()
                        reading["read_bytes"], reading["write_bytes"] = io.read_bytes, io.write_bytes
                    except (psutil.AccessDenied, AttributeError, NotImplementedError):
                        reading["read_bytes"] = reading["write_bytes"] = None
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if not reading["rss"]:
                continue  # exiting: its memory is torn down before it turns zombie (a live process has pages)
            seen += 1
            before = self.last.get(key)  # a process new since the last sample: all of its CPU
            cpu_delta += reading["user"] + reading["system"] - (before["user"] + before["system"] if before else 0.0)
            self.last[key] = reading
            rss += reading["rss"]
            threads += reading["threads"]
        if not seen:
            return False
        try:
            self.levels = _node_levels(psutil)
        except (OSError, RuntimeError):
            pass
        if self.previous_time is not None and now > self.previous_time:
            self.gauges["proc_cpu_percent"].append(100.0 * cpu_delta / (now - self.previous_time))
        self.previous_time = now
        self.gauges["proc_rss_bytes"].append(float(rss))
        self.gauges["proc_threads"].append(float(threads))
        self.processes_max = max(self.processes_max, seen)
        self.samples += 1
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def columns(self) -> dict:
        """The row's values: statistics of the samples, the tree's totals, the node's differences and levels."""
        self.stop()
        end = _node_counters(self.psutil)
        out: dict = {name: None for name in NAMES}
        out.update(self.levels)
        for name, value in end.items():
            before = self.start_counters.get(name)
            out[name] = None if value is None or before is None else float(value - before)
        out["proc_samples"], out["proc_processes_max"] = self.samples, self.processes_max or None
        for name, values in self.gauges.items():
            if values:
                low, high = min(values), max(values)
                out.update(
                    {
                        f"{name}_min": low,
                        f"{name}_max": high,
                        f"{name}_mean": sum(values) / len(values),
                        f"{name}_range": high - low,
                    }
                )
        readings = list(self.last.values())
        if readings:
            for column, field in (
                ("proc_cpu_user_seconds", "user"),
                ("proc_cpu_system_seconds", "system"),
                ("proc_ctx_switches_voluntary", "voluntary"),
                ("proc_ctx_switches_involuntary", "involuntary"),
                ("proc_read_bytes", "read_bytes"),
                ("proc_write_bytes", "write_bytes"),
            ):
                values = [r[field] for r in readings]
                out[column] = None if any(v is None for v in values) else float(sum(values))
        return out
