"""Kernels by name: the launch path counts each kernel handle, the monitor names it (cuFuncGetName, cuKernelGetName,
demangled where the process has a C++ runtime) and publishes the most launched ones, then each device's OTHER row."""

from __future__ import annotations

import os
import subprocess

import pytest

from alnair.abi.records import kernel_key
from conftest import published_record
from support import LineReader, wait_until


def expected_launches(k: int) -> int:
    return 1000 - 10 * k  # the client's kernels scenario


def rows(shm_dir, pid: int) -> dict[tuple[int, str], int]:
    """The published kernel table: (device, label) -> launches."""
    record = published_record(shm_dir, pid)
    return {kernel_key(k): k.launches for k in record.kernels} if record and record.kernels is not None else {}


def mangled(k: int) -> str:
    plain = f"fake_kernel_{k}"
    return f"_Z{len(plain)}{plain}Pf"


@pytest.mark.parametrize(
    "stride, devices", [(64, 2), (65536, 1)], ids=["heap-handles-2-devices", "handles-64KiB-apart-1-device"]
)
def test_the_20_most_launched_kernels_by_name_then_each_devices_other_launches_exactly(
    run_client, shm_dir, stride, devices
):
    """Handles 64 KiB apart (cuDNN's kernels sit in modules a page or more apart) share their low address bits."""
    client = run_client("gpa", "kernels", "50", str(devices), env={"FAKE_KERNEL_STRIDE": str(stride)})
    name = {k: f"fake_kernel_{k}" if k % 2 == 0 else mangled(k) for k in range(50)}
    named = {(k % devices, name[k]): expected_launches(k) for k in range(20)}
    other = {
        (d, "(other)"): sum(expected_launches(k) for k in range(20, 50) if k % devices == d) for d in range(devices)
    }
    # Most launched first, then each device's OTHER. A publish reads the slots one by one while launches go on, so a
    # row can join a publish later than one launched after it and rank below it for a publish (its eighth's boost
    # comes from the publish before): the order is waited for too.
    expected = [*sorted(named.items(), key=lambda row: -row[1]), *other.items()]
    table = wait_until(lambda: list((t := rows(shm_dir, client.proc.pid)).items()) == expected and t)
    record = published_record(shm_dir, client.proc.pid)
    for device in record.devices:  # the rows add up to the device's launches
        assert sum(n for (d, _), n in table.items() if d == device.device_index) == device.kernel_launches


DEMANGLED = {
    (0, "fake_kernel_0"): 1000,
    (0, "fake_kernel_1(float*)"): 990,
    (0, "fake_kernel_2"): 980,
    (0, "fake_kernel_3(float*)"): 970,
    (0, "(other)"): 0,
}


def test_names_are_demangled_where_the_process_has_a_cpp_runtime(run_client, shm_dir, intercept_library):
    client = run_client(
        "gpa", "kernels", "4", "1", preload=False, env={"LD_PRELOAD": f"libstdc++.so.6 {intercept_library}"}
    )
    wait_until(lambda: rows(shm_dir, client.proc.pid) == DEMANGLED)


def test_names_are_demangled_with_a_cpp_runtime_loaded_local_as_python_loads_it(run_client, shm_dir):
    """Python's extension modules (PyTorch's) bring libstdc++ in with RTLD_LOCAL: not in the global scope."""
    client = run_client("gpa", "kernels", "4", "1", env={"CLIENT_DLOPEN_LIBSTDCXX": "1"})
    wait_until(lambda: rows(shm_dir, client.proc.pid) == DEMANGLED)


def test_context_independent_unnamed_and_hostile_names(run_client, shm_dir):
    # 1500: a CUkernel (cuKernelGetName only); 2500 and 2600: no name at all; 3000: 300 bytes with a tab and a newline
    client = run_client("gpa", "kernels", "0", "1", "1500:7,2500:5,2600:3,3000:2")
    long_name = "long?name?" + "x" * 245  # control bytes as '?', cut to the field's 255 bytes
    want = {(0, "library_kernel_1500"): 7, (0, "(unnamed)"): 8, (0, long_name): 2, (0, "(other)"): 0}
    wait_until(lambda: rows(shm_dir, client.proc.pid) == want)


def test_launches_of_a_null_handle_count_only_in_other(run_client, shm_dir):
    client = run_client("gpa", "launches", "2", "1000", "2")  # the launches scenario passes no function
    wait_until(lambda: rows(shm_dir, client.proc.pid) == {(0, "(other)"): 1000, (1, "(other)"): 1000})


def test_kernel_names_top_sets_how_many_are_named_and_a_bad_value_is_one_line(run_client, shm_dir):
    five = run_client("gpa", "kernels", "10", "1", env={"ALNAIR_KERNEL_NAMES_TOP": "5"})
    want = {(0, f"fake_kernel_{k}" if k % 2 == 0 else mangled(k)): expected_launches(k) for k in range(5)}
    wait_until(
        lambda: rows(shm_dir, five.proc.pid) == {**want, (0, "(other)"): sum(map(expected_launches, range(5, 10)))}
    )
    none = run_client("gpa", "kernels", "10", "1", env={"ALNAIR_KERNEL_NAMES_TOP": "0"})
    wait_until(lambda: rows(shm_dir, none.proc.pid) == {(0, "(other)"): sum(map(expected_launches, range(10)))})
    bad = run_client("gpa", "kernels", "30", "1", env={"ALNAIR_KERNEL_NAMES_TOP": "33"})
    wait_until(lambda: len(rows(shm_dir, bad.proc.pid)) == 21)  # the default: 20 named, and OTHER
    assert bad.stop().splitlines() == [
        'alnair: ignoring ALNAIR_KERNEL_NAMES_TOP="33": want a number of kernels 0-32; naming the 20 most launched'
    ]


def test_rows_change_as_kernels_overtake_one_another_and_other_never_goes_down(
    intercept_library, fake_driver_dir, client_programs, shm_dir
):
    """One named row: a kernel takes it only with an eighth more launches than its holder; a kernel that leaves
    counts in OTHER from then on. The test looks at the record between the phases the client waits between."""
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake_driver_dir),
        "ALNAIR_SHM_DIR": str(shm_dir),
        "LD_PRELOAD": str(intercept_library),
        "ALNAIR_KERNEL_NAMES_TOP": "1",
    }
    phases = "5:100,wait,6:110,wait,6:200,wait,5:250,wait,6:10,wait"
    proc = subprocess.Popen(
        [str(client_programs["gpa"]), "gpa", "kernels", "0", "1", phases],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    output = LineReader(proc.stdout)
    after = [
        {(0, mangled(5)): 100, (0, "(other)"): 0},
        {(0, mangled(5)): 100, (0, "(other)"): 110},  # 110 is not an eighth more than 100: the row stays
        {(0, "fake_kernel_6"): 310, (0, "(other)"): 110},  # 310 is: it takes the row with all its launches
        {(0, mangled(5)): 350, (0, "(other)"): 110},  # 350 against 310 and an eighth: back
        {(0, mangled(5)): 350, (0, "(other)"): 120},  # the kernel that left counts in OTHER
    ]
    try:
        for want in after:
            assert output.read_line(30).strip() == "waiting"
            wait_until(lambda want=want: rows(shm_dir, proc.pid) == want)
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert output.read_line(30).strip() == "ready"
    finally:
        proc.kill()
        proc.wait()
