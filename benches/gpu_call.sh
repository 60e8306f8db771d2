#!/usr/bin/env bash
# One device call's GPU work, run from the project root on the lent machine after
# ../shared/tools/gpu-bundle (carry [".gpu-pack"]; the bundle is unpacked here if .gpu/ is
# missing). The device tool returns at most 8 files, so everything a step writes goes
# under one results directory, packed into $OUT/results.tgz after every step: a call cut
# off at its time limit still returns what had finished. Steps, in the order given:
#
#   suite               bash .gpu/run.sh: every test binary and example
#   sanitize:A,B,...    the named test binaries of .gpu/tests/ under compute-sanitizer
#                       memcheck, one at a time, as `run.sh --sanitize` runs them
#   cmpN                one run of benches/compare.sh into cmpN/ (gather runs made by
#                       several calls with `compare.sh --summarize --runs N DIR`)
#   probe:K,...         benches/graph_probe.sh for those kinds (none: every kind)
#   cpp                 the C++ baseline alone, built with nvcc, plain and with
#                       --keep-eager-stream
#   perfstat:OP,...     host cycles, instructions and instruction-cache misses per op of
#                       `gpu breakdown-loop OP` (perf stat of a 1 s and a 3 s loop; the
#                       difference over the ops' difference is per op, start-up excluded).
#                       The machine has no perf: benches/pack_perf.sh packs this machine's
#                       into .gpu-perf/ (carry it too). Counters the VM does not expose
#                       read <not supported>.
#
#     bash benches/gpu_call.sh COMMIT STEP...
#
# COMMIT names the tree the bundle was built from (written to .gpu/COMMIT for compare.sh).
# GPU_CALL_SECONDS (default 560) is the call's budget: a step is not started once it is
# spent, and a sanitizer binary gets only what is left of it. Results without $OUT (a
# local dry run) stay in the results directory, printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
commit=${1:?usage: gpu_call.sh COMMIT STEP...}
shift
if [ ! -d .gpu ] && [ -f .gpu-pack/bundle.tar.xz ]; then
  xz -dc .gpu-pack/bundle.tar.xz | tar xf - || { echo "gpu_call.sh: the bundle did not unpack" >&2; exit 2; }
fi
[ -d .gpu ] || { echo "gpu_call.sh: no .gpu/ (run ../shared/tools/gpu-bundle here first)" >&2; exit 2; }
echo "$commit" > .gpu/COMMIT
export LOCUS_BACKEND=${LOCUS_BACKEND:-cuda}
res=$(mktemp -d)
budget=${GPU_CALL_SECONDS:-560}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
log() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$res/log.txt"; }
pack() { [ -n "${OUT:-}" ] && tar czf "$OUT/results.tgz" -C "$res" . ; }
trap pack EXIT
nvidia-smi > "$res/nvidia_smi.txt" 2>&1
san=(compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 86 --print-limit 20)

for step in "$@"; do
  if [ "$(left)" -le 5 ]; then
    log "not started, the budget is spent: $step"
    continue
  fi
  log "start $step"
  case $step in
    suite)
      bash .gpu/run.sh > "$res/suite.txt" 2>&1
      grep -E '^(FAILED|binaries:|gpu:)' "$res/suite.txt"
      ;;
    sanitize:*)
      IFS=, read -r -a bins <<< "${step#sanitize:}"
      for b in "${bins[@]}"; do
        t=$(left)
        if [ "$t" -le 5 ] || [ ! -x ".gpu/tests/$b" ]; then
          log "sanitize $b: not run ($([ -x ".gpu/tests/$b" ] && echo 'no time left' || echo 'no such test binary'))"
          continue
        fi
        timeout "$t" "${san[@]}" ".gpu/tests/$b" --test-threads=1 > "$res/sanitize_$b.txt" 2>&1
        rc=$?
        log "sanitize $b: exit $rc; $(grep -E '^test result' "$res/sanitize_$b.txt" | tail -1); $(grep -E 'ERROR SUMMARY|before first instrumented' "$res/sanitize_$b.txt" | tail -1)"
      done
      ;;
    cmp[0-9]*)
      bash benches/compare.sh --runs 1 "$res/$step" > "$res/$step.txt" 2>&1
      log "compare.sh exit $?"
      grep -E '^\| (small_add_1k_s|ceiling_launch_floor|graph_chain20_replay|cpp_graph_chain20_replay|data_parallel|pipeline_vs|autograd_backward)' "$res/$step.txt"
      ;;
    probe:*)
      IFS=, read -r -a kinds <<< "${step#probe:}"
      bash benches/graph_probe.sh "$res/probe" "${kinds[@]}" > "$res/probe.txt" 2>&1
      cat "$res/probe.txt"
      ;;
    cpp)
      nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
      if "$nvcc" -O3 -arch="${NVCC_ARCH:-sm_90}" -o "$res/baseline" benches/cpp/baseline.cu > "$res/nvcc.txt" 2>&1; then
        for mode in plain keep-eager-stream; do
          flag=(); [ "$mode" = plain ] || flag=(--"$mode")
          "$res/baseline" "${flag[@]}" > "$res/cpp_$mode.tsv" 2>&1
          log "cpp $mode: exit $?"
          grep -E 'graph_chain20_replay|graph_breakdown_gpu' "$res/cpp_$mode.tsv" | cut -f1-3,5,6
        done
        rm -f "$res/baseline"
      else
        log "cpp: nvcc failed"; cat "$res/nvcc.txt"
      fi
      ;;
    perfstat:*)
      if [ ! -f .gpu-perf/perf.tar.xz ]; then
        log "perfstat: no .gpu-perf/perf.tar.xz (benches/pack_perf.sh, then carry .gpu-perf)"
      else
        mkdir -p "$res/perf" /tmp/locus-perf && xz -dc .gpu-perf/perf.tar.xz | tar xf - -C /tmp/locus-perf
        perf() { /tmp/locus-perf/perf/ld-linux-x86-64.so.2 --library-path /tmp/locus-perf/perf /tmp/locus-perf/perf/perf "$@"; }
        lscpu > "$res/perf/lscpu.txt" 2>&1
        ev=cycles,instructions,L1-icache-load-misses,iTLB-load-misses,branch-misses,L1-dcache-load-misses,task-clock
        IFS=, read -r -a ops <<< "${step#perfstat:}"
        for op in "${ops[@]}"; do
          for s in 1 3; do
            perf stat -x, -e "$ev" -o "$res/perf/${op}_$s.csv" timeout 8 .gpu/benches/gpu breakdown-loop "$op" "$s" \
              > "$res/perf/${op}_$s.out" 2>&1
          done
          python3 benches/perf_per_op.py "$res/perf" "$op" | tee -a "$res/perf/per_op.txt"
        done
      fi
      ;;
    *)
      log "unknown step $step (suite, sanitize:A,B, cmpN, probe:K,..., cpp, perfstat:OP,...)"
      ;;
  esac
  log "end $step"
  pack
done
[ -n "${OUT:-}" ] || echo "gpu_call.sh: results in $res"
