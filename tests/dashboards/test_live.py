"""Every query of every dashboard panel, and every rule, against a real Prometheus (Debian's, scraping every second
and evaluating the rules files every second) that scrapes a live demo stack: the exporter with the NVML test
double (two GPUs, the UUIDs the C writer's devices carry, an XID error), the C test writer under memory and
compute limits, a PyTorch training loop under the Python intercept, a real Redis with dataset-cache traffic, and a
real Redis Cluster (3 primaries, 3 replicas: tests/support.py's, one per session) holding a cached dataset, which
the same cache collector reads as its second target (--collector.cache.redis-url is repeatable).
Grafana's variables are resolved as Grafana would, from their own queries against that Prometheus; each query
must return data, and a panel that returns none fails with its dashboard, title and query. So must every query of
dcgm-exporter's own dashboard (tests/dashboards/dcgm, vendored from its repository), through dcgm-names.yaml."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from alnair.abi import cache_keys as keys
from dashboard_support import DASHBOARD_FILES, ROOT, RULE_FILES, load, targets
from dashgen import dcgm_names
from support import (
    Exporter,
    PythonProgram,
    RedisServer,
    Writer,
    end_all,
    fill_cache,
    free_port,
    require_binary,
    wait_until,
)

RATE_INTERVAL = "15s"  # Grafana's $__rate_interval is at least 4 scrape intervals; 15 one-second scrapes is ample
SETTLE = 60  # seconds the slowest query may take to have data: two scrapes of a rate, one evaluation of a rule
TESTS = ROOT / "tests"
DCGM_DASHBOARD = TESTS / "dashboards" / "dcgm" / "dcgm-exporter-dashboard.json"

# The double's GPM rates in NVML's units (percent, MiB/s), by the DCGM name recorded from each through the nvml
# collector's GPM series (issue 37's H200 figures where it has them); those names serve them as ratios and bytes/s.
GPM_RATES = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("GRAPHICS_UTIL", 96.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("SM_UTIL", 94.7),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("SM_OCCUPANCY", 14.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("ANY_TENSOR_UTIL", 91.9),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": ("FP64_UTIL", 0.5),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": ("FP32_UTIL", 3.0),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": ("FP16_UTIL", 1.5),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("DRAM_BW_UTIL", 17.3),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("PCIE_TX_PER_SEC", 1000.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("PCIE_RX_PER_SEC", 56343.0),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("NVLINK_TOTAL_TX_PER_SEC", 20000.0),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("NVLINK_TOTAL_RX_PER_SEC", 25000.0),
}

# The C writer gives device d the UUID bytes d*16 .. d*16+15 (intercept/shm_test_writer.c), spelt as NVML does.
UUIDS = [
    f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    for h in (bytes(range(d * 16, d * 16 + 16)).hex() for d in (0, 1))
]

EXPORTER_WITH_FAKE_NVML = textwrap.dedent(f"""
    import os, sys, threading, time
    sys.path.insert(0, {str(TESTS)!r})
    import pynvml
    from fake_pynvml import FakeGpu, FakeNvml
    import alnair.collectors.nvml as nvml
    pids = [int(p) for p in os.environ["DEMO_GPU_PIDS"].split(",")]
    gpm_rates = {{getattr(pynvml, "NVML_GPM_METRIC_" + metric): rate for metric, rate in {list(GPM_RATES.values())!r}}}
    gpus = [FakeGpu(uuid, memory_used=(4 + i) << 30, utilization=(60, 25), temperature=55 + i,
                    pcie_kb_per_s=(800, 1600), processes={{pid: 1 << 30 for pid in pids}},
                    utilization_samples=[(pid, 1, 30, 10) for pid in pids], gpm_rates=gpm_rates)
            for i, uuid in enumerate({UUIDS!r})]
    fake = FakeNvml(gpus)
    nvml.import_pynvml = lambda: fake

    def xid_once_watched():  # the driver reports XID 79 on GPU 0 once the exporter watches for it
        while not any(s.registered for s in fake.event_sets):
            time.sleep(0.05)
        fake.inject_xid(gpus[0], 79)

    threading.Thread(target=xid_once_watched, daemon=True).start()
    from alnair.exporter import main
    main(sys.argv[1:])
