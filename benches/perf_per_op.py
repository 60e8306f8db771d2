#!/usr/bin/env python3
"""Per-op host counters from the `perfstat` step of benches/gpu_call.sh: for OP, perf stat
of `gpu breakdown-loop OP 1` and `... 3`; each counter's difference over the difference of
the ops the two loops ran, so the process's start (kernel compiles, context) drops out.

    perf_per_op.py DIR OP
"""
import re
import sys


def read(d, op, s):
    ops = None
    for line in open(f"{d}/{op}_{s}.out"):
        m = re.search(r"(\d+) ops in", line)
        if m:
            ops = int(m.group(1))
    counts = {}
    for line in open(f"{d}/{op}_{s}.csv"):
        f = line.strip().split(",")
        if len(f) < 3 or line.startswith("#"):
            continue
        try:
            counts[f[2]] = float(f[0])
        except ValueError:
            counts[f[2]] = None  # <not supported> or <not counted>
    return ops, counts


def main():
    d, op = sys.argv[1], sys.argv[2]
    (n1, c1), (n3, c3) = read(d, op, 1), read(d, op, 3)
    if not n1 or not n3 or n3 <= n1:
        print(f"{op}: the loops' op counts are missing")
        return
    parts = []
    for k in c3:
        a, b = c1.get(k), c3.get(k)
        if a is None or b is None:
            parts.append(f"{k} n/a")
        else:
            parts.append(f"{k} {(b - a) / (n3 - n1):.4g}")
    print(f"{op}: per op over {n3 - n1} ops: " + ", ".join(parts))


if __name__ == "__main__":
    main()
