"""The profile at exit on a real GPU, beside torch.profiler (docs/profile.md).

    python3 tests/gpu/check_profile.py          (repository root, GPU machine; builds the intercept; no install)

A PyTorch training loop (ResNet-18 on 64x64 images, batch 128, a DataLoader with 2 workers and pinned memory, each
batch moved with non_blocking=True) runs bare, under alnair-run --profile and inside torch.profiler (CPU and CUDA
activities over the whole run), in turn, ROUNDS times. It prints each variant's median throughput, and checks the
profile against the program (steps, samples, host-to-device bytes: the model's and the batches') and against
torch.profiler's count of the kernels of the same loop. Results also go to $OUT/profile_check.json when OUT is set.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from check_kernel_names import profiler_count  # a row's count, for names cut to the record's 255 bytes

ROOT = Path(__file__).resolve().parents[2]
ROUNDS, WARMUP, STEPS, BATCH, WORKERS = int(os.environ.get("ROUNDS", 3)), 20, int(os.environ.get("STEPS", 300)), 128, 2
VARIANTS = ("bare", "alnair-run --profile", "torch.profiler")


# ---- the child: the training loop --------------------------------------------------------------------------


def child(profiled: bool) -> None:
    import contextlib

    import torch
    import torchvision
    from torch.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __len__(self):
            return (WARMUP + STEPS) * BATCH

        def __getitem__(self, i):
            return torch.randn(3, 64, 64), i % 10

    model = torchvision.models.resnet18(num_classes=10).cuda()
    model_bytes = sum(t.nbytes for t in model.state_dict().values())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    moved = 0
    with torch.profiler.profile(activities=activities) if profiled else contextlib.nullcontext() as prof:
        loader = DataLoader(Images(), batch_size=BATCH, num_workers=WORKERS, pin_memory=True)
        for step, (x, y) in enumerate(loader):
            if step == WARMUP:
                torch.cuda.synchronize()
                started = time.perf_counter()
            x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
            moved += x.nbytes + y.nbytes
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    result = {"steps_per_second": STEPS / seconds, "h2d_bytes": model_bytes + moved, "steps": WARMUP + STEPS}
    if profiled:
        started = time.perf_counter()
        # GPU events that are kernels: not copies or memsets, nor the GPU side of a record_function range (the
        # optimizer's step is one, once a step), whose name is also a CPU event's
        cpu_names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU}
        kernels = [
            e
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset"))
            and not getattr(e, "is_user_annotation", False)
            and e.name not in cpu_names
        ]
        by_name = collections.Counter(e.name for e in kernels)
        result.update(
            kernels=len(kernels),
            kernel_ns=int(sum(e.device_time for e in kernels) * 1000),
            top_kernels=by_name.most_common(5),
            by_name=dict(by_name),
            processing_seconds=time.perf_counter() - started,
        )
        if os.environ.get("LAUNCH_PATHS"):
            result["launch_paths"], traced = launch_paths(prof)
            # the profiler's GPU events that its trace has no kernel for: what it counts that no launch made
            result["not_in_trace"] = {n[:120]: c - traced[n] for n, c in by_name.items() if c > traced[n]}
    print("result " + json.dumps(result), flush=True)


def launch_paths(prof) -> tuple[dict[str, int], dict[str, int]]:
    """The profiler's kernels (Memcpy and Memset left out) by the runtime or driver call that launched them, from its
    trace's correlation ids, and the trace's count of each kernel name (what its events() should match)."""

    path = Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    calls = {
        e["args"]["correlation"]: e["name"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    pairs = collections.Counter(
        (calls.get(e.get("args", {}).get("correlation"), "?"), e["name"])
        for e in events
        if e.get("cat") == "kernel" and not e["name"].startswith(("Memcpy", "Memset"))
    )
    by_call = collections.Counter()
    traced = collections.Counter()
    for (call, name), count in pairs.items():
        by_call[call] += count
        traced[name] += count
    # Every kernel of the calls that launched few (cuBLAS's driver-API launches, say), by name.
    rare = {
        f"{call} | {name[:80]}": count
        for (call, name), count in pairs.items()
        if by_call[call] < 0.05 * sum(pairs.values())
    }
    return {**by_call, **rare}, traced


# ---- the parent: the runs and the checks ---------------------------------------------------------------------


def shim() -> str:
    """The `alnair` package from this checkout without installing it: the layout pyproject.toml maps."""
    root = Path(tempfile.mkdtemp(prefix="alnair-shim-"))
    (root / "alnair").mkdir()
    for part in ("abi", "intercept"):
        (root / "alnair" / part).symlink_to(ROOT / part)
    for module in (ROOT / "sdk").glob("*.py"):
        (root / "alnair" / module.name).symlink_to(module)
    return str(root)


def run(variant: str, profile: Path, env: dict[str, str]) -> dict:
    command = [
        sys.executable,
        __file__,
        "child",
        "plain" if variant in ("bare", "alnair-run --profile") else "profiler",
    ]
    if variant in ("alnair-run --profile", "both"):
        command = [sys.executable, "-m", "alnair.intercept.launcher", "--profile", str(profile), *command]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("result ")]
    return {**json.loads(line.split(" ", 1)[1]), "summary": out.stderr.strip().splitlines()[-6:]}


def setup() -> tuple[dict[str, str], Path]:
    """The intercept built; the children's environment and the profile's path."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "intercept")], check=True)
    shm = tempfile.mkdtemp(prefix="alnair-shm-")
    env = {**os.environ, "PYTHONPATH": shim(), "ALNAIR_SHM_DIR": shm, "PYTHONUNBUFFERED": "1"}
    return env, Path(shm).parent / "alnair-profile.json"