""")

# A training loop that never ends until stdin closes: decoding in a phase, a custom counter, a little data stall.
TRAINER = textwrap.dedent("""
    import sys, threading, time
    import alnair, alnair.auto
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

    def collate(items):
        with alnair.phase("decode"):
            time.sleep(0.005)
        alnair.counter("images_decoded").inc(len(items))
        return torch.utils.data.default_collate(items)

    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ready = False
    while not stop.is_set():
        for x, y in DataLoader(data, batch_size=8, collate_fn=collate):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            time.sleep(0.01)
            if not ready:
                print("ready", flush=True)
                ready = True
""")

# A job reading its dataset through the cache every 200 ms (hits, bytes, fetch latencies keep coming).
CACHE_TRAFFIC = textwrap.dedent("""
    import os, sys, threading
    from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    dataset = CachedDataset(os.environ["DEMO_REDIS"], "images", DirectoryOrigin(os.environ["DEMO_ORIGIN"]),
                            job="demo-job")
    print("ready", flush=True)
    while not stop.wait(0.2):
        list(CacheLoader(dataset, 4))
""")


# A cuda writer whose memory limit charges its contexts (ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT=on), on the C writer's
# GPU 0 (its UUID bytes 0..15), published as the intercept lays the record out: 256 MiB allocated, 512 MiB of
# contexts, all of it charged against a 1 GiB limit.
CONTEXT_CHARGED = textwrap.dedent("""
    import ctypes, sys
    from alnair.abi import layout
    from alnair.intercept.segment_writer import WriterSegment

    record = layout.CudaRecord(device_count=1, max_devices=layout.CUDA_MAX_DEVICES)
    device, memory = record.devices[0], record.devices_memory[0]
    device.uuid[:] = list(range(16))
    device.bytes_in_use, device.memory_limit_bytes = 256 << 20, 1 << 30
    memory.context_bytes, memory.charged_bytes, memory.flags = 512 << 20, 768 << 20, layout.CUDA_LIMIT_INCLUDES_CONTEXT
    segment = WriterSegment(layout.KIND_CUDA, ctypes.sizeof(layout.CudaRecord))
    segment.publish(bytes(record))
    print("ready", flush=True)
    sys.stdin.read()
    segment.close()
""")


# A process under a 50% compute share getting a quarter of GPU 0's time (busy half of it, the GPU shared), on the C
# writer's GPU 0 (its UUID bytes 0..15), publishing GPU time as the intercept does every 100 ms. The times follow the
# clock, so its pod's share of the GPU is 0.25 however fast the machine is.
GPU_TIME = textwrap.dedent("""
    import ctypes, sys, threading, time
    from alnair.abi import layout
    from alnair.intercept.segment_writer import WriterSegment

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    record = layout.CudaRecord(device_count=1, max_devices=layout.CUDA_MAX_DEVICES)
    device = record.devices[0]
    device.uuid[:] = list(range(16))
    device.flags, device.compute_share_percent = layout.CUDA_DEVICE_GPU_TIME, 50
    segment = WriterSegment(layout.KIND_CUDA, ctypes.sizeof(layout.CudaRecord))
    start = time.monotonic_ns()
    print("ready", flush=True)
    while True:
        elapsed = time.monotonic_ns() - start
        device.gpu_time_ns, record.devices_ext[0].busy_ns = elapsed // 4, elapsed // 2
        segment.publish(bytes(record))
        if stop.wait(0.1):
            break
    segment.close()
