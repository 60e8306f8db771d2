#!/usr/bin/env bash
# Runs the locus GPU bench and the PyTorch baseline on this GPU machine and prints one
# table. From the project root, after ../shared/tools/gpu-bundle (which puts the bench
# binary in .gpu/benches/), or with a Rust toolchain (cargo bench --bench gpu):
#     bash benches/compare.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
export LOCUS_BACKEND=${LOCUS_BACKEND:-cuda}
if [ -x .gpu/benches/gpu ]; then
  .gpu/benches/gpu > "$out/locus.tsv"
else
  cargo bench --bench gpu > "$out/locus.tsv"
fi
PYTHONUNBUFFERED=1 python3 benches/torch_baseline.py > "$out/torch.tsv"
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  head -1 "$out/torch.tsv"
} > "$out/header.txt"
python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
def load(path):
    rows = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, value, unit, note = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
        rows[name] = (None if value == "n/a" else float(value), unit, note)
    return rows
locus, torch = load(f"{out}/locus.tsv"), load(f"{out}/torch.tsv")
# The ceiling each row is held against, and whether bigger is better.
def ceiling(name):
    if name.startswith(("large_", "sum_")):
        return "ceiling_d2d_copy_kernel"
    if name.startswith("small_add_1k"):
        return "ceiling_launch_floor"
    for d in ("h2d", "d2h"):
        if name.startswith(d):
            return f"ceiling_{d}_pinned_{name.rsplit('_', 1)[1]}"
    return None
print(open(f"{out}/header.txt").read().rstrip())
print()
print("| row | locus | unit | PyTorch | locus / PyTorch | ceiling | locus / ceiling |")
print("|---|---|---|---|---|---|---|")
fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
for name, (v, unit, note) in locus.items():
    t = torch.get(name, (None, unit, ""))[0]
    c = ceiling(name)
    cv = locus.get(c, (None,))[0] if c else None
    ratio = fmt(v / t) if v is not None and t else "n/a"
    cratio = fmt(v / cv) if v is not None and cv else ""
    print(f"| {name} | {fmt(v)} | {unit} | {fmt(t)} | {ratio} | {fmt(cv) if c else ''} | {cratio} |")
print()
print("Ratios are locus / reference: above 1 is better for GB/s and TFLOP/s, below 1 is better for us and ns.")
PY
