"""The summary a job's profile prints on stderr when it is written: the job, each GPU, training (docs/profile.md)."""

from __future__ import annotations

from collections import defaultdict

from alnair.abi.records import OTHER_KERNELS, as_text

from .profile import LIMIT_FIELDS, gpu_key

COMMAND_SHOWN_AT_MOST = 100  # characters of the command line
SUMMARY_KERNELS, KERNEL_SHOWN_AT_MOST = 5, 48  # kernels on each GPU's line, and characters of each name
ARROWS = {"host_to_device": "host->device", "device_to_host": "device->host", "device_to_device": "device->device"}


def summary(profile: dict, path: str) -> str:
    """A few lines for a person: the job, then each device, then training."""
    lines = [
        f"alnair: profile of `{_command_words(profile['command'])}` ({_exit_words(profile['exit'])}) in {path}",
        "  " + "; ".join(_job_facts(profile)),
    ]
    limits = _limits_by_device(profile["processes"])
    for device in profile["devices"]:
        lines += _device_lines(device, limits.get(gpu_key(device), set()), profile["wall_ns"])
    if profile["training"]:
        lines.append("  training: " + _training_words(profile["training"]))
    return "\n".join(lines)


def _command_words(command: list[str]) -> str:
    """On one line (controls shown as U+FFFD), cut short."""
    return _cut(as_text(" ".join(command)), COMMAND_SHOWN_AT_MOST)


def _cut(line: str, at_most: int) -> str:
    return line if len(line) <= at_most else line[: at_most - 3] + "..."


def _exit_words(exit_: dict) -> str:
    return f"killed by {exit_['name']}" if "signal" in exit_ else f"exit {exit_['code']}"


def _job_facts(profile: dict) -> list[str]:
    facts = [f"wall {_seconds(profile['wall_ns'])}"]
    for field, words in (("first_allocation_ns", "first allocation"), ("first_launch_ns", "first launch")):
        facts.append(f"{words} {_seconds(profile[field])}" if profile[field] is not None else f"no {words}")
    processes = profile["processes"]
    facts.append(f"{len(processes)} process{'es' if len(processes) != 1 else ''} published counters")
    return facts


def _limits_by_device(processes: list[dict]) -> dict[str, set[tuple]]:
    limits: dict[str, set[tuple]] = defaultdict(set)
    for process in processes:
        for device in process.get("cuda", {}).get("devices", []):
            if any(device[field] for field in LIMIT_FIELDS):
                limits[gpu_key(device)].add(tuple(device[field] for field in LIMIT_FIELDS))
    return limits


def _device_lines(device: dict, limits: set[tuple], wall_ns: int) -> list[str]:
    gpu_time = (
        f"GPU time {_seconds(device['gpu_time_ns'])} ({device['gpu_time_ns'] / wall_ns:.0%} of wall)"
        if device["gpu_time_ns"] is not None and wall_ns
        else "GPU time not measured"
    )
    graphs = f", {device['graph_launches']:,} graphs" if device["graph_launches"] else ""
    facts = [gpu_time, f"peak memory {_bytes(device['peak_bytes'])}", f"{device['kernel_launches']:,} launches{graphs}"]
    facts += [_limit_words(limit) for limit in sorted(limits)]
    if device["throttled_ns"]:
        facts.append(f"throttled {_seconds(device['throttled_ns'])}")
    lines = [f"  {device['uuid'] or gpu_key(device) + ' (UUID not known)'}: " + ", ".join(facts)]
    copies = device.get("copies", {})
    moved = [
        f"{ARROWS[name]} {c['copies']:,} ({_bytes(c['bytes'])}, {_bytes(c['bytes_per_second'])}/s"
        + (f", sync {_seconds(c['sync_ns'])})" if c["sync_ns"] else ")")
        for name, c in copies.items()
        if c["copies"]
    ]
    if moved:
        lines.append("    copies: " + "; ".join(moved))
    named = [k for k in device.get("kernels", ()) if k["name"] != OTHER_KERNELS][:SUMMARY_KERNELS]
    if named:
        lines.append(
            "    top kernels: " + "; ".join(f"{_cut(k['name'], KERNEL_SHOWN_AT_MOST)} {k['launches']:,}" for k in named)
        )
    return lines


def _limit_words(limit: tuple) -> str:
    memory, cap, share = limit
    words = [f"memory limit {_bytes(memory)}"] if memory else []
    words += [f"compute cap {cap}%"] if cap else []
    words += [f"compute share {share}%"] if share else []
    return ", ".join(words)


def _training_words(training: dict) -> str:
    words = [f"{training['steps']:,} steps", f"{training['samples']:,} samples"]
    if training["samples_per_second"] is not None:
        words.append(f"{training['samples_per_second']:,.1f} samples/s")
    if training["data_stall_fraction"] is not None:
        words.append(f"data stall {training['data_stall_fraction']:.1%}")
    return ", ".join(words)


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:.2f} s" if ns >= 1e8 else f"{ns / 1e6:.1f} ms"


BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _bytes(n: float) -> str:
    power = 0
    while n >= 1024 and power < len(BYTE_UNITS) - 1:
        n, power = n / 1024, power + 1
    return f"{n:.0f} B" if power == 0 else f"{n:.1f} {BYTE_UNITS[power]}"