""")


@dataclass
class Stack:
    prometheus: str
    instance: str
    started: float  # Unix time before any writer started
    pids: dict[str, int]  # the cuda writers: "limited" (idle), "starting", "active", "context charged", "gpu time"
    active_launch_ns: int  # the "active" writer's latest launch, as it publishes it


# The limited writer's memory, device i getting V + i: 768 MiB allocated, pools holding 192 MiB of which 64 handed out
# (128 MiB cached), 512 MiB of contexts, charged allocations + cache (the limit does not include the contexts).
MEMORY = {
    "bytes_in_use": 805306368,
    "pool_reserved_bytes": 201326592,
    "pool_used_bytes": 67108864,
    "context_bytes": 536870912,
    "charged_bytes": 939524096,
    "memory_limit_bytes": 1073741824,
}


def prometheus_config(path: Path, target: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in RULE_FILES],
                "scrape_configs": [{"job_name": "alnair", "static_configs": [{"targets": [target]}]}],
            }
        )
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory, test_writer_binary, redis_cluster):
    """The demo stack, once for the module; everything it started is ended afterwards (the cluster is the session's:
    it is left empty, without the maxmemory set here)."""
    prometheus = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("live")
    shm = tmp / "shm"
    shm.mkdir()
    (tmp / "redis").mkdir()
    redis = RedisServer(tmp / "redis")
    # The dataset cache's space policy on, with a namespace quota: the Space row's capacity and quota lines
    redis.client().hset(keys.POLICY, mapping={keys.CAPACITY_BYTES: 64 << 20, keys.NAMESPACE_QUOTA_BYTES: 32 << 20})
    children, writers = [], []
    started = time.time()
    try:
        fill_cache(redis.url, tmp, [("images", "demo-job", range(12)), ("thumbnails", "demo-job", range(6, 18))], 4096)
        redis_cluster.wait_healthy()
        redis_cluster.flush()
        for node in redis_cluster.servers:  # a maximum, so the nodes' memory has a share of it to show
            node.client().config_set("maxmemory", 256 << 20)
        (tmp / "cluster").mkdir()
        fill_cache(redis_cluster.url, tmp / "cluster", [("shards", "cluster-job", range(24))], 4096)
        writers.append(
            Writer(
                test_writer_binary,
                shm,
                [
                    "--devices",
                    "2",
                    "--period-ms",
                    "10",
                    "--compute-limit",
                    "30",
                    "--set",
                    "compute_period_ns=100000000",
                    "--set",
                    "compute_quota_ns=30000000",
                    *(a for f, v in MEMORY.items() for a in ("--set", f"{f}={v}")),
                    "--set",
                    "allocations=40",
                    "--set",
                    "limit_denied_allocations=2",
                    "--set",
                    "throttled_ns=5000000000",
                    "--set",
                    "host_to_device.bytes=1048576",
                    "--set",
                    "host_to_device.copies=4",
                    "--set",
                    "device_to_host.sync_ns=2000000",
                    "--set",
                    "first_allocation_ns=400000000",
                    "--set",
                    "first_launch_ns=500000000",
                    "--set",
                    "last_launch_time_ns=1764547200000000000",
                    "--kernel",
                    "0:void gemm<float>(float*, int)=900",
                    "--kernel",
                    "1:relu_kernel=40",
                    "--kernel",
                    "0:=60",
                ],
            )
        )
        writers.append(PythonProgram(TRAINER, shm))
        # One GPU each: a process that has launched nothing yet, and one whose latest launch is now.
        active_launch_ns = time.time_ns()
        starting = Writer(
            test_writer_binary, shm, ["--devices", "1", "--period-ms", "10", "--set", "first_allocation_ns=300000000"]
        )
        active = Writer(
            test_writer_binary,
            shm,
            [
                "--devices",
                "1",
                "--period-ms",
                "10",
                "--set",
                "first_launch_ns=600000000",
                "--set",
                f"last_launch_time_ns={active_launch_ns}",
            ],
        )
        context_charged, gpu_time = PythonProgram(CONTEXT_CHARGED, shm), PythonProgram(GPU_TIME, shm)
        writers += [starting, active, context_charged, gpu_time]
        writers.append(
            PythonProgram(CACHE_TRAFFIC, shm, env={"DEMO_REDIS": redis.url, "DEMO_ORIGIN": str(tmp / "images")})
        )
        launcher = tmp / "exporter_with_fake_nvml.py"
        launcher.write_text(EXPORTER_WITH_FAKE_NVML)
        exporter = Exporter(
            [
                f"--shm.dir={shm}",
                "--node.name=demo-node",
                "--collector.cache",
                f"--collector.cache.redis-url={redis.url}",
                f"--collector.cache.redis-url={redis_cluster.url}",
                "--collector.cuda.interval=200ms",
                "--collector.python.interval=200ms",
                "--collector.nvml.interval=500ms",
                "--collector.cache.interval=500ms",
                "--collector.host.interval=500ms",
            ],
            tmp / "exporter.log",
            env={"DEMO_GPU_PIDS": f"{writers[0].pid},{writers[1].pid}"},
            python=sys.executable,
            script=str(launcher),
        )
        children.append(exporter.proc)
        prometheus_config(tmp / "prometheus.yml", f"127.0.0.1:{exporter.port}")
        port = free_port()
        with open(tmp / "prometheus.log", "w") as log:
            children.append(
                subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={tmp / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=log,
                    stderr=log,
                )
            )
        prom = f"http://127.0.0.1:{port}"
        wait_until(lambda: query(prom, 'up{job="alnair"} == 1'), timeout=60)
        yield Stack(
            prom,
            f"127.0.0.1:{exporter.port}",
            started,
            {
                "limited": writers[0].pid,
                "starting": starting.pid,
                "active": active.pid,
                "context charged": context_charged.pid,
                "gpu time": gpu_time.pid,
            },
            active_launch_ns,
        )
    finally:
        for child in children:
            child.terminate()
        end_all(children)
        for writer in writers:
            if isinstance(writer, Writer):
                writer.stop()
            else:
                writer.finish()
        redis.kill()
        redis_cluster.wait_healthy()
        redis_cluster.flush()
        for node in redis_cluster.servers:
            node.client().config_set("maxmemory", 0)


def api(prom: str, path: str, **params) -> dict:
    try:
        response = requests.get(f"{prom}/api/v1/{path}", params=params, timeout=10)
    except requests.ConnectionError:
        return {}  # still starting
    return response.json()["data"] if response.ok else {}


def query(prom: str, promql: str) -> list[dict]:
    return api(prom, "query", query=promql).get("result", [])


def regex_of(values: list[str]) -> str:
    """Several values as Grafana puts them in a PromQL regex: escaped, joined, inside a string literal."""
    return "|".join(re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\1", v) for v in values).replace("\\", "\\\\")


def interpolate(text: str, values: dict[str, str]) -> str:
    text = text.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], text)


def variable_values(prom: str, board: dict) -> dict[str, str]:
    """Each query variable's options, from its own label_values() against Prometheus, in the order Grafana
    resolves them (a variable may name those before it), as the regex of them all (All)."""
    values: dict[str, str] = {}
    for v in board["templating"]["list"]:
        if v["type"] != "query":
            continue
        selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", interpolate(v["query"], values)).groups()
        found = sorted({s[label] for s in api(prom, "series", **{"match[]": selector}) if label in s})
        assert found, f"{board['title']}: variable {v['name']} has no options ({v['query']})"
        values[v["name"]] = regex_of(found)
    return values


def empty_after_settling(prom: str, queries: dict[str, str]) -> list[str]:
    """The descriptions of the queries still without data once they had SETTLE seconds to get some."""
    pending = dict(queries)

    def settled() -> bool:
        for where, promql in list(pending.items()):
            if query(prom, promql):
                del pending[where]
        return not pending

    try:
        wait_until(settled, timeout=SETTLE, interval=0.5)
    except AssertionError:
        pass
    return [f"{where}: {promql}" for where, promql in pending.items()]


def test_every_variable_of_every_dashboard_has_options(stack):
    for path in DASHBOARD_FILES:
        values = variable_values(stack.prometheus, load(path))
        assert values.get("instance", regex_of([stack.instance])) == regex_of([stack.instance])  # node demo-node's


def test_every_panel_query_returns_data(stack):
    queries = {}
    for path in DASHBOARD_FILES:
        board = load(path)
        values = variable_values(stack.prometheus, board)
        for panel, target in targets(board):
            queries[f"{board['title']} / {panel['title']} ({target['refId']})"] = interpolate(target["expr"], values)
    assert empty_after_settling(stack.prometheus, queries) == []


def rules(kind: str) -> list[dict]:
    return [
        r for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"] if kind in r
    ]


def test_every_recorded_series_and_its_expression_return_data(stack):
    recorded = {f"recorded {r['record']}": r["record"] for r in rules("record")}
    recorded |= {f"expression of {r['record']}": r["expr"] for r in rules("record")}
    assert empty_after_settling(stack.prometheus, recorded) == []


def test_every_rule_evaluates_without_error(stack):
    """Prometheus's own verdict on each rule: a join that matched many-to-many, for one, shows here."""

    def evaluated() -> list[dict]:
        loaded = [r for g in api(stack.prometheus, "rules").get("groups", []) for r in g["rules"]]
        return loaded if loaded and all(not r["lastEvaluation"].startswith("0001") for r in loaded) else []

    loaded = wait_until(evaluated, timeout=SETTLE)
    assert len(loaded) == len(rules("record")) + len(rules("alert"))
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []


