#!/usr/bin/env python3
"""The code an op runs, from a callgrind file written with --dump-instr=yes: the distinct
instructions executed at least once per op on average, and the 64-byte lines of code they
lie in (what the instruction cache must hold for one op). With --functions, the lines per
function, most first.

    footprint.py CALLGRIND_FILE OPS [--functions]
"""
import collections
import sys

from cgcosts import read


def main():
    path, ops = sys.argv[1], int(sys.argv[2])
    cost, where = read(path)
    hot = [k for k, c in cost.items() if c * 2 >= ops]
    lines = {(ob, a >> 6) for ob, a in hot}
    print(f"{len(hot)} distinct instructions, {len(lines)} lines of code ({len(lines) * 64} bytes) per op")
    if "--functions" in sys.argv:
        per = collections.defaultdict(set)
        for ob, a in hot:
            per[where[(ob, a)]].add((ob, a >> 6))
        for name, ls in sorted(per.items(), key=lambda kv: -len(kv[1])):
            print(f"{len(ls):5d}  {name[:160]}")


if __name__ == "__main__":
    main()
