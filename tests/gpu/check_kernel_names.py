"""Kernels by name on a real GPU (issue 37, what it must show): the intercept's named kernel rows for a PyTorch
training loop against torch.profiler's kernel names and counts over the same steps.

    python3 tests/gpu/check_kernel_names.py [--loops resnet18:64,transformer:16] [--steps 30]

(on the device machine `export LIBCC=gcc` first: it has no ziglang to build the intercept with)

A child (the loop of tests/gpu/training_loops.py's models, bf16, `loss.item()` every step) warms up, then runs
--steps steps under torch.profiler and prints each kernel's launches as the profiler saw them. The parent reads the
child's kernel table before and after those steps: each named row's new launches must equal the profiler's count
for that name (a name cut to 255 bytes: the profiler's names that begin with it), and the named rows must be the
most launched kernels. Prints each check with PASS/FAIL, writes $OUT/kernel_names.json, exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from training_loops import CHILD, loops, new_shm_dir, prepare, save, start

PROFILED = (
    CHILD.split('print("ready"')[0]
    + r"""
print("ready", flush=True)
sys.stdin.readline()
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(profile_steps):
        step()
    torch.cuda.synchronize()
counts = {}
for e in prof.events():
    if e.device_type.name == "CUDA" and not e.name.startswith(("Memcpy", "Memset")):
        counts[e.name] = counts.get(e.name, 0) + 1
print("kernels", json.dumps(counts), flush=True)
sys.stdin.readline()
"""
)
NAME_BYTES = 255  # the record's bound (ALNAIR_CUDA_KERNEL_NAME_LEN - 1)
results: list[dict] = []
tables: list[dict] = []  # each loop's rows: since the start, over the steps, the profiler's


def check(name: str, ok: bool, detail: str) -> None:
    results.append({"check": name, "ok": ok, "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def kernel_rows(shm: str, pid: int) -> tuple[dict[str, int], int]:
    """The child's named rows on device 0 (name -> launches) and the device's kernel launches."""
    from alnair.abi import layout
    from alnair.abi.records import OTHER_KERNELS, kernel_key
    from alnair.abi.segments import SegmentDirectory

    for parsed in SegmentDirectory(shm, layout.KIND_CUDA, reclaim=False).read():
        if parsed.segment.holder_pid == pid:
            keys = [(kernel_key(k), k.launches) for k in parsed.record.kernels or ()]
            (device,) = [d for d in parsed.record.devices if d.device_index == 0]
            return {name: n for (gpu, name), n in keys if gpu == 0 and name != OTHER_KERNELS}, device.kernel_launches
    return {}, 0


def profiler_count(profiled: dict[str, int], name: str) -> int:
    """The profiler's launches of `name`; of every name it begins with, when it was cut to the record's bound."""
    if len(name.encode()) < NAME_BYTES:
        return profiled.get(name, 0)
    return sum(n for full, n in profiled.items() if full.encode().startswith(name.encode()))


def named(launched: dict[str, int], full: str) -> bool:
    """Whether a named row stands for the profiler's `full` name: the same, or it cut to the record's bound."""
    return full in launched or full.encode()[:NAME_BYTES].decode(errors="ignore") in launched


def compare(item: str, before: tuple[dict[str, int], int], after: tuple[dict[str, int], int], profiled: dict[str, int]):
    (rows_before, total_before), (rows_after, total_after) = before, after
    launches, kernels = total_after - total_before, sum(profiled.values())
    check(
        f"{item}: the device's kernel launches over the profiled steps equal torch.profiler's kernels",
        launches == kernels,
        f"ours {launches}, the profiler's {kernels}",
    )
    # A row that joined during the steps brings the launches it made before (docs/intercept.md#kernels-by-name)
    stayed = {name: rows_after[name] - rows_before[name] for name in rows_after if name in rows_before}
    joined = {name: rows_after[name] for name in rows_after if name not in rows_before}
    differ = {
        name: (n, profiler_count(profiled, name))
        for name, n in stayed.items()
        if n and n != profiler_count(profiled, name)
    }
    differ |= {
        name: (n, profiler_count(profiled, name)) for name, n in joined.items() if n < profiler_count(profiled, name)
    }
    check(
        f"{item}: each named kernel's launches over the profiled steps equal torch.profiler's",
        not differ,
        f"{len([n for n in stayed.values() if n])} rows named throughout, {len(joined)} joined (counted from the "
        f"start); differing (ours, profiler's): {differ}",
    )
    # Rows are ranked by launches since the start (docs/intercept.md#kernels-by-name), and a named row gives way
    # only to an eighth more: a kernel left unnamed must not have launched more over the steps alone than that.
    launched = {**stayed, **{name: profiler_count(profiled, name) for name in joined}}
    weakest = min((rows_after[name] for name in launched if launched[name]), default=0)
    missing = {name: n for name, n in profiled.items() if n > weakest * 9 / 8 and not named(launched, name)}
    check(
        f"{item}: no kernel left unnamed launched more over the steps than the weakest named one since the start",
        not missing,
        f"named rows cover {sum(launched.values())} of the profiler's {kernels} launches; weakest named row "
        f"{weakest} since the start; unnamed above it: {missing}",
    )


def run(item: str, model: str, batch: int, steps: int, top: int) -> None:
    shm = new_shm_dir()
    env = {"ALNAIR_KERNEL_NAMES_TOP": str(top)}
    child = start(model, batch, 0, shm, env=env, profile_steps=steps, code=PROFILED)
    assert child.stdout.readline().split() == ["ready"]
    time.sleep(0.1)  # a publish after the warm-up
    before = kernel_rows(shm, child.pid)
    child.stdin.write("go\n")
    child.stdin.flush()
    line = child.stdout.readline().split(maxsplit=1)
    assert line[0] == "kernels", line
    time.sleep(0.1)  # a publish after the profiled steps
    after = kernel_rows(shm, child.pid)
    child.stdin.close()
    child.wait(120)
    profiled = json.loads(line[1])
    compare(item, before, after, profiled)
    rows = {
        name: [n, after[0][name] - before[0].get(name, 0), profiler_count(profiled, name)]
        for name, n in after[0].items()
    }
    tables.append({"loop": item, "rows": rows})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", default="resnet18:64,transformer:16")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--top", type=int, default=20, help="ALNAIR_KERNEL_NAMES_TOP")
    args = parser.parse_args()
    prepare()
    for item, model, batch in loops(args.loops):
        run(item, model, batch, args.steps, args.top)
    save({"checks": results, "tables": tables}, "kernel_names.json")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
