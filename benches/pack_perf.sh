#!/usr/bin/env bash
# Packs this machine's perf with every library it loads (its own glibc and loader
# included, so it runs whatever the other machine's are) into .gpu-perf/perf.tar.xz,
# for the `perfstat` step of benches/gpu_call.sh on the GPU machine, which has no perf.
# Carry .gpu-perf with the bundle. Run from the project root.
set -euo pipefail
cd "$(dirname "$0")/.."
perf=$(command -v perf) || { echo "pack_perf.sh: no perf here" >&2; exit 2; }
tmp=$(mktemp -d)
mkdir -p "$tmp/perf" .gpu-perf
cp "$perf" "$tmp/perf/perf"
for lib in $(ldd "$perf" | grep -oE '/[^ ]+\.so[^ ]*'); do cp -L "$lib" "$tmp/perf/"; done
tar cJf .gpu-perf/perf.tar.xz -C "$tmp" perf
rm -rf "$tmp"
echo "pack_perf.sh: .gpu-perf/perf.tar.xz ($(du -h .gpu-perf/perf.tar.xz | cut -f1)); carry [\".gpu-pack\", \".gpu-perf\"]"
