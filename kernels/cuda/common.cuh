// Shared definitions of the locus kernels. Every source file starts with this text
// (the Rust side prepends it before NVRTC compiles the file).
typedef float f32;
typedef double f64;
typedef int i32;
typedef unsigned char u8;
typedef unsigned long long u64;

// Grid-stride loop over [0, n).
#define GRID_LOOP(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// Elements moved per 16-byte vector access.
template <typename T> struct alignas(16) Vec16 {
    static const int N = 16 / sizeof(T);
    T v[16 / sizeof(T)];
};

// Integer arithmetic wraps (as in Rust's wrapping_* and PyTorch); it is done in
// unsigned types because signed overflow is undefined in C++.
__device__ __forceinline__ f32 op_add(f32 a, f32 b) { return a + b; }
__device__ __forceinline__ f64 op_add(f64 a, f64 b) { return a + b; }
__device__ __forceinline__ i32 op_add(i32 a, i32 b) { return (i32)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ u8 op_add(u8 a, u8 b) { return (u8)(a + b); }
__device__ __forceinline__ f32 op_sub(f32 a, f32 b) { return a - b; }
__device__ __forceinline__ f64 op_sub(f64 a, f64 b) { return a - b; }
__device__ __forceinline__ i32 op_sub(i32 a, i32 b) { return (i32)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ u8 op_sub(u8 a, u8 b) { return (u8)(a - b); }
__device__ __forceinline__ f32 op_mul(f32 a, f32 b) { return a * b; }
__device__ __forceinline__ f64 op_mul(f64 a, f64 b) { return a * b; }
__device__ __forceinline__ i32 op_mul(i32 a, i32 b) { return (i32)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ u8 op_mul(u8 a, u8 b) { return (u8)(a * b); }
__device__ __forceinline__ f32 op_neg(f32 a) { return -a; }
__device__ __forceinline__ f64 op_neg(f64 a) { return -a; }
__device__ __forceinline__ i32 op_neg(i32 a) { return (i32)(0u - (unsigned)a); }
__device__ __forceinline__ u8 op_neg(u8 a) { return (u8)(0u - a); }

// Division: IEEE for floats; for integers a zero divisor sets *err (checked by the
// host after the launch) and i32::MIN / -1 wraps.
__device__ __forceinline__ f32 op_div(f32 a, f32 b, int*) { return a / b; }
__device__ __forceinline__ f64 op_div(f64 a, f64 b, int*) { return a / b; }
__device__ __forceinline__ i32 op_div(i32 a, i32 b, int* err) {
    if (b == 0) { *err = 1; return 0; }
    if (b == -1) return op_neg(a);
    return a / b;
}
__device__ __forceinline__ u8 op_div(u8 a, u8 b, int* err) {
    if (b == 0) { *err = 1; return 0; }
    return a / b;
}

template <typename T> __device__ __forceinline__ bool is_nan(T) { return false; }
template <> __device__ __forceinline__ bool is_nan<f32>(f32 v) { return v != v; }
template <> __device__ __forceinline__ bool is_nan<f64>(f64 v) { return v != v; }

// The larger value; NaN wins, as in torch.max.
template <typename T> __device__ __forceinline__ T op_max(T a, T b) { return (is_nan(a) || a >= b) ? a : b; }

// The type float math is done in: `float` for f32 (and for the 16-bit float types,
// which are stored as 16 bits and computed in f32), `double` for f64. Kernels of float
// ops read with `to_acc`, compute in `Acc<T>::type`, and write with `from_acc<T>`.
template <typename T> struct Acc { typedef T type; };
template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T v) { return (typename Acc<T>::type)v; }
template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type v) { return (T)v; }

// Records index `value`, found at position `at` of an index list, as out of range in
// `err`, an all-ones word before the launch that the host reads after it: the lowest
// position wins, so the host reports the first bad index, as the host backend does. The
// position goes in the high half (positions past 2^32 - 2 share the top value), the
// index's bits in the low half.
__device__ __forceinline__ void report_index(u64* err, u64 at, i32 value) {
    const u64 pos = at < 0xffffffffull ? at : 0xfffffffeull;
    atomicMin(err, (pos << 32) | (u64)(unsigned)value);
}
