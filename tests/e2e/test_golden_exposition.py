"""The golden exposition: the name, type and label names of every family the exporter serves, with the C test
writer, a Python writer, the NVML test double and a real redis-server, against tests/e2e/fixtures/exposition.txt
(as node_exporter keeps collector/fixtures/e2e-output.txt), so a rename or a lost label is always a visible diff.
Docs may name only those families.

    ALNAIR_UPDATE_GOLDEN=1 python -m pytest tests/e2e/test_golden_exposition.py   # after an intended change
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import (
    Exporter,
    PythonProgram,
    cuda_record_program,
    end_all,
    fill_cache,
    parse_samples,
    require_binary,
    scrape_text,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
GOLDEN = Path(__file__).parent / "fixtures" / "exposition.txt"
PRODUCT = ("abi", "cli", "collectors", "datacache", "exporter", "intercept", "profiler", "sdk")

# The exporter as `python -m alnair.exporter` runs it, but NVML is the test double (tests/fake_pynvml.py):
# one whole GPU with a process, one in MIG mode with an instance.
EXPORTER_WITH_FAKE_NVML = textwrap.dedent(f"""
    import os, sys, threading, time
    sys.path.insert(0, {str(TESTS)!r})
    from fake_pynvml import FakeGpu, FakeNvml
    import alnair.collectors.nvml as nvml
    pid = int(os.environ["GOLDEN_GPU_PID"])
    gpus = [FakeGpu("GPU-aaaaaaaa-0000-0000-0000-000000000000", memory_used=1 << 30, processes={{pid: 1 << 30}},
                    utilization_samples=[(pid, 1, 50, 20)], throttle=1),
            FakeGpu("GPU-bbbbbbbb-0000-0000-0000-000000000000",
                    mig=[FakeGpu("MIG-11111111-2222-3333-4444-555555555555", name="NVIDIA H200 MIG 1g.18gb")])]
    fake = FakeNvml(gpus)
    nvml.import_pynvml = lambda: fake

    def one_xid():  # once the watcher has registered, the driver reports XID 48 (a double-bit ECC error)
        while not any(s.registered for s in fake.event_sets):
            time.sleep(0.05)
        fake.inject_xid(gpus[0], 48)

    threading.Thread(target=one_xid, daemon=True).start()
    from alnair.exporter import main
    main(sys.argv[1:])
""")

# A training program's python record with every table in use: steps, a custom counter, a phase.
PYTHON_WRITER = textwrap.dedent("""
    import sys, time
    import alnair
    from alnair.intercept.this_process import RECORDER

    class Iterator:
        pass

    iterator = Iterator()
    iterator._alnair_pass = loader_pass = RECORDER.pass_started(iterator, 8, 100, 0)
    now = time.monotonic_ns()
    loader_pass.times.extend((now, now + 1000, now + 2000, now + 3000))
    alnair.counter("images_decoded").inc(3)
    with alnair.phase("preprocess"):
        pass
    print("ready", flush=True)
    sys.stdin.read()
""")


# A cuda writer that measures GPU time, has a compute share and saw its contexts grow (the C test writer sets no device
# flags, share or growth): its GPU time, share and growth series have labels.
GPU_TIME_WRITER = cuda_record_program("""
    record.device_count = 1
    record.devices[0].flags = layout.CUDA_DEVICE_GPU_TIME
    record.devices[0].gpu_time_ns, record.devices_ext[0].busy_ns = 250_000_000, 500_000_000
    record.devices[0].compute_share_percent = 50
    record.devices_memory[0].context_growth_bytes = 98_566_144
