"""The exporter, the intercept and the limits on every GPU of a node (issue: multi-GPU proof). Run from the
repository root on a GPU machine, nothing installed:

    python3 tests/gpu/check_multi_gpu.py [PART ...]    (PART: nvml ddp reorder two_devices limits scrape; default all)

Parts that need two GPUs say NOT RUN on a machine with one (a dry run of the rest). NCCL's NVLink multicast stays
off as the machine sets it (NCCL_NVLS_ENABLE=0, also in every child's environment). Prints PASS/FAIL per check
and exits 1 if any check failed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_python_and_cuda_records import free_port, shim  # noqa: E402

WORK = Path(tempfile.mkdtemp(prefix="alnair-multi-gpu-"))
SHM = WORK / "shm"
SHM.mkdir()
ENV = {**os.environ, "PYTHONPATH": str(shim(WORK / "site")), "ALNAIR_SHM_DIR": str(SHM), "NCCL_NVLS_ENABLE": "0"}
ENV.pop("ALNAIR_PYTHON_INTERCEPT", None)
sys.path.insert(0, ENV["PYTHONPATH"])
from alnair.abi import layout  # noqa: E402
from alnair.abi.segments import SegmentDirectory  # noqa: E402

LIBRARY = REPO / "intercept" / "build" / "libalnair.so"
FAILED: list[str] = []
NOT_RUN: list[str] = []

# One DDP rank: warm up, then the same steps counted by the intercept (its own record) and by PyTorch's profiler.
DDP_RANK = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    from torch.autograd import DeviceType
    import glob
    from alnair.abi import layout
    from alnair.abi.records import parse_cuda_record
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).cuda(), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 2048, device="cuda"), torch.randn(256, 2048, device="cuda")
    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    def mine():
        # This process's own record, read from its file: a reader asking the kernel for the lock holder gets "no
        # one" for the lock it holds itself, so the reader's API would take it for a dead writer's.
        torch.cuda.synchronize(); time.sleep(0.05)  # > 2 publish periods
        [path] = glob.glob(os.path.join(os.environ["ALNAIR_SHM_DIR"], f"alnair.cuda.*.{os.getpid()}.*"))
        while True:
            raw = open(path, "rb").read()
            header = layout.ShmHeader.from_buffer_copy(raw)
            again = layout.ShmHeader.from_buffer_copy(open(path, "rb").read(layout.HEADER_SIZE))
            if header.seq % 2 == 0 and header.seq == again.seq:  # not torn by the monitor's publish
                record = parse_cuda_record(raw[header.header_size:header.header_size + header.record_size])
                return {d.device_index: d for d in record.devices}
    for _ in range(5):
        step()
    before = mine()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    after = mine()
    kernels = [e for e in prof.events()
               if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))]
    report = {"rank": rank, "pid": os.getpid(), "devices": sorted(after),
              "launches": after[rank].kernel_launches - before[rank].kernel_launches, "profiler": len(kernels),
              "bytes": after[rank].bytes_in_use, "reserved": torch.cuda.memory_reserved(rank)}
    print("report", __import__("json").dumps(report), flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")

# One process on two devices: fixed allocations and launches on each, then a 3 GiB allocation on each under a
# per-device memory limit of 4Gi on device 0 and 2Gi on device 1.
TWO_DEVICES = textwrap.dedent("""
    import sys, torch
    held = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0"),
            torch.empty(128 << 20, dtype=torch.uint8, device="cuda:1")]
    for device, n in ((0, 300), (1, 500)):
        t = torch.ones(1024, device=f"cuda:{device}")
        for _ in range(n):
            t.add_(1)
        torch.cuda.synchronize(device)
    print("ready", flush=True)
    sys.stdin.readline()
    outcome = []
    for device in (0, 1):
        try:
            held.append(torch.empty(3 << 30, dtype=torch.uint8, device=f"cuda:{device}"))
            outcome.append("ok")
        except torch.cuda.OutOfMemoryError:
            outcome.append("oom")
    print("outcome", " ".join(outcome), flush=True)
