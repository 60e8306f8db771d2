#!/usr/bin/env python3
"""Draws the samples of benches/soak.rs as an SVG, one panel per series, with time in
minutes and the warm-up (the first 10% of the run) shaded. Standard library only.

    python3 benches/soak_plot.py soak.tsv docs/images/soak.svg [--title "..."]

Every series is drawn from zero, so a line reads at the scale of the value itself: a 1%
rise is 1% of the panel's height.
"""

import argparse
import math
import sys
from xml.sax.saxutils import escape

MIB = 1024 * 1024
# (column, panel title, divisor, log scale)
PANELS = [
    ("allocated", "allocated (MiB, all devices)", MIB, False),
    ("reserved", "reserved (MiB, all devices)", MIB, False),
    ("pinned", "pinned, held by the pool (MiB)", MIB, False),
    ("streams", "streams", 1, False),
    ("threads", "threads", 1, False),
    ("rss_kib", "RSS (MiB, not judged)", 1024, False),
    ("loss", "training loss (mean since the last sample)", 1, False),
]
WARM_UP = 0.10

COLS = 2
PANEL_W, PANEL_H = 420, 160
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 70, 20, 36, 38
TITLE_H = 40


def read(path):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    cols = {name: [float(r[i]) for r in rows] for i, name in enumerate(header)}
    return cols


def nice_step(span, ticks=4):
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 100 or v == int(v):
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def panel(out, x0, y0, title, t, ys, log, t_max):
    """One panel whose top-left corner is at (x0, y0)."""
    pw, ph = PANEL_W - MARGIN_L - MARGIN_R, PANEL_H - MARGIN_T - MARGIN_B
    left, top = x0 + MARGIN_L, y0 + MARGIN_T
    if log:
        pos = [y for y in ys if y > 0]
        lo = math.floor(math.log10(min(pos))) if pos else -1
        hi = math.ceil(math.log10(max(pos))) if pos else 0
        hi = max(hi, lo + 1)
        yticks = [10.0**e for e in range(lo, hi + 1)]

        def fy(v):
            v = max(v, 10.0**lo)
            return top + ph - (math.log10(v) - lo) / (hi - lo) * ph
    else:
        top_v = max(ys) if ys else 1.0
        step = nice_step(top_v * 1.1 if top_v > 0 else 1.0)
        hi = step * math.ceil(top_v * 1.1 / step) if top_v > 0 else step * 4
        yticks = [i * step for i in range(int(round(hi / step)) + 1)]

        def fy(v):
            return top + ph - v / hi * ph

    def fx(v):
        return left + v / t_max * pw

    out.append(f'<text x="{left}" y="{y0 + 15}" class="title">{escape(title)}</text>')
    # Warm-up.
    out.append(
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{fx(t_max * WARM_UP) - left:.1f}" height="{ph}" class="warm"/>'
    )
    for v in yticks:
        y = fy(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" class="grid"/>')
        label = f"1e{int(round(math.log10(v)))}" if log else fmt(v)
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="ytick">{label}</text>')
    xstep = nice_step(t_max, 5)
    i = 0
    while i * xstep <= t_max + 1e-9:
        x = fx(i * xstep)
        out.append(f'<line x1="{x:.1f}" y1="{top + ph}" x2="{x:.1f}" y2="{top + ph + 4}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" class="xtick">{fmt(i * xstep)}</text>')
        i += 1
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 31}" class="xlabel">minutes</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>')
    points = " ".join(f"{fx(a):.1f},{fy(b):.1f}" for a, b in zip(t, ys))
    out.append(f'<polyline points="{points}" class="line"/>')
    after = [y for a, y in zip(t, ys) if a >= t_max * WARM_UP]
    if after and not log:
        note = f"after warm-up: {min(after):.4g} to {max(after):.4g}"
        out.append(f'<text x="{left}" y="{y0 + 29}" class="note">{escape(note)}</text>')


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tsv")
    p.add_argument("svg")
    p.add_argument("--title", default="locus soak")
    a = p.parse_args()
    cols = read(a.tsv)
    t = [v / 60.0 for v in cols["t_s"]]
    if not t:
        sys.exit("no samples")
    t_max = max(t[-1], 1e-9)
    panels = [pn for pn in PANELS if pn[0] in cols]
    rows = math.ceil(len(panels) / COLS)
    width, height = COLS * PANEL_W, TITLE_H + rows * PANEL_H
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        "<style>"
        ".title{font-size:13px;font-weight:bold}.note{font-size:11px;fill:#444}"
        ".ytick{font-size:10px;text-anchor:end;fill:#333}.xtick{font-size:10px;text-anchor:middle;fill:#333}"
        ".xlabel{font-size:10px;text-anchor:middle;fill:#555}.grid{stroke:#ddd;stroke-width:1}"
        ".axis{stroke:#333;stroke-width:1}.frame{fill:none;stroke:#333;stroke-width:1}"
        ".warm{fill:#eee}.line{fill:none;stroke:#1f77b4;stroke-width:1.3;stroke-linejoin:round}"
        ".head{font-size:15px;font-weight:bold}.sub{font-size:11px;fill:#555}"
        "</style>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="12" y="18" class="head">{escape(a.title)}</text>',
        f'<text x="12" y="33" class="sub">{len(t)} samples, one a second; '
        f"{int(cols['step'][-1])} steps; shaded: warm-up (first 10%)</text>",
    ]
    for i, (col, title, div, log) in enumerate(panels):
        x0, y0 = (i % COLS) * PANEL_W, TITLE_H + (i // COLS) * PANEL_H
        panel(out, x0, y0, title, t, [v / div for v in cols[col]], log, t_max)
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
