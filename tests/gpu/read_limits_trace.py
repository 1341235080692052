"""What a `check_limits_training.py --trace` run says of how each child's published GPU time grew.

    python3 tests/gpu/read_limits_trace.py OUT/trace_limits_training_trace.json

Per run and child, over the span the children stepped: the GPU time, busy time and throttled time published, as
parts of the span; how the GPU time grew against the busy time in each 20 ms record (a ms busy beside one busy
peer counts half, so a part near 1 means the busy time counted undivided); its steps per second in the first half
second, the next and the rest; and the GPU time against NVML's busy time per sample period. Then the turns, from
the share table's words: each child's turns (how many, how long), holds and due time, and the handovers: time
some process held while no turn ran (the GPU idles for a turn not yet started) and time a turn ran beside a peer
that neither held nor had a turn (they time-slice); last, the children's GPU time summed in the records where a
turn was due or taken and in the others. It reads; it asserts nothing.
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys


def growth(records: list, child: int, key: str) -> list[float]:
    """The published figure's growth between consecutive records (records without the child give none)."""
    values = [r[2 + child].get(key) for r in records]
    return [b - a for a, b in zip(values, values[1:]) if a is not None and b is not None]


def stepping_records(run: dict) -> list:
    """The records from the first child's first step start to the last child's last step end."""
    start = min(t["start"] for t in run["step_times"])
    end = max(t["ends"][-1] for t in run["step_times"] if t["ends"])
    return [r for r in run["records"] if start <= r[1] <= end]


def per_period(run: dict, records: list, child: int) -> list[tuple[float, float]]:
    """(NVML's busy part, the child's GPU time / the period) for each sample period inside the records."""
    pairs = []
    samples = run["nvml_samples"]
    for (t0, _), (t1, busy) in zip(samples, samples[1:]):
        inside = [r for r in records if t0 / 1e6 <= r[0] <= t1 / 1e6 and r[2 + child]]
        if len(inside) >= 2:
            grew = inside[-1][2 + child]["gpu_time_s"] - inside[0][2 + child]["gpu_time_s"]
            pairs.append((busy / 100, grew / (inside[-1][0] - inside[0][0])))
    return pairs


def rates_by_phase(ends: list[float], start: float, span: float) -> list[str]:
    """Steps per second in the first half second, the next half, and the rest: a limit that lets a process run
    ahead after an idle spell shows in the first."""
    bounds = [(0.0, 0.5), (0.5, 1.0), (1.0, span)]
    return [f"{a:g}-{b:.1f} s: {sum(a <= t - start < b for t in ends) / (b - a):.1f}" for a, b in bounds if b > a]


def describe(run: dict) -> str:
    records = stepping_records(run)
    span = records[-1][1] - records[0][1]
    lines = [f"{'/'.join(run['limits'])}: {span:.2f} s, {len(records)} records"]
    for child, limit in enumerate(run["limits"]):
        grew = {k: growth(records, child, k) for k in ("gpu_time_s", "busy_s", "throttled_s")}
        gpu, busy, throttled = (sum(g) for g in grew.values())
        parts = [g / b for g, b in zip(grew["gpu_time_s"], grew["busy_s"]) if b > 0.002]
        ends = run["step_times"][child]["ends"]
        steps = sum(1 for t in ends if records[0][1] <= t <= records[-1][1])
        periods = per_period(run, records, child)
        lines.append(
            f"  {limit:4s} GPU time {100 * gpu / span:5.1f}%  busy {100 * busy / span:5.1f}%  throttled"
            f" {100 * throttled / span:5.1f}%  steps {steps}  GPU time / busy per record: median"
            f" {statistics.median(parts) if parts else float('nan'):.2f}, above 0.75 in {sum(p > 0.75 for p in parts)}"
            f" of {len(parts)}"
        )
        lines.append("       steps/s " + ", ".join(rates_by_phase(ends, run["step_times"][child]["start"], span)))
        if periods:
            lines.append(
                "       per NVML period (busy%: GPU time%): "
                + " ".join(f"{100 * b:.0f}:{100 * g:.1f}" for b, g in periods)
            )
    return "\n".join(lines + describe_turns(run, records[0][1], records[-1][1]) + by_turns(run, records))


