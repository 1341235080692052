"""alnair top: live writers read straight from shared memory, under a real pseudo-terminal and piped."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import time

import pexpect
import pyte
import pytest

from support import PythonProgram, cuda_record_program, python_records, wait_until

# One process with both records: a training loop taking a batch every 10 ms and waiting 6 ms of each for
# it, and a cuda segment on GPU 3 launching 5000 kernels/s, throttled 25%, 3 of 8 GiB in use, copying
# 3,000,000 bytes/s to the GPU and 1,000,000 back, its context holding 512 MiB, 3.5 GiB charged, under a 70%
# compute cap and a 30% share, getting 40% of the GPU's time (busy 80%, shared). Every value
# follows the clock, not how often the threads get to run, so the rates do not depend on the machine.
TRAINER = textwrap.dedent("""
    import ctypes, sys, threading, time
    from alnair.abi import layout
    from alnair.intercept.this_process import RECORDER
    from alnair.intercept.segment_writer import WriterSegment

    stop = threading.Event()

    class Iterator:
        pass

    def train():  # a DataLoader pass of batches of 8, logged as torch_hooks logs it: ask, arrival per step
        iterator = Iterator()
        iterator._alnair_pass = loader_pass = RECORDER.pass_started(iterator, 8, 1 << 40, 0)
        start, logged = time.monotonic_ns(), 0
        while not stop.wait(0.002):
            arrived = (time.monotonic_ns() - start - 6_000_000) // 10_000_000 + 1  # steps whose batch came
            for step in range(logged, arrived):
                asked = start + step * 10_000_000
                loader_pass.times.extend((asked, asked + 6_000_000))
            logged = max(logged, arrived)

    def gpu(segment):
        record = layout.CudaRecord(device_count=1, max_devices=layout.CUDA_MAX_DEVICES)
        device = record.devices[0]
        device.device_index, device.bytes_in_use, device.memory_limit_bytes = 3, 3 << 30, 8 << 30
        device.flags = layout.CUDA_DEVICE_GPU_TIME
        device.compute_limit_percent, device.compute_share_percent = 70, 30
        record.devices_memory[0].context_bytes, record.devices_memory[0].charged_bytes = 512 << 20, 7 << 29
        record.activity.first_launch_ns = 1_500_000_000
        start = time.time_ns()
        while not stop.wait(0.01):
            elapsed = time.time_ns() - start
            record.activity.last_launch_time_ns = time.time_ns()
            device.kernel_launches, device.throttled_ns = elapsed * 5 // 1_000_000, elapsed // 4
            device.gpu_time_ns, record.devices_ext[0].busy_ns = elapsed * 2 // 5, elapsed * 4 // 5
            copies = record.devices_ext[0].copies
            copies[layout.COPY_HOST_TO_DEVICE].bytes = elapsed * 3 // 1000
            copies[layout.COPY_DEVICE_TO_HOST].bytes = elapsed // 1000
            segment.publish(bytes(record))

    cuda = WriterSegment(layout.KIND_CUDA, ctypes.sizeof(layout.CudaRecord))
    threads = [threading.Thread(target=train), threading.Thread(target=gpu, args=(cuda,))]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join()
    cuda.close()
""")


HEADER = [
    "PID",
    "COMM",
    "POD",
    "GPU",
    "STATE",
    "LAUNCH/s",
    "MEM",
    "LIMIT",
    "CTX",
    "CHARGED",
    "H2D/s",
    "D2H/s",
    "GPU%",
    "THR%",
    "STALL%",
    "STEP/s",
]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def byte_count(cell: str) -> float:
    number = cell.rstrip("BKiMG")
    return float(number) * UNITS[cell[len(number) :]]


def alnair_command() -> str:
    return shutil.which("alnair") or pytest.fail("the alnair console script is not installed: pip install -e '.[test]'")


@pytest.fixture
def writers(shm_dir, start_writer):
    """The trainer above, and a C test writer (cuda only, 2 GPUs, 100 launches/s each by its clock)."""
    trainer = PythonProgram(TRAINER, shm_dir)
    c_writer = start_writer("--devices", "2", "--period-ms", "10", "--set", "bytes_in_use=1048576")
    yield trainer, c_writer
    trainer.finish()


@pytest.fixture(autouse=True)
def one_fake_gpu(fake_nvml_dir, monkeypatch):
    """alnair top reads the node's GPUs through NVML: here the test double, one GPU unless a test says otherwise."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_dir))


