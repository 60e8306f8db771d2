# Sourced by count.sh and cold.sh, with their arguments: the bench binary `bin` (the first
# argument when it is an executable file, shifted off; else the newest
# target/release/deps/gpu-*), and the fake libraries, built into $lib from $here: the
# hand-written parts, and a stub for every other symbol cudarc can load.
lib=${FAKECUDA_LIB:-target/fakecuda}
bin=""
if [ $# -gt 0 ] && [ -x "$1" ] && [ -f "$1" ]; then bin=$(realpath "$1"); shift; fi
[ -n "$bin" ] || bin=$(realpath "$(ls -t target/release/deps/gpu-* | grep -v '\.d$' | head -1)")
[ $# -gt 0 ] || { echo "usage: $usage" >&2; exit 2; }
cudarc=$(ls -d ~/.cargo/registry/src/*/cudarc-0.19.10 | head -1)
mkdir -p "$lib/names" "$lib/gen"
build() { # library, source, cudarc's sys module, other sources
  grep -oE 'load::<_F>\("[A-Za-z0-9_]+"\)' "$cudarc/src/$3/sys/mod.rs" | sed -E 's/.*\("(.*)"\)/\1/' | sort -u > "$lib/names/$3.txt"
  python3 "$here/genstubs.py" "$lib/names/$3.txt" "$here/$2" "$lib/gen/stubs_$3.c"
  gcc -O2 -g -fPIC -shared -Wall -Wno-unused-parameter -o "$lib/$1" "$here/$2" "$lib/gen/stubs_$3.c" "${@:4}"
}
python3 "$here/genpollute.py" "$lib/gen/pollute.c"
build libcuda.so fakecuda.c driver "$lib/gen/pollute.c"
build libnvrtc.so fakenvrtc.c nvrtc
build libcublas.so fakecublas.c cublas
build libcublasLt.so fakecublaslt.c cublaslt
build libnccl.so fakenccl.c nccl
ln -sf libcuda.so "$lib/libcuda.so.1"
