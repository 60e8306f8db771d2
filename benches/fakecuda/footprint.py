#!/usr/bin/env python3
"""The code an op runs, from a callgrind file written with --dump-instr=yes: the distinct
instructions executed at least once per op on average, and the 64-byte lines of code they
lie in (what the instruction cache must hold for one op). With --functions, the lines per
function, most first.

    footprint.py CALLGRIND_FILE OPS [--functions]
"""
import collections
import re
import sys

POS = re.compile(r"^(0x[0-9a-f]+|\+\d+|-\d+|\*)$")
FN = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")


def main():
    path, ops = sys.argv[1], int(sys.argv[2])
    cost = collections.Counter()
    fn_of = {}
    names = {}
    addr, fn, after_call = 0, "", False
    for line in open(path):
        line = line.rstrip("\n")
        m = FN.match(line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("fn="):
                fn = names.get(m.group(1), m.group(1))
            continue
        if line.startswith("calls="):
            after_call = True  # the next cost line is the call's inclusive cost
            continue
        parts = line.split()
        if len(parts) != 3 or not POS.match(parts[0]):
            continue
        t = parts[0]
        if t.startswith("0x"):
            addr = int(t, 16)
        elif t[0] == "+":
            addr += int(t[1:])
        elif t[0] == "-":
            addr -= int(t[1:])
        if after_call:
            after_call = False
            continue
        cost[addr] += int(parts[2])
        fn_of[addr] = fn
    hot = [a for a, c in cost.items() if c * 2 >= ops]
    lines = {a >> 6 for a in hot}
    print(f"{len(hot)} distinct instructions, {len(lines)} lines of code ({len(lines) * 64} bytes) per op")
    if "--functions" in sys.argv:
        per = collections.defaultdict(set)
        for a in hot:
            per[fn_of[a]].add(a >> 6)
        for name, ls in sorted(per.items(), key=lambda kv: -len(kv[1])):
            print(f"{len(ls):5d}  {name[:160]}")


if __name__ == "__main__":
    main()
