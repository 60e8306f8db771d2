#!/usr/bin/env bash
# An eager op's host time with cold caches, on this machine without a GPU: the GPU
# bench's `breakdown-loop OP` on the fake libraries (see count.sh) with FAKECUDA_POLLUTE=1,
# so that each launch runs about 48 KiB of the fake driver's own code and reads 256 KiB of
# its data, evicting the op's code and data from the first-level caches as a real
# launch's much longer run does. The raw launch (raw_args3) pays the same pollution, so
# OP's time less raw_args3's is the op's own host time when it starts cold; the same
# difference without pollution is its time warm. Each row: median, min and max of RUNS
# alternating runs of SECONDS each (default 5 and 1). Run from the project root after
# `cargo build --release --bench gpu`:
#
#   bash benches/fakecuda/cold.sh [BIN] OP...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="cold.sh [BIN] OP..."
runs=${RUNS:-5}
secs=${SECONDS_PER_RUN:-1}
# BIN (shifted off the arguments) and the fake libraries in $lib.
source "$here/libs.sh"
export LD_LIBRARY_PATH=$(realpath "$lib") LOCUS_BACKEND=cuda
# ns per op of one run of `breakdown-loop $1` with FAKECUDA_POLLUTE=$2.
per_op() {
  FAKECUDA_POLLUTE=$2 "$bin" breakdown-loop "$1" "$secs" 2>/dev/null |
    awk '/ops in/ {printf "%.1f\n", $5 * 1e9 / $2}'
}
stats() { sort -g | awk '{v[NR]=$1} END {printf "%.1f [%.1f-%.1f]", v[int((NR+1)/2)], v[1], v[NR]}'; }
for pollute in 0 1; do
  declare -A t=()
  for _ in $(seq "$runs"); do
    for op in raw_args3 "$@"; do t[$op]+="$(per_op "$op" $pollute) "; done
  done
  label=$([ $pollute = 1 ] && echo cold || echo warm)
  for op in raw_args3 "$@"; do
    echo "$label $op: $(tr ' ' '\n' <<< "${t[$op]}" | grep . | stats) ns per op"
  done
  for op in "$@"; do
    # The op's own time per run: its ns less raw_args3's of the same round.
    read -r -a a <<< "${t[$op]}"; read -r -a r <<< "${t[raw_args3]}"
    d=$(for i in "${!a[@]}"; do echo "${a[$i]} - ${r[$i]}" | bc -l; done | stats)
    echo "$label $op less raw_args3: $d ns per op"
  done
  unset t
done