""")


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def not_run(part: str, why: str) -> None:
    print(f"NOT RUN  {part}: {why}", flush=True)
    NOT_RUN.append(part)


def smi(query: str, kind: str = "gpu") -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines()]


class Exporter:
    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alnair.exporter",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--shm.dir={SHM}",
                "--collector.nvml.interval=1s",
                "--collector.cuda.interval=500ms",
            ],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=open(WORK / "exporter.log", "w"),
        )
        self.wait_for(lambda m: any(n == "alnair_nvml_gpu_info" for n, _ in m), "the nvml collector's first sample")

    def metrics(self) -> dict[tuple[str, frozenset], float]:
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }

    def wait_for(self, predicate, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metrics = self.metrics()
            if metrics and predicate(metrics):
                return metrics
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise TimeoutError(f"{what}; exporter log: {(WORK / 'exporter.log').read_text()[-800:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def find(metrics, metric: str, **labels) -> list[float]:
    wanted = set(labels.items())
    return [v for (n, ls), v in metrics.items() if n == metric and wanted <= ls]


def gpus() -> list[dict[str, str]]:
    return [dict(zip(("index", "uuid", "used", "power"), row)) for row in smi("index,uuid,memory.used,power.draw")]


def part_nvml(exporter: Exporter) -> None:
    metrics = exporter.metrics()
    devices = gpus()
    uuids = {dict(ls)["uuid"] for (n, ls), _ in metrics.items() if n == "alnair_nvml_gpu_info"}
    check(
        "one set of per-GPU series per device, distinct UUIDs",
        uuids == {g["uuid"] for g in devices},
        f"{len(uuids)} served, {len(devices)} in nvidia-smi",
    )
    for g in devices:
        used = find(metrics, "alnair_nvml_memory_used_bytes", uuid=g["uuid"])
        power = find(metrics, "alnair_nvml_power_watts", uuid=g["uuid"])
        smi_used, smi_power = float(g["used"]) * 2**20, float(g["power"])
        check(
            f"GPU {g['index']} memory used within 2% of nvidia-smi",
            bool(used) and abs(used[0] - smi_used) <= 0.02 * smi_used + 2**22,
            f"{used} vs {smi_used}",
        )
        check(
            f"GPU {g['index']} power within 15% of nvidia-smi",
            bool(power) and abs(power[0] - smi_power) <= 0.15 * smi_power + 5,
            f"{power} vs {smi_power}",
        )


def part_ddp(exporter: Exporter, count: int) -> None:
    """A DDP job, one rank per GPU, under both intercepts: each rank's record on its own device, launches exact."""
    command = [
        sys.executable,
        "-m",
        "alnair.intercept.launcher",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={count}",
        str(WORK / "rank.py"),
    ]
    (WORK / "rank.py").write_text(DDP_RANK)
    out = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    reports = [json.loads(line.split(" ", 1)[1]) for line in out.stdout.splitlines() if line.startswith("report ")]
    check(
        f"DDP over {count} GPU(s) ran, a report per rank",
        out.returncode == 0 and len(reports) == count,
        out.stderr[out.stderr.find("Traceback") :][:2500] if out.returncode else f"{len(reports)} reports",
    )
    metrics = exporter.metrics()
    for r in reports:
        check(f"rank {r['rank']}: its record holds its own device only", r["devices"] == [r["rank"]], str(r["devices"]))
        check(
            f"rank {r['rank']}: kernel launches exact against the profiler",
            r["launches"] == r["profiler"],
            f"intercept {r['launches']}, profiler {r['profiler']}",
        )
        check(
            f"rank {r['rank']}: NCCL's allocations counted (bytes above PyTorch's reserved)",
            r["bytes"] > r["reserved"],
            f"counted {r['bytes']}, reserved {r['reserved']}",
        )
        steps = find(metrics, "alnair_python_optimizer_steps_total", pid=str(r["pid"]))
        check(f"rank {r['rank']}: the python record shows its 25 steps", steps == [25.0], str(steps))