def panel_queries(board: dict, title: str, values: dict[str, str]) -> list[str]:
    panel = next(p for p, _ in targets(board) if p["title"] == title)
    return [interpolate(t["expr"], values) for t in panel["targets"]]


def as_grafana_all(prom: str, board: dict) -> dict[str, str]:
    """Every variable at All, as Grafana sends it: the variable's allValue where it has one, else its options."""
    values = variable_values(prom, board)
    return values | {v["name"]: v["allValue"] for v in board["templating"]["list"] if v.get("allValue")}


def by_gpu(prom: str, promql: str, pid: int) -> dict[str, tuple[float, dict]]:
    """The query's series of one process, by GPU: (value, the labels beyond the process's)."""
    return {
        r["metric"]["gpu"]: (float(r["value"][1]), {k: v for k, v in r["metric"].items() if k == "context"})
        for r in query(prom, promql)
        if r["metric"].get("pid") == str(pid)
    }


def test_the_device_memory_panel_adds_pools_and_contexts_and_says_the_limit_does_not_charge_them(stack):
    board = load(ROOT / "dashboards/json/gpu-sharing.json")
    queries = panel_queries(
        board, "Device memory as the GPU holds it, beside its limit", as_grafana_all(stack.prometheus, board)
    )
    cache = MEMORY["pool_reserved_bytes"] - MEMORY["pool_used_bytes"]  # the same on both devices (V + i minus V + i)
    allocations = MEMORY["bytes_in_use"]
    expected = [  # per query, device 0's value; device 1's fields are each 1 more
        (allocations, 1, {}),
        (allocations + cache, 1, {}),
        (allocations + cache + MEMORY["context_bytes"], 2, {}),
        (MEMORY["charged_bytes"], 1, {}),
        (MEMORY["memory_limit_bytes"], 1, {"context": "not charged"}),
    ]
    wanted = [{"0": (float(v), labels), "1": (float(v + step), labels)} for v, step, labels in expected]
    # the writer whose limit charges its contexts: no pools, so charged is the top line, and the limit says so
    mib = 1 << 20
    wanted_charged = [
        {"0": (float(v), labels)}
        for v, labels in [
            (256 * mib, {}),
            (256 * mib, {}),
            (768 * mib, {}),
            (768 * mib, {}),
            (1024 * mib, {"context": "charged"}),
        ]
    ]

    def shown() -> list:
        return [
            [by_gpu(stack.prometheus, q, stack.pids[name]) for q in queries] for name in ("limited", "context charged")
        ]

    try:
        wait_until(lambda: shown() == [wanted, wanted_charged], timeout=SETTLE)
    except AssertionError:
        pass
    assert shown() == [wanted, wanted_charged]