""")


def digest(exposition: str) -> list[str]:
    """One line per family, sorted: `name type label,names` (the union over its samples; `-` for none)."""
    types, labels = {}, {}
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name], labels[name] = kind, set()
    for key in parse_samples(exposition):
        sample, _, label_text = key.partition("{")
        family = next(
            f
            for f in (sample, *(sample.removesuffix(s) for s in ("_bucket", "_sum", "_count", "_created")))
            if f in types
        )
        labels[family].update(re.findall(r'(\w+)="', label_text))
    return sorted(f"{name} {types[name]} {','.join(sorted(labels[name])) or '-'}" for name in types)


@pytest.fixture
def golden_scrape(tmp_path, shm_dir, start_writer, start_redis) -> str:
    redis = start_redis()
    fill_cache(redis.url, tmp_path, [("images", "job-1", range(4))], 100)
    start_writer(
        "--devices",
        "2",
        "--set",
        "memory_limit_bytes=1073741824",
        "--compute-limit",
        "30",
        "--set",
        "compute_period_ns=100000000",
        "--set",
        "compute_quota_ns=30000000",
        "--set",
        "first_allocation_ns=400000000",
        "--set",
        "first_launch_ns=500000000",
        "--set",
        "last_launch_time_ns=1764547200000000000",
        "--set",
        "context_bytes=524288000",
        "--set",
        "pool_reserved_bytes=33554432",
        "--set",
        "pool_used_bytes=16777216",
        "--set",
        "charged_bytes=33554432",
        "--kernel",
        "0:void gemm<float>(float*)=900",
        "--kernel",
        "0:=60",
    )
    trainer = PythonProgram(PYTHON_WRITER, shm_dir)
    gpu_time = PythonProgram(GPU_TIME_WRITER, shm_dir)
    launcher = tmp_path / "exporter_with_fake_nvml.py"
    launcher.write_text(EXPORTER_WITH_FAKE_NVML)
    exporter = Exporter(
        [
            "--collector.cache",
            f"--collector.cache.redis-url={redis.url}",
            f"--shm.dir={shm_dir}",
            "--collector.nvml.interval=200ms",
            "--collector.cache.interval=200ms",
            "--node.name=golden",
        ],
        tmp_path / "exporter.log",
        env={"GOLDEN_GPU_PID": str(trainer.pid)},
        python=sys.executable,
        script=str(launcher),
    )
    try:
        # Writers the exporter sees alive, then an exited one and a crashed one: their last records linger.
        leaving = PythonProgram(PYTHON_WRITER.replace("sys.stdin.read()", "sys.stdin.readline()"), shm_dir)
        crashing = start_writer("--devices", "1")
        wait_until(
            lambda: all(f'pid="{pid}"' in scrape_text(exporter.url) for pid in (leaving.pid, crashing.pid)), timeout=60
        )
        leaving.finish()
        crashing.kill()
        collectors = ("cache", "cuda", "host", "nvml", "python")
        return wait_until(
            lambda: (
                (text := scrape_text(exporter.url))
                and all(
                    parse_samples(text).get(f'alnair_exporter_collector_success{{collector="{c}"}}') == 1.0
                    for c in collectors
                )
                and "alnair_python_phase_seconds_total{" in text
                and "alnair_cache_dataset_hits_total{" in text
                and "alnair_python_process_exited_timestamp_seconds{" in text
                and "alnair_cuda_process_exited_timestamp_seconds{" in text
                and "alnair_cuda_gpu_time_seconds_total{" in text
                and 'alnair_nvml_xid_errors_by_code_total{gpu="0"' in text
                # GPM: from the nvml collector's second sample on
                and "alnair_nvml_sm_active_ratio{" in text
                and text
            ),
            timeout=60,
        )
    finally:
        end_all([exporter.proc])
        trainer.finish()
        gpu_time.finish()


def test_every_family_keeps_its_name_type_and_labels(golden_scrape):
    served = digest(golden_scrape)
    if os.environ.get("ALNAIR_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text("\n".join(served) + "\n")
    golden = GOLDEN.read_text().splitlines()
    diff = "\n".join(difflib.unified_diff(golden, served, "fixtures/exposition.txt", "served", lineterm=""))
    assert served == golden, f"the exposition changed (ALNAIR_UPDATE_GOLDEN=1 to accept it):\n{diff}"


def test_the_golden_scrape_is_promtool_clean(golden_scrape):
    check = subprocess.run(
        [require_binary("promtool"), "check", "metrics"], input=golden_scrape, capture_output=True, text=True
    )
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


def served_names() -> set[str]:
    """Every sample name the golden families own, as docs may write them."""
    names = set()
    for line in GOLDEN.read_text().splitlines():
        name, kind, _ = line.split()
        names.add(name)
        suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ()}.get(kind, ())
        names.update(name + s for s in suffixes)
        if kind == "counter":
            names.add(name.removesuffix("_total"))  # "alnair_x_total" is often said as the family alnair_x
    return names


def documents() -> dict[str, str]:
    """The README, docs/ and every docstring of the product code, by where they are."""
    texts = {
        str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    }
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
                    texts[f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}"] = ast.get_docstring(node)
    return texts


# What the C header and the package names, which look like metric names but are not.
NOT_METRICS = re.compile(
    r"alnair_(shm|dataset\b|cuda_record|cuda_device|cuda_kernels?\b|python_record|python_counter|python_phase|share_|"
    r"gpu_time_|intercept|example|segment|fork|on_fork|configure|[a-z]+_t\b)"
)


def test_docs_name_only_metrics_the_exporter_serves():
    served = served_names()
    # followed by *: a prefix (alnair_cuda_*); after a colon: a recorded name
    cited = {
        (where, name)
        for where, text in documents().items()
        for name in re.findall(
            r"(?<!:)\b(?:alnair_|process_(?:cpu|open|max|resident|virtual|start))[a-z0-9_]*[a-z0-9]\b(?!_?\*)", text
        )
        if not NOT_METRICS.match(name)
    }
    unknown = sorted(f"{where}: {name}" for where, name in cited if name not in served)
    assert unknown == [], "documents cite metrics the exporter does not serve:\n" + "\n".join(unknown)


def test_docs_link_and_point_only_inside_the_repository():
    outside = []
    for where, text in documents().items():
        base = (ROOT / where.split(":")[0]).parent
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" not in target and not (base / target).resolve().is_relative_to(ROOT):
                outside.append(f"{where}: {target}")
            elif "://" not in target and not (base / target).exists():
                outside.append(f"{where}: {target} (missing)")
        outside += [f"{where}: {m}" for m in re.findall(r"\.\./shared\S*|/work/\S+", text)]
    assert outside == [], "\n".join(outside)
