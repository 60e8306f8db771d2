#!/usr/bin/env bash
# Runs the locus GPU bench, the PyTorch baseline (twice: all rows, then the pageable
# copies again with THP_MEM_ALLOC_ENABLE=1) and the C++ baseline on this GPU machine,
# RUNS times, keeps each run's raw TSVs and prints one table: per row the median across
# runs of each run's median, with [min–max] over every timed sample of every run. From
# the project root, after ../shared/tools/gpu-bundle (which puts the bench binary in
# .gpu/benches/), or with a Rust toolchain (cargo bench --bench gpu):
#
#     bash benches/compare.sh [--runs N] [OUTDIR]    full method, 3 runs by default
#     bash benches/compare.sh --quick [OUTDIR]       one run, fewer samples (developers)
#     bash benches/compare.sh --summarize --runs N OUTDIR   the table again from OUTDIR/run1..N/
#                                                   (runs made by separate calls, gathered)
#
# OUTDIR defaults to benches/results/<UTC date and time>/ (a temporary directory with
# --quick); it gets run<i>/{locus,torch,torch_thp,cpp}.tsv, header.txt, summary.tsv and
# table.md. The C++ baseline (benches/cpp/baseline.cu) is built here with nvcc
# (-arch=$NVCC_ARCH, default sm_90); without nvcc its rows are n/a. Exits non-zero when
# a bench fails or the locus bench measured nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0; runs=""; out=""; summarize=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --summarize) summarize=1; shift ;;
    --runs) runs="${2:-}"; shift 2 || { echo "compare.sh: --runs needs a number" >&2; exit 2; } ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
qflag=""
if [ "$quick" = 1 ]; then qflag="--quick"; fi
runs=${runs:-$([ "$quick" = 1 ] && echo 1 || echo 3)}
case "$runs" in
  '' | *[!0-9]* | 0) echo "compare.sh: --runs takes a positive whole number, not '$runs'" >&2; exit 2 ;;
esac
if [ -z "$out" ]; then
  if [ "$quick" = 1 ]; then out=$(mktemp -d); else out="benches/results/$(date -u +%Y-%m-%dT%H%MZ)"; fi
fi
mkdir -p "$out"
export LOCUS_BACKEND=${LOCUS_BACKEND:-cuda}

# The commit measured: the one the bundle's binaries were built from (write it with
# `git rev-parse --short HEAD > .gpu/COMMIT` after gpu-bundle; a GPU machine's copy of
# the tree may carry stale git metadata), else git's, else unknown.
if [ -x .gpu/benches/gpu ] && [ -f .gpu/COMMIT ]; then
  commit="$(head -1 .gpu/COMMIT) (bundle)"
elif commit=$(git rev-parse --short HEAD 2>/dev/null); then
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
else
  commit=unknown
fi