def main() -> int:
    env, profile_path = setup()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for round_ in range(ROUNDS):
        for variant in VARIANTS:
            runs[variant].append(run(variant, profile_path, env))
            print(f"round {round_ + 1}, {variant}: {runs[variant][-1]['steps_per_second']:.1f} steps/s", flush=True)
    bare = statistics.median(r["steps_per_second"] for r in runs["bare"])
    print(f"{'variant':<22} {'steps/s (median of ' + str(ROUNDS) + ')':>24} {'vs bare':>8}")
    for variant, results in runs.items():
        median = statistics.median(r["steps_per_second"] for r in results)
        print(f"{variant:<22} {median:>24.1f} {median / bare:>8.3f}")
    profile = json.loads(profile_path.read_text())  # the last round's
    profiled, alnair = runs["torch.profiler"][-1], runs["alnair-run --profile"][-1]
    print("\n".join(alnair["summary"]))
    (device,) = profile["devices"]
    # One run under both, so that the launches are compared within one process (runs apart may differ)
    both = run("both", profile_path, {**env, "ALNAIR_KERNEL_NAMES_TOP": "32"})
    (both_device,) = json.loads(profile_path.read_text())["devices"]
    rows = {k["name"]: k["launches"] for k in both_device.get("kernels", []) if k["name"] != "(other)"}
    rows_differ = {
        name: (n, profiler_count(both["by_name"], name))
        for name, n in rows.items()
        if n != profiler_count(both["by_name"], name)
    }
    checks = {
        "steps_and_samples": profile["training"]["steps"] == alnair["steps"]
        and profile["training"]["samples"] == alnair["steps"] * BATCH,
        "h2d_bytes_are_the_models_and_the_batches": device["copies"]["host_to_device"]["bytes"] == alnair["h2d_bytes"],
        "launches_equal_torch_profilers_kernels_in_one_run": both_device["kernel_launches"] == both["kernels"],
        "named_rows_equal_torch_profilers_counts_in_one_run": not rows_differ,
    }
    numbers = {
        "launches": device["kernel_launches"],
        "profiler_kernels": profiled["kernels"],
        "one_run_launches": both_device["kernel_launches"],
        "one_run_profiler_kernels": both["kernels"],
        "one_run_rows_differing": rows_differ,
        "one_run_profiler_names_not_in_rows_launched_at_most": sorted(
            (
                (n, name[:120])
                for name, n in both["by_name"].items()
                if name.encode()[:255].decode(errors="ignore") not in rows
            ),
            reverse=True,
        )[:12],
        "h2d_bytes": device["copies"]["host_to_device"]["bytes"],
        "program_h2d_bytes": alnair["h2d_bytes"],
        "gpu_time_ns": device["gpu_time_ns"],
        "profiler_kernel_ns": profiled["kernel_ns"],
        "profiler_processing_seconds": profiled["processing_seconds"],
        "wall_ns": profile["wall_ns"],
        "peak_bytes": device["peak_bytes"],
        "data_stall": profile["training"]["data_stall_fraction"],
        "top_kernels": device.get("kernels", [])[:5],
        "profiler_top_kernels": profiled["top_kernels"],
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    print(json.dumps(numbers))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "profile_check.json").write_text(
            json.dumps({"checks": checks, "numbers": numbers, "runs": runs, "profile": profile}, indent=1)
        )
    return 0 if all(checks.values()) else 1


def paths() -> int:
    """`check_profile.py paths` (STEPS=20 or so): one run under both, its launches against the profiler's kernels and
    those by the call that launched them."""
    env, profile_path = setup()
    both = run("both", profile_path, {**env, "LAUNCH_PATHS": "1"})
    (device,) = json.loads(profile_path.read_text())["devices"]
    print(
        json.dumps(
            {
                "steps": both["steps"],
                "launches": device["kernel_launches"],
                "profiler_kernels": both["kernels"],
                "graph_launches": device["graph_launches"],
                "by_call": both["launch_paths"],
                "not_in_trace": both["not_in_trace"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2] == "profiler")
    elif sys.argv[1:2] == ["paths"]:
        sys.exit(paths())
    else:
        sys.exit(main())
