#!/usr/bin/env python3
"""Writes pollute.c: `fake_pollute(void)`, which runs about KIB kibibytes of distinct
straight-line code and reads 256 KiB of data, as a real driver's launch runs much code of
its own between two of the program's ops (fakecuda.c calls it per launch when
FAKECUDA_POLLUTE=1). Each step mixes a running value with its own constant, so no
compiler folds two steps into one.

    genpollute.py OUT.c [KIB]
"""
import random
import sys


def main():
    out = sys.argv[1]
    kib = int(sys.argv[2]) if len(sys.argv) > 2 else 48
    steps = kib * 1024 // 14  # about 14 bytes of x86-64 per step at -O1
    rng = random.Random(35)
    lines = [
        "#include <stdint.h>",
        "static volatile uint64_t sink;",
        "static uint64_t data[256 * 1024 / 8];",
        "void fake_pollute(void) {",
        "    uint64_t x = sink;",
    ]
    for _ in range(steps):
        lines.append(f"    x ^= x >> {rng.randrange(7, 31)}; x *= 0x{rng.getrandbits(64) | 1:016x}ULL;")
    lines += [
        "    for (unsigned i = 0; i < sizeof data / sizeof data[0]; i += 8) x += data[i];",
        "    sink = x;",
        "}",
    ]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
