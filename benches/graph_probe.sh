#!/usr/bin/env bash
# Runs `gpu graph-probe-kind KIND` for each KIND given (default: every kind), each in a
# process of its own (the state it looks for lasts for the process), keeps the raw output
# in OUTDIR/kind_<KIND>.txt and prints, per kind, the raw chain's device time per replay
# after each stage, ungated and behind the 3 ms gate, with the default pool's use.
# From the project root, after ../shared/tools/gpu-bundle (or with the bench binary at
# $GPU_BENCH):
#
#     bash benches/graph_probe.sh OUTDIR [KIND...]
#
# The environment passes through (CUDA_DEVICE_MAX_CONNECTIONS=1 bash benches/graph_probe.sh ...).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: graph_probe.sh OUTDIR [KIND...]}
shift
bin=${GPU_BENCH:-.gpu/benches/gpu}
[ -x "$bin" ] || { echo "graph_probe.sh: no bench binary at $bin" >&2; exit 2; }
kinds=("$@")
if [ ${#kinds[@]} -eq 0 ]; then
  # the kinds the binary knows, from its own error message
  mapfile -t kinds < <("$bin" graph-probe-kind '?' 2>&1 | sed -n 's/.*one of //p' | tr ',' '\n' | tr -d ' ')
fi
export LOCUS_BACKEND=${LOCUS_BACKEND:-cuda}
mkdir -p "$out"
for k in "${kinds[@]}"; do
  timeout 120 "$bin" graph-probe-kind "$k" > "$out/kind_$k.txt" 2>&1
  echo "== $k (exit $?)"
  awk -F'\t' '$1 == "graph_probe" {
      stage = $4; sub(/^raw chain device time per replay, /, "", stage); sub(/ \(buffers at.*/, "", stage)
      gate = $4; sub(/.*behind a 3 ms gate /, "", gate); sub(/ us.*/, "", gate)
      pool = $4; sub(/.*default pool: /, "", pool); sub(/\).*/, "", pool)
      printf "  %s us (gated %s): %s [%s]\n", $2, gate, stage, pool
  }' "$out/kind_$k.txt"
done