def test_the_activity_panel_shows_starting_up_idle_and_active_by_the_time_of_the_latest_launch(stack):
    """A range query from the stack's start, as Grafana draws the timeline: the writer that has launched nothing is
    starting up throughout, the one whose latest launch is from 2025 idle throughout, and the one that launched at the
    stack's start active until 60 s after that launch, idle from then on. The range runs to 90 s after that launch,
    into the future if need be: Prometheus evaluates those steps on the latest samples (within its 5m lookback), with
    time() at each step, so the change to idle is seen however quickly the module ran."""
    board = load(ROOT / "dashboards/json/gpu-sharing.json")
    [promql] = panel_queries(board, "Processes starting up or idle", as_grafana_all(stack.prometheus, board))
    panel = next(p for p, _ in targets(board) if p["title"] == "Processes starting up or idle")
    states = {
        shown["text"]: int(value) for value, shown in panel["fieldConfig"]["defaults"]["mappings"][0]["options"].items()
    }
    wait_until(
        lambda: {r["metric"]["pid"] for r in query(stack.prometheus, promql)} >= {str(p) for p in stack.pids.values()},
        timeout=SETTLE,
    )
    launch = stack.active_launch_ns / 1e9
    timeline = api(
        stack.prometheus, "query_range", query=promql, start=stack.started, end=max(time.time(), launch + 90), step="1s"
    )["result"]
    series = {int(r["metric"]["pid"]): r["values"] for r in timeline}
    assert {v for _, v in series[stack.pids["starting"]]} == {str(states["starting up"])}
    assert {v for _, v in series[stack.pids["limited"]]} == {str(states["idle"])}
    seen = [(t - launch, int(v)) for t, v in series[stack.pids["active"]] if abs(t - launch - 60) > 1]
    assert seen == [(age, states["idle"] if age > 60 else states["active"]) for age, _ in seen]
    assert {state for _, state in seen} == {states["active"], states["idle"]}


