#!/usr/bin/env python3
"""Sums an Nsight Compute CSV of kernel durations by kernel name: `python3
benches/ncu_summary.py NCU.csv [REPLAYS]` prints, per kernel name, launches and device
microseconds per replay and per launch, largest first, and the totals. Made for the
graphed tiny_gpt step of both sides (issue 34), each run as

    ncu --nvtx --nvtx-include replay/ --graph-profiling node \\
        --metrics gpu__time_duration.sum --csv <program>

with `gpu train-graph-profile` or `torch_baseline.py --graph-profile-tiny-gpt` (two
replays each, so REPLAYS defaults to 2). Kernel durations only: the gaps between a
graph's nodes are not in them."""
import csv
import sys
from collections import defaultdict

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    replays = int(args[1]) if len(args) > 1 else 2
    lines = [l for l in open(args[0]) if l.startswith('"')]
    by = defaultdict(lambda: [0, 0.0])
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        us = value * SCALE.get(r["Metric Unit"], 1.0)
        name = r["Kernel Name"][:90]
        by[name][0] += 1
        by[name][1] += us
    n, t = sum(v[0] for v in by.values()), sum(v[1] for v in by.values())
    print(f"# per replay of {replays}: {n / replays:.0f} kernels, {t / replays:.1f} us of kernel time")
    print("# kernel\tlaunches/replay\tus/replay\tus/launch")
    for name, (count, total) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{name}\t{count / replays:.1f}\t{total / replays:.1f}\t{total / count:.2f}")


if __name__ == "__main__":
    main()