# The C++ baseline, built once for all runs, outside OUTDIR.
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
nvcc_bin=$(command -v nvcc || true)
if [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc_bin=/usr/local/cuda/bin/nvcc; fi
cpp=""; cpp_why=""
if [ -z "$nvcc_bin" ]; then
  cpp_why="no nvcc on this machine"
elif "$nvcc_bin" -O3 -arch="${NVCC_ARCH:-sm_90}" -o "$build/baseline" benches/cpp/baseline.cu 2> "$build/nvcc.log"; then
  cpp="$build/baseline"
else
  cat "$build/nvcc.log" >&2
  cpp_why="nvcc failed to build benches/cpp/baseline.cu"
fi
[ -n "$cpp" ] || [ "$summarize" = 1 ] || echo "compare.sh: $cpp_why; the C++ rows are n/a" >&2
cpp_na() { # $1 = file, $2 = why
  {
    echo "# cpp baseline: not run ($2)"
    for r in cpp_guard_pair_same_device:ns cpp_guard_pair_switch_device:ns \
      cpp_launch_1k_add_submit:us/op cpp_launch_1k_add_sync:us/op \
      cpp_graph_chain20_replay:us/op cpp_graph_chain20_eager:us/op cpp_graph_chain20_capture:us \
      cpp_graph_breakdown_launch:us cpp_graph_breakdown_gpu:us cpp_graph_breakdown_sync:us \
      cpp_graph_breakdown_replay_sync:us cpp_graph_chain20_replay_second_stream:us/op \
      cpp_graph_breakdown_gpu_second_stream:us; do
      printf '%s\tn/a\t%s\t%s\tn/a\tn/a\n' "${r%%:*}" "${r#*:}" "$2"
    done
  } > "$1"
}

if [ "$summarize" = 1 ]; then
  [ -n "$out" ] || { echo "compare.sh: --summarize needs the OUTDIR of the runs" >&2; exit 2; }
  for i in $(seq 1 "$runs"); do
    for f in locus torch torch_thp cpp; do
      [ -f "$out/run$i/$f.tsv" ] || { echo "compare.sh: --summarize: no $out/run$i/$f.tsv" >&2; exit 2; }
    done
  done
fi
for i in $(seq 1 "$runs"); do
  [ "$summarize" = 1 ] && break
  d="$out/run$i"
  mkdir -p "$d"
  echo "compare.sh: run $i of $runs into $d" >&2
  if [ -x .gpu/benches/gpu ]; then
    locus=(.gpu/benches/gpu)
  else
    locus=(cargo bench --bench gpu --)
  fi
  # shellcheck disable=SC2086 # $qflag is empty or one word
  if ! "${locus[@]}" $qflag > "$d/locus.tsv"; then
    echo "compare.sh: the locus bench failed or measured nothing (see $d/locus.tsv)" >&2
    exit 1
  fi
  # The off cost of the trace hooks (issue 37): the same add from a build without them,
  # when one is there (built with RUSTFLAGS="--cfg locus_no_trace_hooks" into
  # .gpu/benches/gpu_nohooks; see docs/BENCHMARKS.md).
  if [ -x .gpu/benches/gpu_nohooks ]; then
    # shellcheck disable=SC2086
    .gpu/benches/gpu_nohooks trace $qflag | awk -F'\t' -v OFS='\t' \
      '$1 == "small_add_1k_submit" { $1 = "small_add_1k_submit_nohooks"; $4 = "the same add, a build without the trace hooks"; print }' \
      >> "$d/locus.tsv"
  fi
  if ! awk -F'\t' '!/^#/ && NF > 1 && $2 != "n/a" { found = 1 } END { exit !found }' "$d/locus.tsv"; then
    echo "compare.sh: the locus bench measured nothing (see $d/locus.tsv)" >&2
    exit 1
  fi
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 benches/torch_baseline.py $qflag > "$d/torch.tsv"
  # shellcheck disable=SC2086
  THP_MEM_ALLOC_ENABLE=1 PYTHONUNBUFFERED=1 python3 benches/torch_baseline.py $qflag --pageable-only \
    > "$d/torch_thp.tsv"
  if [ -z "$cpp" ]; then
    cpp_na "$d/cpp.tsv" "$cpp_why"
  # shellcheck disable=SC2086
  elif ! "$cpp" $qflag > "$d/cpp.tsv"; then
    echo "compare.sh: the C++ baseline failed; its rows are n/a" >&2
    cpp_na "$d/cpp.tsv" "the C++ baseline failed"
  fi
done

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) ${gpu:-unknown GPU}; commit $commit"
  head -1 "$out/run1/torch.tsv"
  head -1 "$out/run1/cpp.tsv"
  grep -m1 '^# method' "$out/run1/locus.tsv" || true
  echo "# $runs run(s)$([ "$quick" = 1 ] && echo ', --quick'); raw TSVs in $out/run*/"
} > "$out/header.txt"

PYTHONIOENCODING=utf-8 python3 - "$out" "$runs" <<'PY' | tee "$out/table.md"
import sys

out, runs = sys.argv[1], int(sys.argv[2])


def load(path):
    """Rows of one TSV: name -> (median, min, max, unit); None for n/a."""
    rows = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
        name, med, unit, _note, lo, hi = f
        num = lambda s: None if s in ("", "n/a") else float(s)
        m = num(med)
        rows[name] = (m, num(lo) if lo else m, num(hi) if hi else m, unit)
    return rows


