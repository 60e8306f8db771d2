#!/usr/bin/env python3
"""Sums a locus trace's device slices by op name: `python3 benches/trace_summary.py
TRACE.json [STEPS]` prints, per op name on the device streams' tracks, the slices per
step, device microseconds per step and per slice, largest first, and the totals. With
`--torch` it reads PyTorch's profiler table instead (see torch_baseline.py
--profile-tiny-gpt). Made for `gpu train-trace` (issue 34's graphed-step gap): where a
step's device time goes, op by op."""
import json
import sys
from collections import defaultdict


def load(path):
    text = open(path).read().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"  # a trace whose writer did not close it
    return json.loads(text)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    steps = int(args[1]) if len(args) > 1 else 1
    events = load(args[0])
    streams = {(e["pid"], e["tid"]) for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and "stream" in str(e["args"].get("name", ""))}
    by = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and (e["pid"], e["tid"]) in streams:
            by[e["name"]][0] += 1
            by[e["name"]][1] += float(e["dur"])
    total_n = sum(n for n, _ in by.values())
    total_t = sum(t for _, t in by.values())
    print(f"# {len(streams)} stream track(s); per step of {steps}: {total_n / steps:.0f} slices, {total_t / steps:.1f} us")
    print("# op\tslices/step\tus/step\tus/slice")
    for name, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{name}\t{n / steps:.1f}\t{t / steps:.1f}\t{t / n:.2f}")


if __name__ == "__main__":
    main()
