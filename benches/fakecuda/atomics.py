#!/usr/bin/env python3
"""Atomic read-modify-write instructions an op runs (x86-64: `lock`-prefixed ones, and
`xchg` with memory, which locks without the prefix), from a callgrind file written with
--dump-instr=yes: each such instruction's executions, per op, by function.

    atomics.py CALLGRIND_FILE OPS
"""
import collections
import re
import subprocess
import sys

from cgcosts import read


def atomic_addresses(path):
    """Addresses of the atomic instructions of the object file at `path`."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\s+(.*)$", line)
        if not m:
            continue
        ins = m.group(2)
        if ins.startswith("lock ") or (ins.startswith("xchg") and "(" in ins):
            found.add(int(m.group(1), 16))
    return found


def main():
    path, ops = sys.argv[1], int(sys.argv[2])
    cost, where = read(path)
    atomics = {o: atomic_addresses(o) for o in {o for o, _ in cost} if o}
    per_fn = collections.Counter()
    for (o, a), c in cost.items():
        if a in atomics.get(o, ()):
            per_fn[where[(o, a)]] += c / ops
    total = sum(per_fn.values())
    print(f"{total:.1f} atomic instructions per op")
    for name, n in per_fn.most_common():
        if n >= 0.5:
            print(f"{n:6.1f}  {name[:150]}")


if __name__ == "__main__":
    main()
