"""Reads a callgrind file written with --dump-instr=yes: each instruction's own cost (its
executions, for the Ir event), by object and address, with the function it is in. Shared by
footprint.py and atomics.py."""
import collections
import re

POS = re.compile(r"^(0x[0-9a-f]+|\+\d+|-\d+|\*)$")
NAMED = re.compile(r"^c?(ob|fn)=\((\d+)\)(?: (.*))?$")


def read(path):
    """({(object, address): executions}, {(object, address): function})."""
    cost = collections.Counter()
    where = {}
    names = {"ob": {}, "fn": {}}
    cur = {"ob": "", "fn": ""}
    addr, after_call = 0, False
    for line in open(path):
        line = line.rstrip("\n")
        m = NAMED.match(line)
        if m:
            kind, key, name = m.groups()
            if name:
                names[kind][key] = name
            if not line.startswith("c"):
                cur[kind] = names[kind].get(key, key)
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
        cost[(cur["ob"], addr)] += int(parts[2])
        where[(cur["ob"], addr)] = cur["fn"]
    return cost, where