def upper_median(v):
    v = sorted(v)
    return v[len(v) // 2]


def combine(source):
    """Across runs: the median of the runs' medians, the min of their mins, the max of
    their maxes, and the runs' medians themselves."""
    per_run = [load(f"{out}/run{i}/{source}.tsv") for i in range(1, runs + 1)]
    names = list(dict.fromkeys(n for r in per_run for n in r))
    rows = {}
    for n in names:
        got = [r[n] for r in per_run if n in r and r[n][0] is not None]
        unit = next(r[n][3] for r in per_run if n in r)
        if not got:
            rows[n] = (None, None, None, unit, [])
            continue
        meds = [g[0] for g in got]
        rows[n] = (upper_median(meds), min(g[1] for g in got), max(g[2] for g in got), unit, meds)
    return rows


locus, torch, thp, cpp = (combine(s) for s in ("locus", "torch", "torch_thp", "cpp"))
if not any(v[0] is not None for v in locus.values()):
    print("compare.sh: the locus bench measured nothing", file=sys.stderr)
    sys.exit(1)

with open(f"{out}/summary.tsv", "w") as f:
    f.write("# source\trow\tmedian\tunit\tmin\tmax\tmedian of each run\n")
    for source, rows in (("locus", locus), ("torch", torch), ("torch_thp", thp), ("cpp", cpp)):
        for n, (m, lo, hi, unit, meds) in rows.items():
            g = lambda v: "n/a" if v is None else f"{v:.3f}"
            f.write(f"{source}\t{n}\t{g(m)}\t{unit}\t{g(lo)}\t{g(hi)}\t{','.join(f'{x:.3f}' for x in meds)}\n")

# The C++ row that does the same work as a locus row.
CPP = {
    "guard_enter_exit_same_device": "cpp_guard_pair_same_device",
    "guard_enter_exit_switch_device": "cpp_guard_pair_switch_device",
    "small_add_1k_submit": "cpp_launch_1k_add_submit",
    "small_add_1k_sync": "cpp_launch_1k_add_sync",
    # A user kernel's launch against the raw launch of the same add.
    "user_kernel_1k_submit": "cpp_launch_1k_add_submit",
    # The raw CUDA graph of the same 20 launches, replayed once a second stream of the
    # process has run work, as locus's bench (and PyTorch's) has: the floor of the replay
    # row. From any stream's 8th launch on, every later replay of a 20-node graph in the
    # context runs ~3.5 us longer on the device, in C++ as in Rust (BENCHMARKS, sessions
    # 49 and 50); the plain C++ row, whose eager stream is gone before its graph's stream
    # is made, never reaches that state.
    "graph_chain20_replay": "cpp_graph_chain20_replay_second_stream",
    # The same graph replayed where the eager rows ran.
    "graph_chain20_replay_on_default": "cpp_graph_chain20_replay_second_stream",
    "graph_chain20_eager": "cpp_graph_chain20_eager",
    "graph_chain20_capture": "cpp_graph_chain20_capture",
    # A replay in parts, each part timed alike on both sides (graph_breakdown.rs).
    "graph_breakdown_launch": "cpp_graph_breakdown_launch",
    "graph_breakdown_gpu": "cpp_graph_breakdown_gpu_second_stream",
    "graph_breakdown_sync": "cpp_graph_breakdown_sync",
    "graph_breakdown_replay_sync": "cpp_graph_breakdown_replay_sync",
}

# PyTorch's row that does the same work as a locus row of another name (else the same name).
# PyTorch's replay() queues on the current stream, where its eager work ran.
TORCH_SAME = {"graph_chain20_replay_on_default": "graph_chain20_replay"}


def d2d_ceiling():
    """The better (higher median) of the copy engine and the copy kernel."""
    c = [n for n in ("ceiling_d2d_copy_engine", "ceiling_d2d_copy_kernel") if locus.get(n, (None,))[0] is not None]
    return max(c, key=lambda n: locus[n][0]) if c else None


def ceiling(name):
    base = name.removesuffix("_thp")
    # The add and the sum against raw kernels with their own read/write mix (issue 35);
    # the other large ops (one read per write) against the copy ceiling.
    mixed = {
        "large_add_1GiB": "ceiling_add_1GiB",
        "large_mul_1GiB": "ceiling_add_1GiB",
        "large_add_1GiB_bf16": "ceiling_add_1GiB",
        "sum_1GiB": "ceiling_sum_1GiB",
    }
    if base in mixed and locus.get(mixed[base], (None,))[0] is not None:
        return mixed[base]
    if base.startswith(("large_", "sum_")):
        return d2d_ceiling()
    if base == "small_add_1k_submit":
        return "ceiling_launch_floor"
    # Tracing on against the same batch with it off: the per-op cost of a trace (issue 37).
    if base == "small_add_1k_submit_traced":
        return "small_add_1k_submit"
    # A build without the hooks against this one, trace off: their off cost (about 1.0).
    if base == "small_add_1k_submit_nohooks":
        return "small_add_1k_submit"
    if base == "small_add_1k_sync":
        return "ceiling_launch_floor_sync"
    # A recorded op's backward against its forward submit (issue 35: at most 1.3).
    if base == "autograd_backward_1k_per_op":
        return "autograd_forward_1k_submit"
    for d in ("h2d", "d2h"):
        if base.startswith(d + "_"):
            return f"ceiling_{d}_pinned_{base.rsplit('_', 1)[1]}"
    return None


def cell(r):
    if r is None or r[0] is None:
        return "n/a"
    m, lo, hi = r[:3]
    return f"{m:.3f} [{lo:.3f}–{hi:.3f}]"


def ratio(a, b):
    return f"{a[0] / b[0]:.3f}" if a and b and a[0] is not None and b[0] else "n/a"


def line(name, v, unit, t=None, c=None, ceil=None):
    cv = locus.get(ceil) if ceil else None
    print(
        f"| {name} | {cell(v)} | {unit} | {cell(t) if t else ''} | {ratio(v, t) if t else ''} | "
        f"{cell(c) if c else ''} | {ratio(v, c) if c else ''} | {cell(cv) if ceil else ''} | "
        f"{ratio(v, cv) if ceil else ''} |"
    )


print(open(f"{out}/header.txt").read().rstrip())
print()
print("| row | value | unit | PyTorch | value / PyTorch | C++ | value / C++ | ceiling | value / ceiling |")
print("|---|---|---|---|---|---|---|---|---|")
cpp_done = False
for name, v in locus.items():
    if not cpp_done and not name.startswith("ceiling_"):
        for cn, cv in cpp.items():
            line(cn, cv, cv[3])
        cpp_done = True
    unit = v[3]
    line(name, v, unit, torch.get(TORCH_SAME.get(name, name), (None,)), cpp.get(CPP.get(name)), ceiling(name))
    if f"{name}_thp" in thp:
        line(f"{name}_thp", v, unit, thp[f"{name}_thp"], None, ceiling(name))
for name, t in torch.items():
    if name not in locus:
        line(name, None, t[3], t)
print()
print(
    "value: locus's median across runs (each run's median of its timed samples), except for the ceiling_* "
    "and cpp_* rows, which are the references; [min–max] over every timed sample of every run. A *_thp row "
    "holds the same locus value against PyTorch with THP_MEM_ALLOC_ENABLE=1. Ratios are of medians: above 1 "
    "is better for GB/s and TFLOP/s, below 1 is better for us, ns, ms and x."
)
print(f"The ceiling of large_* and sum_* is {d2d_ceiling()}, the better of the copy engine and the copy kernel.")
print(
    "user_kernel_1k_submit writes into an existing tensor, so its like-for-like row is the C++ launch of the same add "
    "into a preallocated output (the C++ column), not small_add_1k_submit, which also allocates its output (issue 35)."
)
if "small_add_1k_submit_nohooks" in locus:
    print(
        "The ceiling of small_add_1k_submit_nohooks is small_add_1k_submit: the same add from a build without the "
        "trace hooks against this build with tracing off; about 1.0 means the hooks cost nothing when off."
    )
PY
