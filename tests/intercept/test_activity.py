"""Time to first allocation and first launch, and the latest launch's time, in the published record.

The client prints, around each event, the time since it started reckoned the intercept's way (CLOCK_BOOTTIME
minus the start time of /proc/self/stat), so the published times must fall between its two readings."""

from __future__ import annotations

import time

from conftest import published_record
from support import wait_until


def one(client, key: str) -> int:
    return int(client.values(key)[-1][0])


def activity(shm_dir, client):
    record = published_record(shm_dir, client.proc.pid)
    return record.activity if record else None


def next_step(client) -> None:
    client.proc.stdin.write("\n")
    client.proc.stdin.flush()
    client.read_until_ready()


def test_first_allocation_first_launch_and_last_launch_times(run_client, shm_dir):
    client = run_client("gpa", "activity")  # allocated, not launched yet
    a = wait_until(lambda: (a := activity(shm_dir, client)) and a.first_allocation_ns and a)
    assert one(client, "before_allocation") <= a.first_allocation_ns <= one(client, "after_allocation")
    assert a.first_allocation_ns >= 100_000_000  # the client slept 100 ms first
    assert a.first_launch_ns == 0 and a.last_launch_time_ns == 0  # before any launch: absent

    next_step(client)  # the first launch
    a = wait_until(lambda: (a := activity(shm_dir, client)) and a.last_launch_time_ns and a)
    seen = time.time_ns()
    assert one(client, "before_launch") <= a.first_launch_ns <= one(client, "after_launch")
    assert one(client, "before_launch_realtime") <= a.last_launch_time_ns <= seen
    first_launch, last_launch = a.first_launch_ns, a.last_launch_time_ns
    time.sleep(0.1)  # ten publishes without a launch: the time stays
    a = activity(shm_dir, client)
    assert (a.first_launch_ns, a.last_launch_time_ns) == (first_launch, last_launch)

    next_step(client)  # a later launch moves the last launch's time, not the first
    a = wait_until(lambda: (a := activity(shm_dir, client)) and a.last_launch_time_ns != last_launch and a)
    assert one(client, "before_launch_realtime") <= a.last_launch_time_ns <= time.time_ns()
    assert a.last_launch_time_ns > last_launch and a.first_launch_ns == first_launch


def test_a_fork_child_times_its_own_first_launch(run_client, shm_dir):
    client = run_client("gpa", "fork")  # the parent launches, forks; the child launches 50 ms after it started
    client.read_until_ready()  # the child's ready line
    child = int(client.values("child")[0][0])
    parent = wait_until(lambda: (a := activity(shm_dir, client)) and a.first_launch_ns and a)
    mine = wait_until(lambda: (r := published_record(shm_dir, child)) and r.activity.first_launch_ns and r.activity)
    # the parent's first launch would read as 1 ns after the child's start (it came before): this is the child's
    assert 50_000_000 <= mine.first_launch_ns < 10_000_000_000
    assert mine.last_launch_time_ns >= parent.last_launch_time_ns
