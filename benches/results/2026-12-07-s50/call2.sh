#!/usr/bin/env bash
# Session 50's call: breakdown A/B (f6fee30 vs the bundle), the 3-run table, A/B again, sanitizer leftovers.
cd "$(dirname "$0")/.."
export LOCUS_BACKEND=cuda
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
[ -d .gpu ] || xz -dc .gpu-pack/bundle.tar.xz | tar xf -
mkdir -p "$OUT/ab"
ab() { timeout 50 .gpu-ab/gpu-f6fee30 breakdown > "$OUT/ab/before_$1.tsv" 2>&1; timeout 50 .gpu/benches/gpu breakdown > "$OUT/ab/after_$1.tsv" 2>&1; echo "[$(el) s] ab $1 done"; }
ab 1
GPU_CALL_SECONDS=$((330 - $(el))) bash benches/gpu_call.sh e5ff36c cmp1 cmp2 cmp3 2>&1 | tail -30
ab 2
for f in "$OUT"/ab/*.tsv; do echo "$(basename $f) $(grep -E '^breakdown_(raw_args3|add_1k|relu_1k|user_kernel_1k|zeros_1k)\s' $f | cut -f2 | tr '\n' ' ')"; done
left=$((470 - $(el)))
if [ $left -gt 20 ]; then
  mkdir -p "$OUT/san"
  for b in graph streams trace; do
    l=$((470 - $(el))); [ $l -gt 10 ] || break
    timeout $l compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 86 --print-limit 20 .gpu/tests/$b --test-threads=1 > "$OUT/san/$b.txt" 2>&1
    echo "[$(el) s] sanitize $b: exit $? $(grep -E '^test result' $OUT/san/$b.txt | tail -1) $(grep 'ERROR SUMMARY' $OUT/san/$b.txt | tail -1)"
  done
  tar czf "$OUT/san.tgz" -C "$OUT" san && rm -rf "$OUT/san"
fi
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
