"""A real PyTorch CPU training loop under the intercept: steps, samples, epochs, optimizer steps and the data stall."""

from __future__ import annotations

import textwrap

import pytest

from alnair.abi import layout
from support import PythonProgram, python_records, read_line, wait_until
from timed_loop import timed_epochs

try:
    import torch  # noqa: F401  only to fail clearly: the programs import it themselves
except ImportError:
    pytest.fail("torch is not installed: pip install torch==2.13.0 (the test extra has it)", pytrace=False)

LOADER_DELAY = 0.020  # seconds each batch takes to make, injected in collate_fn
BODY_TIME = 0.010  # seconds of each training step after its batch came
ITEMS, BATCH, EPOCHS = 42, 4, 2  # 11 batches per epoch, the last one of 2 items

EVALUATE = """
    with torch.no_grad():  # evaluation: not training steps
        for x, y in DataLoader(data, batch_size=8, collate_fn=slow_collate):
            model(x)
"""
LOOP = textwrap.indent(
    timed_epochs(f"DataLoader(data, batch_size={BATCH}, collate_fn=slow_collate)", EPOCHS, BODY_TIME, EVALUATE), "    "
)
TRAINING = textwrap.dedent(f"""
    import sys, time
    import alnair.auto  # before torch: the hooks go in when torch is imported
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    def slow_collate(items):
        time.sleep({LOADER_DELAY})
        return torch.utils.data.default_collate(items)

    data = TensorDataset(torch.randn({ITEMS}, 8), torch.randn({ITEMS}, 1))
{LOOP}
    print("ready", waited, stepped, flush=True)
    sys.stdin.read()
""")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One training run shared by the tests that read its record (torch takes seconds to import)."""
    shm_dir = tmp_path_factory.mktemp("shm")
    program = PythonProgram(TRAINING, shm_dir)
    batches = EPOCHS * -(-ITEMS // BATCH)
    record = wait_until(
        lambda: (r := python_records(shm_dir).get(program.pid)) and r.epochs == EPOCHS and r, timeout=10
    )
    yield record, batches, [float(v) for v in program.ready_line]
    assert program.finish() == ""


def test_steps_samples_epochs_and_optimizer_steps_are_exact(trained):
    record, batches, _ = trained
    assert record.steps == batches == 22
    assert record.samples == EPOCHS * ITEMS
    assert record.epochs == EPOCHS
    assert record.optimizer_steps == batches
    assert record.flags == layout.PYTHON_TORCH


def test_data_stall_and_step_time_are_within_ten_percent_of_the_programs_own_account(trained):
    """Against what the program measured itself (a loaded machine oversleeps and computes slower, for both alike),
    and at least the delays injected."""
    record, batches, (waited, stepped) = trained
    assert waited >= batches * LOADER_DELAY and stepped >= batches * (LOADER_DELAY + BODY_TIME)
    assert abs(record.data_wait_ns / 1e9 - waited) <= 0.1 * waited, (record.data_wait_ns, waited)
    assert abs(record.step_ns / 1e9 - stepped) <= 0.1 * stepped, (record.step_ns, stepped)
    assert abs(record.data_wait_ns / record.step_ns - waited / stepped) <= 0.05


def test_time_to_first_step_is_measured_from_process_start(trained):
    record, _, _ = trained
    assert 0.05 < record.first_step_ns / 1e9 < 60  # torch's import alone takes a while


def test_a_hung_loader_shows_as_data_stall_before_its_batch_comes(shm_dir):
    program = PythonProgram(
        textwrap.dedent("""
        import sys, threading, time
        import torch, alnair.auto  # after torch: hooked at once
        from torch.utils.data import DataLoader
        release = threading.Event()
        def collate(items):
            if items[0] == 1:
                print("ready", flush=True)
                release.wait()
            return torch.tensor(items)
        threading.Thread(target=lambda: (sys.stdin.readline(), release.set()), daemon=True).start()
        for batch in DataLoader(list(range(2)), batch_size=1, collate_fn=collate):
            pass
        sys.stdin.read()
    """),
        shm_dir,
    )
    first = wait_until(lambda: (r := python_records(shm_dir).get(program.pid)) and r.data_wait_ns > 0.3e9 and r)
    later = wait_until(
        lambda: (r := python_records(shm_dir)[program.pid]).data_wait_ns > first.data_wait_ns + 0.1e9 and r
    )
    assert later.steps == first.steps == 1  # the second batch has not come, yet its wait counts
    assert later.step_ns - first.step_ns == later.data_wait_ns - first.data_wait_ns  # all of it stall
    program.proc.stdin.write("go\n")
    program.proc.stdin.flush()
    done = wait_until(lambda: (r := python_records(shm_dir)[program.pid]).epochs == 1 and r)
    assert done.steps == 2 and done.data_wait_ns >= later.data_wait_ns and done.step_ns >= later.step_ns
    assert program.finish() == ""


def test_dataloader_workers_publish_only_what_they_record(shm_dir):
    """Workers are forked: each starts with zero counters and gets its own segment
    only when it records something (here a phase in __getitem__)."""
    program = PythonProgram(
        textwrap.dedent("""
        import sys
        import alnair, alnair.auto, torch
        from torch.utils.data import DataLoader, Dataset
        class Decoded(Dataset):
            def __len__(self):
                return 24
            def __getitem__(self, i):
                with alnair.phase("decode"):
                    return torch.full((3,), float(i))
        loader = DataLoader(Decoded(), batch_size=6, num_workers=2, persistent_workers=True)
        for batch in loader:
            pass
        print("ready", flush=True)
        sys.stdin.readline()
        del loader  # shuts the workers down cleanly
        print("released", flush=True)
        sys.stdin.read()
    """),
        shm_dir,
    )

    def settled():
        r = python_records(shm_dir)
        workers = [w for pid, w in r.items() if pid != program.pid]
        done = len(workers) == 2 and sum(w.phases[0].count for w in workers) == 24
        return done and r[program.pid].epochs == 1 and r

    records = wait_until(settled)
    main = records.pop(program.pid)
    assert (main.steps, main.samples, main.epochs, main.phase_count) == (4, 24, 1, 0)
    assert main.flags == layout.PYTHON_TORCH
    for worker in records.values():
        assert worker.flags == layout.PYTHON_TORCH | layout.PYTHON_DATALOADER_WORKER
        assert (worker.steps, worker.phase_count, worker.phases[0].name) == (0, 1, b"decode")
    assert sum(w.phases[0].count for w in records.values()) == 24
    program.proc.stdin.write("go\n")
    program.proc.stdin.flush()
    assert read_line(program.proc.stdout, 30) == "released\n"
    # Workers end in os._exit, past atexit: they remove theirs in multiprocessing's exit hook.
    wait_until(lambda: list(python_records(shm_dir)) == [program.pid] and len(list(shm_dir.iterdir())) == 1)
    assert program.finish() == ""


def test_batches_of_any_shape_are_counted_and_never_break_the_loop(shm_dir):
    program = PythonProgram(
        textwrap.dedent("""
        import sys
        import alnair.auto, torch
        from torch.utils.data import DataLoader

        class Odd:
            shape = (None, 3)  # a leading dimension nobody can count

        batches = [
            {"input_ids": torch.zeros(5, 7)}, [torch.tensor(1.0), "label"], ["a", "b", "c"], Odd(), torch.zeros(4, 2)
        ]
        for batch in DataLoader(batches, batch_size=None, collate_fn=lambda b: b):
            pass
        print("ready", flush=True)
        sys.stdin.read()
    """),
        shm_dir,
    )
    record = wait_until(lambda: (r := python_records(shm_dir).get(program.pid)) and r.epochs == 1 and r)
    assert (record.steps, record.samples) == (5, 5 + 2 + 3 + 0 + 4)
    assert program.finish() == ""


def test_samples_are_the_items_the_sampler_batched_whatever_collate_makes_of_them(shm_dir):
    program = PythonProgram(
        textwrap.dedent("""
        import sys
        import alnair.auto, torch
        from torch.utils.data import DataLoader
        pairs = lambda items: torch.zeros(2 * len(items), 3)  # a collate that doubles the leading dimension
        for drop_last in (False, True):
            for batch in DataLoader(list(range(10)), batch_size=4, collate_fn=pairs, drop_last=drop_last):
                pass
        print("ready", flush=True)
        sys.stdin.read()
    """),
        shm_dir,
    )
    record = wait_until(lambda: (r := python_records(shm_dir).get(program.pid)) and r.epochs == 2 and r)
    assert (record.steps, record.samples) == (3 + 2, 10 + 8)
    assert program.finish() == ""


def test_a_loop_that_breaks_or_meets_a_bad_item_counts_exactly_the_batches_it_took(shm_dir):
    program = PythonProgram(
        textwrap.dedent("""
        import sys, time
        import alnair.auto, torch
        from torch.utils.data import DataLoader, Dataset
        from alnair.intercept.this_process import RECORDER

        class Flaky(Dataset):
            def __len__(self):
                return 12
            def __getitem__(self, i):
                if i == 5:
                    raise ValueError("a bad item")
                return torch.zeros(2)

        for i, batch in enumerate(DataLoader(list(range(12)), batch_size=4)):
            if i == 1:
                break  # 2 batches of 4, no epoch
        it = iter(DataLoader(Flaky(), batch_size=3))
        next(it)
        try:
            next(it)  # items 3-5
        except ValueError:
            pass
        for batch in it:  # 2 more batches of 3, then an epoch
            pass
        del it
        for batch in DataLoader(list(range(10)), batch_size=4):  # 4 + 4 + 2, an epoch
            pass
        deadline = time.monotonic() + 10
        while RECORDER.passes and time.monotonic() < deadline:  # each pass is dropped once folded
            time.sleep(0.01)
        print("ready", len(RECORDER.passes), flush=True)
        sys.stdin.read()
    """),
        shm_dir,
    )
    assert program.ready_line == ["0"]
    record = wait_until(lambda: (r := python_records(shm_dir).get(program.pid)) and r.epochs == 2 and r)
    assert (record.steps, record.samples, record.epochs) == (2 + 3 + 3, 8 + 9 + 10, 2)
    assert program.finish() == ""


def test_without_a_segment_the_loop_logs_nothing_and_runs_on(tmp_path):
    program = PythonProgram(
        textwrap.dedent("""
        import sys
        import alnair.auto, torch
        from torch.utils.data import DataLoader
        from alnair.intercept.this_process import RECORDER

        for batch in DataLoader(list(range(10)), batch_size=2):
            pass
        print("ready", len(RECORDER.passes), flush=True)  # nothing would fold a pass's log: none is kept
        sys.stdin.read()
    """),
        tmp_path / "missing",
    )
    assert program.ready_line == ["0"]
    errors = program.finish().splitlines()
    assert len(errors) == 1 and errors[0].startswith("alnair: python metrics off, cannot create a segment:")