def turn_intervals(run: dict, start: float, end: float) -> list[tuple[float, dict[int, int]]]:
    """(seconds, {pid: turn word}) for each stretch between changes of the words, inside [start, end]."""
    words = run.get("turn_words") or []
    stretches = []
    for (t0, *slots), (t1, *_) in zip(words, words[1:] + [[end]]):
        a, b = max(t0, start), min(t1, end)
        if b > a:
            stretches.append((b - a, {pid: word for pid, word in slots}))
    return stretches


def turn_lengths(stretches: list, pid: int, taken_of) -> list[float]:
    """The length of each of pid's turns (a turn still taken at the end counts as far as it went)."""
    lengths, length = [], 0.0
    for seconds, words in stretches:
        if taken_of(words.get(pid, 0)):
            length += seconds
        elif length:
            lengths.append(length)
            length = 0.0
    return lengths + [length] if length else lengths


def describe_turns(run: dict, start: float, end: float) -> list[str]:
    from alnair.abi import layout

    integers = layout.DECLARATIONS.integers
    shift, holding = integers["ALNAIR_TURN_STATE_SHIFT"], integers["ALNAIR_TURN_HOLDING"]
    taken, due = integers["ALNAIR_TURN_TAKEN"], integers["ALNAIR_TURN_DUE"]
    stretches = turn_intervals(run, start, end)
    if not stretches:
        return []
    span = end - start
    names = dict(zip(run.get("pids", []), run["limits"]))
    lines = ["  turns (parts of the span):"]
    for pid in sorted({pid for _, words in stretches for pid in words}):
        lengths = turn_lengths(stretches, pid, lambda word: word >> shift & 3 == taken)
        held = sum(s for s, w in stretches if w.get(pid, 0) & holding)
        due_s = sum(s for s, w in stretches if w.get(pid, 0) >> shift & 3 == due)
        median_ms = 1000 * statistics.median(lengths) if lengths else float("nan")
        lines.append(
            f"    {names.get(pid, pid)!s:6s} {len(lengths)} turns, taken {100 * sum(lengths) / span:.1f}% (median"
            f" {median_ms:.1f} ms), holding {100 * held / span:.1f}%, due {100 * due_s / span:.1f}%"
        )
    idle_hold = beside = 0.0
    for seconds, words in stretches:
        states = {pid: w >> shift & 3 for pid, w in words.items()}
        if taken not in states.values():
            idle_hold += seconds if any(w & holding for w in words.values()) else 0.0
        elif any(not states[p] and not w & holding for p, w in words.items()):
            beside += seconds
    lines.append(
        f"    handovers: held with no turn running {100 * idle_hold / span:.1f}%, a turn beside a peer neither holding"
        f" nor in a turn {100 * beside / span:.1f}%"
    )
    return lines


def by_turns(run: dict, records: list) -> list[str]:
    """The children's GPU time summed, in the records where some turn was due or taken and in the others: whether
    the GPU ran as busy with turns in play as without (the published time lags the words by up to ~30 ms, so a
    record at a change of phase may carry some of the other's)."""
    from alnair.abi import layout

    shift = layout.DECLARATIONS.integers["ALNAIR_TURN_STATE_SHIFT"]
    words = run.get("turn_words") or []
    stamps = [w[0] for w in words]
    phases: dict[str, list[float]] = {"turns in play": [], "no turns": []}
    for a, b in zip(records, records[1:]) if words else ():
        if not all(a[2:]) or not all(b[2:]):
            continue
        first = max(bisect.bisect_right(stamps, a[1]) - 1, 0)
        last = bisect.bisect_right(stamps, b[1])
        in_play = any(word >> shift & 3 for w in words[first:last] for _, word in w[1:])
        grew = sum(y["gpu_time_s"] - x["gpu_time_s"] for x, y in zip(a[2:], b[2:]))
        phases["turns in play" if in_play else "no turns"].append(grew / (b[0] - a[0]))
    counted = sum(len(v) for v in phases.values())
    if not counted:
        return []
    return [
        "  GPU time summed over the children: "
        + ", ".join(
            f"{k} {100 * statistics.mean(v):.1f}% ({100 * len(v) / counted:.0f}% of the records)"
            for k, v in phases.items()
            if v
        )
    ]


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: read_limits_trace.py TRACE_JSON", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        for run in json.load(f):
            print(describe(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
