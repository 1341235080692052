"""A share lends what its peer leaves idle (the GPU sharing issue's item 2, what it must show (b)): two copies of a
training loop (tests/gpu/training_loops.py) with ALNAIR_COMPUTE_SHARE=50 each, one stepping all the time, the other
busy 1 s and idle 1 s in turn.

    python3 tests/gpu/check_share_lending.py [--loops resnet18:128,transformer:32] [--seconds 10]

For each loop: its solo rate without the intercept's limits; the steady loop alone with its share (target >= 95% of
solo); then the pair: the steady loop's rate while the other idles (target >= 90% of solo) and while both step
(target 50 +- 5% of solo), and the other's rate while it steps. Steps are placed by the time they ended. Results in
a table and $OUT/share_lending.json.
"""

from __future__ import annotations

import argparse
import sys

from training_loops import finish, loops, new_shm_dir, prepare, read_rate, save, start, tell, wait_ready

SHARE = {"ALNAIR_COMPUTE_SHARE": "50"}


def run(model: str, batch: int, seconds: float, sides: list[tuple[dict | None, str]]) -> list[dict]:
    """Children (env, on:off) stepping together: each one's rate line and step times."""
    shm = new_shm_dir()
    children = [start(model, batch, seconds, shm, env, on_off=on_off) for env, on_off in sides]
    wait_ready(children)
    tell(children)
    results = [read_rate(child) for child in children]
    finish(children)
    return [{"steps_per_s": float(rate[1]), **times} for rate, times in results]


def rate_in(ends: list[float], spans: list[tuple[float, float]]) -> float:
    """Steps per second that ended inside the spans."""
    inside = sum(1 for t in ends if any(a <= t < b for a, b in spans))
    return inside / sum(b - a for a, b in spans)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", default="resnet18:128,transformer:32")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    prepare()
    report = []
    for loop, model, batch in loops(args.loops):
        [solo] = run(model, batch, args.seconds, [(None, "0:0")])
        [alone] = run(model, batch, args.seconds, [(SHARE, "0:0")])
        steady, on_off = run(model, batch, args.seconds, [(SHARE, "0:0"), (SHARE, "1:1")])
        t0, end = on_off["start"], on_off["start"] + args.seconds
        # the first second of each phase is measured after 0.1 s: the switch, and the 30 ms the shares lag
        both = [(t0 + k + 0.1, t0 + k + 1) for k in range(0, int(args.seconds), 2) if t0 + k + 1 <= end]
        idle = [(t0 + k + 0.1, t0 + k + 1) for k in range(1, int(args.seconds), 2) if t0 + k + 1 <= end]
        row = {
            "loop": loop,
            "solo_steps_per_s": solo["steps_per_s"],
            "alone_with_share": alone["steps_per_s"] / solo["steps_per_s"],
            "steady_while_peer_idles": rate_in(steady["ends"], idle) / solo["steps_per_s"],
            "steady_while_both_step": rate_in(steady["ends"], both) / solo["steps_per_s"],
            "peer_while_both_step": rate_in(on_off["ends"], both) / solo["steps_per_s"],
        }
        report.append(row)
        print(
            f"{loop:16s} solo {solo['steps_per_s']:7.2f} steps/s; with a 50% share alone "
            f"{100 * row['alone_with_share']:5.1f}%"
            f"; pair: while the peer idles {100 * row['steady_while_peer_idles']:5.1f}%, while both step "
            f"{100 * row['steady_while_both_step']:5.1f}% and {100 * row['peer_while_both_step']:5.1f}% (of solo)",
            flush=True,
        )
    save(report, "share_lending.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