def run_top(shm_dir, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [alnair_command(), "top", f"--shm.dir={shm_dir}", *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def piped_table(shm_dir, *args: str) -> list[list[str]]:
    """The processes' table: what follows the GPUs' table and its blank line."""
    out = run_top(shm_dir, *args)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    gpus, processes = out.stdout.split("\n\n")
    return [line.split() for line in processes.splitlines()]


GPU_HEADER = ["GPU", "NAME", "UTIL%", "SMACT%", "MEMBW%", "MEM", "TOTAL"]


def gpu_table(stdout: str) -> dict[str, dict[str, str]]:
    """The GPUs' table by index; a name has spaces, so cells are counted from either end."""
    header, *rows = stdout.split("\n\n")[0].splitlines()
    assert header.split() == GPU_HEADER
    table = {}
    for line in rows:
        cells = line.split()
        table[cells[0]] = dict(zip(GPU_HEADER, [cells[0], " ".join(cells[1:-5]), *cells[-5:]]))
    return table


def test_top_shows_the_node_gpus_from_nvml_with_no_writer_running(shm_dir):
    out = run_top(
        shm_dir,
        "--interval=0.2",
        env={
            "FAKE_NVML_GPUS": "3",
            "FAKE_NVML_GPU_UTIL": "97,5,x",
            "FAKE_NVML_MEMORY_UTIL": "41,2",
            "FAKE_NVML_MEMORY_USED": f"{3 << 30},{512 << 20}",
            "FAKE_NVML_GPM": "1,0,1",
            "FAKE_NVML_SM_ACTIVE": "94.7,0,12.5",
        },
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert gpu_table(out.stdout) == {
        "0": dict(zip(GPU_HEADER, ["0", "Fake GPU 0", "97", "94.7", "41", "3.0GiB", "80.0GiB"])),
        # no GPM before Hopper: no SM active, not 0
        "1": dict(zip(GPU_HEADER, ["1", "Fake GPU 1", "5", "-", "2", "512.0MiB", "80.0GiB"])),
        # a GPU that does not answer the utilization query (as a MIG-enabled one): its other cells stay
        "2": dict(zip(GPU_HEADER, ["2", "Fake GPU 2", "-", "12.5", "-", "0B", "80.0GiB"])),
    }
    assert out.stdout.split("\n\n")[1].split() == HEADER  # no writer: the processes' header alone


def test_top_without_nvml_says_so_in_one_line_and_still_shows_the_processes(shm_dir, start_writer, tmp_path):
    w = start_writer("--period-ms", "10")
    out = run_top(shm_dir, "--interval=0.1", env={"LD_LIBRARY_PATH": str(tmp_path)})  # no libnvidia-ml.so.1 there
    assert out.returncode == 0
    assert out.stderr == "alnair top: no GPU rows: NVML (libnvidia-ml.so.1) not found\n"
    header, *rows = [line.split() for line in out.stdout.splitlines()]
    assert header == HEADER and [int(r[0]) for r in rows] == [w.pid]


def test_piped_top_prints_one_table_with_rates_joined_by_pid(shm_dir, writers):
    trainer, c_writer = writers
    wait_until(lambda: len(list(shm_dir.glob("alnair.*"))) == 3)
    wait_until(lambda: python_records(shm_dir)[trainer.pid].steps > 1)  # past the first step, which is all wait
    header, *rows = piped_table(shm_dir, "--interval=1", "--sort=pid", "--ascending")
    assert header == HEADER
    by_pid = {int(r[0]): dict(zip(header, r)) for r in rows}
    assert list(by_pid) == sorted([trainer.pid, c_writer.pid])
    t = by_pid[trainer.pid]
    assert (t["GPU"], t["MEM"], t["LIMIT"], t["CTX"], t["CHARGED"]) == ("3", "3.0GiB", "8.0GiB", "512.0MiB", "3.5GiB")
    assert t["STATE"] == "cap:70%,share:30%"
    # Rates are taken between the writers' publish times, so only the gap between a value and its
    # publish stamp (microseconds, a scheduling delay at worst) separates them from the nominal ones.
    assert 4800 <= float(t["LAUNCH/s"]) <= 5200
    assert 24 <= float(t["THR%"]) <= 26
    assert 39 <= float(t["GPU%"]) <= 41
    assert t["STALL%"] == "60.0"
    assert 95 <= float(t["STEP/s"]) <= 105
    # one decimal of MiB, KiB
    assert 2.8e6 <= byte_count(t["H2D/s"]) <= 3.2e6 and 0.9e6 <= byte_count(t["D2H/s"]) <= 1.1e6
    c = by_pid[c_writer.pid]
    assert (c["COMM"], c["GPU"], c["MEM"], c["LIMIT"], c["STALL%"], c["STEP/s"]) == (
        "alnair-shm-test",
        "0,1",
        "2.0MiB",
        "-",
        "-",
        "-",
    )
    assert (c["STATE"], c["CTX"], c["CHARGED"]) == ("starting", "-", "0B")  # no launch yet; no context measured
    assert (c["H2D/s"], c["D2H/s"]) == ("0B", "0B")
    assert c["GPU%"] == "-"  # the C writer does not measure GPU time: no share, not 0
    assert 195 <= float(c["LAUNCH/s"]) <= 205  # 2 devices x 100/s


def test_top_shows_no_copy_rates_for_a_writer_older_than_the_copy_counters(shm_dir, start_writer):
    old = start_writer("--record-size", "8224", "--period-ms", "10")
    header, *rows = piped_table(shm_dir, "--interval=0.5")
    row = dict(zip(header, rows[0]))
    assert int(row["PID"]) == old.pid and 90 <= float(row["LAUNCH/s"]) <= 110
    assert (row["H2D/s"], row["D2H/s"], row["GPU%"]) == ("-", "-", "-")
    assert (row["STATE"], row["CTX"], row["CHARGED"]) == ("-", "-", "-")  # nor a state or memory it does not publish


def test_top_shows_no_gpu_share_before_its_second_read(shm_dir, writers):
    """The screen's first frame has one read: no share yet, not 0; a second read of a writer that measures GPU time
    gives one."""
    from alnair.cli.top import NodeReader, rows

    trainer, _ = writers
    pid = str(trainer.pid)
    reader = NodeReader(str(shm_dir))
    first = wait_until(lambda: (read := reader.read()).get(pid) and read[pid].gpu_time_ns and read)
    [alone] = [r for r in rows(first, {}) if r.pid == pid]
    assert alone.gpu_time_pct is None and alone.launches_per_s is None
    # a second read at least 0.3 s of the writer's publishes later
    later = wait_until(lambda: (read := reader.read())[pid].cuda_time_ns - first[pid].cuda_time_ns > 3e8 and read)
    [paired] = [r for r in rows(later, first) if r.pid == pid]
    assert paired.gpu_time_pct is not None and 39 <= paired.gpu_time_pct <= 41


# Active under a share on two GPUs, 60% on GPU 0 and 40% on GPU 1 (the C test writer cannot set a share).
SHARED = cuda_record_program("""
    import time
    record.device_count = 2
    for i, share in enumerate((60, 40)):
        record.devices[i].device_index, record.devices[i].compute_share_percent = i, share
    record.activity.first_launch_ns, record.activity.last_launch_time_ns = 2_000_000_000, time.time_ns()
""")


def test_top_tells_starting_idle_active_and_the_compute_limits_apart_by_the_writers_clock(shm_dir, start_writer):
    now = time.time_ns()
    launched = ("--set", "first_launch_ns=2000000000", "--set", "first_allocation_ns=1000000000")
    writers = {
        "starting": start_writer("--period-ms", "10"),  # not launched yet
        "idle": start_writer("--period-ms", "10", *launched, "--set", f"last_launch_time_ns={now - 120 * 10**9}"),
        "active": start_writer("--period-ms", "10", *launched, "--set", f"last_launch_time_ns={now}"),
        "cap": start_writer(
            "--period-ms", "10", *launched, "--set", f"last_launch_time_ns={now}", "--compute-limit", "30"
        ),
        # a writer before the GPU-time limits, taking turns under its 30% limit: its window, 25% of each period now
        "turns": start_writer(
            "--period-ms",
            "10",
            *launched,
            "--set",
            f"last_launch_time_ns={now}",
            "--compute-limit",
            "30",
            "--set",
            "compute_period_ns=100000000",
            "--set",
            "compute_quota_ns=25000000",
        ),
        # under a cap, but idle for longer than --idle-after: idle wins
        "idle too": start_writer(
            "--period-ms", "10", *launched, "--set", f"last_launch_time_ns={now - 120 * 10**9}", "--compute-limit", "30"
        ),
    }
    shared = PythonProgram(SHARED, shm_dir)
    try:
        header, *rows = piped_table(shm_dir, "--interval=0.1")
        shown = {int(r[0]): dict(zip(header, r))["STATE"] for r in rows}
        assert {name: shown[w.pid] for name, w in writers.items()} == {
            "starting": "starting",
            "idle": "idle",
            "active": "active",
            "cap": "cap:30%",
            "turns": "turns:25%",
            "idle too": "idle",
        }
        assert shown[shared.pid] == "share:40%"  # the lowest of its GPUs'
        header, *rows = piped_table(shm_dir, "--interval=0.1", "--idle-after=10m")  # 120 s is not idle for 10 minutes
        shown = {int(r[0]): dict(zip(header, r))["STATE"] for r in rows}
        assert (shown[writers["idle"].pid], shown[writers["idle too"].pid]) == ("active", "cap:30%")
    finally:
        shared.finish()


def test_top_sums_the_memory_columns_over_the_process_devices(shm_dir, start_writer):
    """Device i gets V + i: two devices of context_bytes=256 MiB and charged_bytes=1 GiB."""
    w = start_writer("--devices", "2", "--set", "context_bytes=268435456", "--set", "charged_bytes=1073741824")
    header, *rows = piped_table(shm_dir, "--interval=0.1", "--sort=context_memory")
    row = dict(zip(header, rows[0]))
    assert int(row["PID"]) == w.pid and (row["CTX"], row["CHARGED"]) == ("512.0MiB", "2.0GiB")


def test_top_never_removes_segments_not_even_a_dead_writers(shm_dir, start_writer):
    dead = start_writer()
    dead.kill()
    alive = start_writer()
    header, *rows = piped_table(shm_dir, "--interval=0.1")
    assert [int(r[0]) for r in rows] == [alive.pid]
    assert dead.path.exists() and alive.path.exists()


def test_top_rejects_a_missing_directory_in_one_line(tmp_path):
    out = subprocess.run([alnair_command(), "top", f"--shm.dir={tmp_path / 'nope'}"], capture_output=True, text=True)
    assert (
        out.returncode == 2
        and out.stderr.strip() == f"alnair top: error: --shm.dir: not a directory: {tmp_path / 'nope'}"
    )


class Terminal:
    """alnair top under a real pseudo-terminal; what it draws goes through a VT100 emulator."""

    def __init__(self, args: list[str], rows: int = 20, columns: int = 160):
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(
            alnair_command(), args, dimensions=(rows, columns), env={**os.environ, "TERM": "xterm"}
        )

    def lines(self) -> list[str]:
        try:
            while True:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=0.05))
        except (pexpect.TIMEOUT, pexpect.EOF):
            pass
        return [line.rstrip() for line in self.screen.display]

    def rows_once(self, predicate, timeout: float = 15) -> list[str]:
        return wait_until(lambda: (lines := self.lines()) and predicate(lines) and lines, timeout=timeout)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def process_header_at(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if line.split() == HEADER)


def pids_shown(lines: list[str]) -> list[int]:
    rows = lines[process_header_at(lines) + 1 :]
    return [int(line.split()[0]) for line in rows if line.split() and line.split()[0].isdigit()]


def test_top_under_a_terminal_refreshes_sorts_and_quits(shm_dir, writers, monkeypatch):
    trainer, c_writer = writers
    monkeypatch.setenv("FAKE_NVML_GPM", "1")
    monkeypatch.setenv("FAKE_NVML_SM_ACTIVE", "62.5")
    wait_until(lambda: len(list(shm_dir.glob("alnair.*"))) == 3)
    term = Terminal(["top", f"--shm.dir={shm_dir}", "--interval=0.2", "--sort=pid", "--ascending"])
    try:
        ascending = sorted([trainer.pid, c_writer.pid])

        def trainer_row_has_rates(lines):
            row = next((line.split() for line in lines if line.startswith(str(trainer.pid))), None)
            return row is not None and row[-1] != "-" and float(row[-1]) > 0 and pids_shown(lines) == ascending

        lines = term.rows_once(trainer_row_has_rates)
        assert lines[0].startswith("alnair top: 2 processes  sort: PID ascending")
        # the node's one (fake) GPU above the processes, with SM active from the second read on
        assert lines[1].split() == GPU_HEADER and lines[2].split()[:4] == ["0", "Fake", "GPU", "0"]
        assert (lines[3], lines[4].split()) == ("", HEADER)
        assert term.rows_once(lambda lines: lines[2].split()[5] == "62.5")  # NAME is three words: SMACT% is the 6th
        first_steps = float(next(line for line in lines if line.startswith(str(trainer.pid))).split()[-1])

        term.child.send("r")
        lines = term.rows_once(lambda lines: pids_shown(lines) == ascending[::-1])
        assert "sort: PID descending" in lines[0]

        term.child.send(">")
        term.rows_once(lambda lines: "sort: COMM descending" in lines[0])

        # Rates keep refreshing: the trainer's steps/s is recomputed every interval.
        deadline = time.monotonic() + 5
        seen = {first_steps}
        while len(seen) < 2 and time.monotonic() < deadline:
            row = next((line.split() for line in term.lines() if line.startswith(str(trainer.pid))), None)
            if row and row[-1] != "-":
                seen.add(float(row[-1]))
        assert len(seen) >= 2

        term.child.send("q")
        term.child.expect(pexpect.EOF, timeout=10)
        term.child.close()
        assert term.child.exitstatus == 0
    finally:
        term.close()


def test_top_lists_the_most_launched_kernels_by_name_with_kernels(shm_dir, start_writer):
    """The C test writer publishes fixed counts, republishing every 10 ms: a rate of 0, the counts as given; the
    OTHER row is not a kernel and is not listed."""
    busy = start_writer(
        "--period-ms",
        "10",
        "--kernel",
        "0:void gemm<float>(float*, int)=900",
        "--kernel",
        "0:relu_kernel=40",
        "--kernel",
        "0:=5",
    )
    quiet = start_writer("--period-ms", "10", "--kernel", "0:memset_kernel=7")
    out = run_top(shm_dir, "--interval=0.2", "--kernels=2")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    header, *rows = out.stdout.split("\n\n")[2].splitlines()
    assert header.split() == ["PID", "GPU", "LAUNCH/s", "LAUNCHES", "KERNEL"]
    # rates equal (0): the most launched first; two rows asked for
    assert [line.split(None, 4) for line in rows] == [
        [str(busy.pid), "0", "0", "900", "void gemm<float>(float*, int)"],
        [str(busy.pid), "0", "0", "40", "relu_kernel"],
    ]
    assert str(quiet.pid) not in out.stdout.split("\n\n")[2]  # its one kernel is third: left out


def test_top_rejects_a_negative_kernel_count_in_one_line(shm_dir):
    out = run_top(shm_dir, "--kernels=-1")
    assert (
        out.returncode == 2
        and out.stderr.strip() == "alnair top: error: --kernels: want a number of kernels, 0 or more: -1"
    )