def test_the_compute_panel_shows_each_process_cap_and_share(stack):
    """The limited C writer has a 30% cap on both GPUs (and, as writers before the GPU-time limits did, a window the
    panel leaves out); the GPU time writer a 50% share on GPU 0. Neither has a series for the limit it lacks."""
    board = load(ROOT / "dashboards/json/gpu-sharing.json")
    cap, share, _ = panel_queries(
        board, "Compute cap, share and throttled share", as_grafana_all(stack.prometheus, board)
    )
    wanted = [{"0": (0.3, {}), "1": (0.3, {})}, {}, {}, {"0": (0.5, {})}]

    def shown() -> list:
        return [by_gpu(stack.prometheus, q, stack.pids[name]) for name in ("limited", "gpu time") for q in (cap, share)]

    try:
        wait_until(lambda: shown() == wanted, timeout=SETTLE)
    except AssertionError:
        pass
    assert shown() == wanted


def test_the_gpu_time_panel_shows_the_pods_share_of_each_gpu(stack):
    """Only the GPU time writer measures GPU time (the C writers do not): its pod (none: `<none>`) got a quarter of
    GPU 0, and GPU 1 has no series at all rather than a 0."""
    board = load(ROOT / "dashboards/json/gpu-sharing.json")
    [promql] = panel_queries(board, "GPU time share by pod", as_grafana_all(stack.prometheus, board))

    def shares() -> dict[tuple[str, str], float]:
        return {
            (r["metric"]["pod"], r["metric"]["uuid"]): float(r["value"][1]) for r in query(stack.prometheus, promql)
        }

    def quarter_of_gpu_0() -> bool:  # once the rate's window holds enough scrapes to smooth the publishes' jitter
        shown = shares()
        return list(shown) == [("<none>", UUIDS[0])] and abs(shown[("<none>", UUIDS[0])] - 0.25) < 0.02

    try:
        wait_until(quarter_of_gpu_0, timeout=SETTLE)
    except AssertionError:
        pass
    assert quarter_of_gpu_0(), shares()


def test_every_query_of_dcgm_exporters_dashboard_returns_data(stack):
    """dcgm-exporter's default dashboard as it ships, its instance and gpu variables resolved from its own
    label_values(DCGM_FI_DEV_GPU_TEMP, ...) queries."""
    board = load(DCGM_DASHBOARD)
    values = variable_values(stack.prometheus, board)
    assert values["instance"] == regex_of([stack.instance]) and values["gpu"] == regex_of(["0", "1"])
    queries = {
        f"{panel['title']} ({target['refId']})": interpolate(target["expr"], values) for panel, target in targets(board)
    }
    assert len(queries) == 8
    assert empty_after_settling(stack.prometheus, queries) == []


