#!/usr/bin/env bash
# Host instructions per eager op of locus's cuda backend, on this machine without a GPU:
# the GPU bench's `breakdown-loop OP` runs on fake CUDA libraries (device memory is host
# memory, launches do nothing, every sync succeeds; fakecuda.c) under callgrind, which
# counts only inside the bench's op closure (gpu::breakdown::op::{{closure}}), and the
# count is divided by the ops the bench ran. The fake driver's own share is a few
# instructions per op; a real driver's launch comes on top. Also the op's code footprint
# (footprint.py): the 64-byte lines of code it runs, which a real launch, running far
# more code of the driver's between two ops, may evict from the instruction cache each
# time; and its atomic instructions (atomics.py: locks and reference counts). Run from the
# project root:
#
#   cargo build --release --bench gpu
#   bash benches/fakecuda/count.sh [BIN] OP...     (OP: raw_args3, add_1k, relu_1k, user_kernel_1k, zeros_1k, replay20, ...)
#
# BIN defaults to the newest target/release/deps/gpu-*. KEEP=DIR keeps each callgrind
# file there, for `callgrind_annotate`, `footprint.py --functions` and `atomics.py` (which
# lists them by function). Needs gcc, python3, valgrind and objdump.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="count.sh [BIN] OP..."
# BIN (shifted off the arguments) and the fake libraries in $lib.
source "$here/libs.sh"
export LD_LIBRARY_PATH=$(realpath "$lib") LOCUS_BACKEND=cuda
for op in "$@"; do
  out=$(mktemp)
  # The op closure; for replay20 (a 20-add graph's replays), the bench's one call of `Graph::replay`.
  toggle='gpu::breakdown::op::{{closure}}'
  [ "$op" = replay20 ] && toggle='gpu::breakdown::replay_chain'
  n=$(valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$out" --collect-atstart=no \
      --toggle-collect="$toggle" "$bin" breakdown-loop "$op" 1 2>/dev/null | awk '/ops in/ {print $2}')
  ir=$(grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}')
  echo "$op: $(python3 -c "print(round($ir / $n, 1))") instructions per op ($n ops); $(python3 "$here/footprint.py" "$out" "$n"); $(python3 "$here/atomics.py" "$out" "$n" | sed -n 1p)"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$out" "$KEEP/callgrind.$op.out"; fi
  rm -f "$out"
done