def part_reorder(exporter: Exporter) -> None:
    """CUDA_VISIBLE_DEVICES=1,0: the process's cuda:0 is NVML's GPU 1; its cuda series carry GPU 1's UUID."""
    devices = gpus()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, torch; t = torch.empty(1 << 30, dtype=torch.uint8, device='cuda:0'); "
            "print('ready', flush=True); sys.stdin.readline()",
        ],
        env={**ENV, "LD_PRELOAD": str(LIBRARY), "CUDA_VISIBLE_DEVICES": "1,0"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("ready")
        metrics = exporter.wait_for(
            lambda m: find(m, "alnair_cuda_memory_used_bytes", pid=str(proc.pid)), "the reordered process"
        )
        series = [
            dict(ls)
            for (n, ls), v in metrics.items()
            if n == "alnair_cuda_memory_used_bytes" and ("pid", str(proc.pid)) in ls and v >= 1 << 30
        ]
        check(
            "reordered: the cuda series' uuid is NVML's GPU 1",
            [s["uuid"] for s in series] == [devices[1]["uuid"]],
            f"{series} vs {devices[1]['uuid']}",
        )
        nvml = find(metrics, "alnair_nvml_process_memory_used_bytes", pid=str(proc.pid), uuid=devices[1]["uuid"])
        check("reordered: NVML sees the process on the same UUID", bool(nvml), str(nvml))
    finally:
        proc.stdin.close()
        proc.wait(60)


def part_two_devices() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", TWO_DEVICES],
        env={**ENV, "LD_PRELOAD": str(LIBRARY), "ALNAIR_MEMORY_LIMIT": "0=4Gi,1=2Gi"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("ready")
        time.sleep(0.05)  # > 2 publish periods
        record = next(
            p
            for p in SegmentDirectory(str(SHM), layout.KIND_CUDA, reclaim=False).read()
            if p.segment.holder_pid == proc.pid
        )
        d = {x.device_index: x for x in record.record.devices}
        check(
            "two devices: bytes per device",
            d[0].bytes_in_use >= 256 << 20
            and d[1].bytes_in_use >= 128 << 20
            and d[0].bytes_in_use != d[1].bytes_in_use,
            f"{d[0].bytes_in_use}, {d[1].bytes_in_use}",
        )
        check(
            "two devices: launches per device (300 and 500 adds, plus PyTorch's own)",
            d[0].kernel_launches >= 300
            and d[1].kernel_launches >= 500
            and d[1].kernel_launches - d[0].kernel_launches == 200,
            f"{d[0].kernel_launches}, {d[1].kernel_launches}",
        )
        proc.stdin.write("go\n")
        proc.stdin.flush()
        outcome = proc.stdout.readline().split()[1:]
        check(
            "two devices: the limit is per device (3 GiB fits 4Gi on 0, not 2Gi on 1)",
            outcome == ["ok", "oom"],
            str(outcome),
        )
    finally:
        proc.stdin.close()
        proc.wait(60)


def matmul_share(device: int, limit: int | None, seconds: float) -> subprocess.Popen:
    env = {**ENV, "LD_PRELOAD": str(LIBRARY), "CUDA_VISIBLE_DEVICES": str(device)}
    if limit is not None:
        env["ALNAIR_COMPUTE_LIMIT"] = str(limit)
    return subprocess.Popen(
        [sys.executable, str(HERE / "torch_workloads.py"), "matmul", str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def rate_of(proc: subprocess.Popen) -> float:
    out, _ = proc.communicate(timeout=300)
    return float(next(x for x in out.splitlines() if x.startswith("iterations_per_second")).split()[1])


def part_limits() -> None:
    """30/70 on GPU 0 and 50/50 on GPU 1 at once: each process's share of its GPU's solo rate."""
    seconds = 12.0
    solo = {d: rate_of(matmul_share(d, None, seconds)) for d in (0, 1)}
    pairs = {0: (30, 70), 1: (50, 50)}
    procs = {(d, lim, k): matmul_share(d, lim, seconds) for d, limits in pairs.items() for k, lim in enumerate(limits)}
    shares = {key: rate_of(p) / solo[key[0]] for key, p in procs.items()}
    for (d, lim, _), share in sorted(shares.items()):
        check(
            f"GPU {d}: limit {lim}% got {share:.1%} of the solo loop (within 3 points)",
            abs(share * 100 - lim) <= 3,
            f"solo {solo[d]:.1f} it/s",
        )


def part_scrape(exporter: Exporter, count: int) -> None:
    """Median of 100 scrapes with 8 busy processes per GPU."""
    procs = [matmul_share(d, None, 60) for d in range(count) for _ in range(8)]
    try:
        exporter.wait_for(
            lambda m: len(find(m, "alnair_nvml_process_sm_utilization_ratio")) >= 8 * count, "8 processes per GPU", 120
        )
        times = []
        for _ in range(100):
            began = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as r:
                r.read()
            times.append((time.perf_counter() - began) * 1000)
        check(
            f"scrape median with {8 * count} busy processes on {count} GPU(s) < 20 ms (fake-NVML bench: 1.05 ms for "
            "8x64)",
            statistics.median(times) < 20,
            f"median {statistics.median(times):.2f} ms, max {max(times):.2f} ms",
        )
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    parts = sys.argv[1:] or ["nvml", "ddp", "reorder", "two_devices", "limits", "scrape"]
    subprocess.run(["make", "-s", "-C", str(REPO / "intercept")], check=True)
    count = len(gpus())
    print(f"{count} GPU(s): " + ", ".join(f"{g['index']} {g['uuid']}" for g in gpus()), flush=True)
    exporter = Exporter()
    try:
        for part in parts:
            if part in ("reorder", "two_devices", "limits") and count < 2:
                not_run(part, f"needs 2 GPUs, this machine has {count}")
                continue
            {
                "nvml": lambda: part_nvml(exporter),
                "ddp": lambda: part_ddp(exporter, count),
                "reorder": lambda: part_reorder(exporter),
                "two_devices": part_two_devices,
                "limits": part_limits,
                "scrape": lambda: part_scrape(exporter, count),
            }[part]()
    finally:
        exporter.stop()
    print(
        f"{'ALL PASS' if not FAILED else 'FAILED: ' + ', '.join(FAILED)}"
        + (f"; not run: {', '.join(NOT_RUN)}" if NOT_RUN else "")
    )
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