def test_dcgm_exporters_dashboard_shows_the_nvml_double_in_dcgm_units_and_labels(stack):
    """The double's GPUs (EXPORTER_WITH_FAKE_NVML: 55 and 56 °C, 100 W, SM clock 1980 MHz, 60% busy, 4 and 5 GiB used)
    in each panel's unit, on dcgm-exporter's labels. No process of the stack is in a pod: no pod labels."""
    board = load(DCGM_DASHBOARD)
    values = variable_values(stack.prometheus, board)
    wanted = {
        "GPU Temperature": {"0": 55, "1": 56},
        "GPU Avg. Temp": {None: 55.5},
        "GPU Power Usage": {"0": 100, "1": 100},
        "GPU Power Total": {None: 200},
        "GPU SM Clocks": {"0": 1980e6, "1": 1980e6},
        "GPU Utilization": {"0": 60, "1": 60},
        "GPU Framebuffer Mem Used": {"0": 4096, "1": 5120},
    }

    def shown() -> dict[str, dict]:
        return {
            title: {
                r["metric"].get("gpu"): float(r["value"][1])
                for q in panel_queries(board, title, values)
                for r in query(stack.prometheus, q)
            }
            for title in wanted
        }

    try:
        wait_until(lambda: shown() == wanted, timeout=SETTLE)
    except AssertionError:
        pass
    assert shown() == wanted
    [temperature] = panel_queries(board, "GPU Temperature", values)
    labels = sorted((r["metric"] for r in query(stack.prometheus, temperature)), key=lambda m: m["gpu"])
    assert labels == [
        {
            "__name__": "DCGM_FI_DEV_GPU_TEMP",
            "gpu": str(i),
            "UUID": uuid,
            "device": f"nvidia{i}",
            "modelName": "NVIDIA H200",
            "Hostname": "demo-node",
            "DCGM_FI_DRIVER_VERSION": "550.54.15",
            "instance": stack.instance,
            "job": "alnair",
        }
        for i, uuid in enumerate(UUIDS)
    ]


def test_the_dcgm_profiling_names_serve_the_doubles_gpm_rates_as_ratios_and_bytes_per_second(stack):
    """Every DCGM_FI_PROF_* name, recorded from the nvml collector's GPM series: percent as a ratio, MiB/s as
    bytes/s."""
    assert set(GPM_RATES) == {n.name for n in dcgm_names.NAMES if n.name.startswith("DCGM_FI_PROF_")}
    wanted = {
        name: [rate * 2**20 if metric.endswith("_PER_SEC") else rate / 100] * len(UUIDS)
        for name, (metric, rate) in GPM_RATES.items()
    }

    def shown() -> dict[str, list[float]]:
        return {name: sorted(float(r["value"][1]) for r in query(stack.prometheus, name)) for name in GPM_RATES}

    def as_wanted() -> bool:
        return shown() == {name: pytest.approx(values, rel=1e-6) for name, values in wanted.items()}

    try:
        wait_until(as_wanted, timeout=SETTLE)
    except AssertionError:
        pass
    assert as_wanted(), shown()


def test_the_space_row_shows_each_jobs_space_beside_the_policys_capacity(stack):
    """demo-job cached 18 distinct samples of 4096 bytes (images 0-11, thumbnails 6-17) under the demo Redis's policy
    (64 MiB of capacity); the cluster target runs without one: capacity 0, nothing held."""
    board = load(ROOT / "dashboards/json/dataset-cache.json")
    held, capacity = panel_queries(board, "Space held per job", as_grafana_all(stack.prometheus, board))

    def shown() -> tuple[dict, dict]:
        return (
            {r["metric"]["job_name"]: float(r["value"][1]) for r in query(stack.prometheus, held)},
            sorted(float(r["value"][1]) for r in query(stack.prometheus, capacity)),
        )

    wanted = ({"demo-job": 18 * 4096, "cluster-job": 0}, [0, 64 << 20])
    try:
        wait_until(lambda: shown() == wanted, timeout=SETTLE)
    except AssertionError:
        pass
    assert shown() == wanted
