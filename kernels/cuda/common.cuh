// Shared definitions of the locus kernels. Every source file starts with this text
// (the Rust side prepends it before NVRTC compiles the file).
typedef float f32;
typedef double f64;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef unsigned long long u64;

// The 16-bit float types: the bits of a bfloat16 or IEEE half, computed in f32. Each
// converts to f32 exactly and from f32 by rounding to nearest, ties to even (NaN stays
// a quiet NaN of the same sign), as the `half` crate does on the host, so that an op
// computed in f32 and rounded once gives the same bits on both backends.
__device__ __forceinline__ float bf16_bits_to_f32(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short f32_to_bf16_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float f16_bits_to_f32(unsigned short b) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}
__device__ __forceinline__ unsigned short f32_to_f16_bits(float f) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}

// A float from a double, rounded toward zero with a sticky low bit ("round to odd"):
// rounding that float once more to 16 bits gives the double correctly rounded, with no
// double-rounding error (f32 keeps more than two extra bits).
__device__ __forceinline__ float f64_to_f32_odd(double d) {
    float f = __double2float_rz(d);
    if (d == d && (double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

// The same for a 64-bit integer, which holds up to 63 significant bits: through a double
// rounded to nearest it could round twice (2^62 + 2^54 + 1 would become a bf16 tie).
// Rounded toward zero, the float is an integer of at most 63 bits, so it converts back
// exactly and tells whether anything was lost.
__device__ __forceinline__ float i64_to_f32_odd(long long v) {
    float f = __ll2float_rz(v);
    if ((long long)f != v) f = __uint_as_float(__float_as_uint(f) | 1u);
    return f;
}

#define HALF_TYPE(NAME, TO_F32, FROM_F32)                                               \
    struct NAME {                                                                        \
        unsigned short bits;                                                             \
        NAME() = default;                                                                \
        __device__ NAME(float f) : bits(FROM_F32(f)) {}                                  \
        __device__ explicit NAME(double d) : bits(FROM_F32(f64_to_f32_odd(d))) {}        \
        __device__ explicit NAME(int i) : bits(FROM_F32(f64_to_f32_odd((double)i))) {}   \
        __device__ explicit NAME(unsigned u) : bits(FROM_F32(f64_to_f32_odd((double)u))) {} \
        __device__ explicit NAME(long long i) : bits(FROM_F32(i64_to_f32_odd(i))) {}     \
        __device__ explicit NAME(unsigned long long u) : bits(FROM_F32(f64_to_f32_odd((double)u))) {} \
        __device__ explicit NAME(unsigned char u) : bits(FROM_F32((float)u)) {}          \
        __device__ operator float() const { return TO_F32(bits); }                      \
    };
HALF_TYPE(bf16, bf16_bits_to_f32, f32_to_bf16_bits)
HALF_TYPE(f16, f16_bits_to_f32, f32_to_f16_bits)

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
__device__ __forceinline__ i64 op_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ u8 op_add(u8 a, u8 b) { return (u8)(a + b); }
__device__ __forceinline__ f32 op_sub(f32 a, f32 b) { return a - b; }
__device__ __forceinline__ f64 op_sub(f64 a, f64 b) { return a - b; }
__device__ __forceinline__ i32 op_sub(i32 a, i32 b) { return (i32)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ i64 op_sub(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
__device__ __forceinline__ u8 op_sub(u8 a, u8 b) { return (u8)(a - b); }
__device__ __forceinline__ f32 op_mul(f32 a, f32 b) { return a * b; }
__device__ __forceinline__ f64 op_mul(f64 a, f64 b) { return a * b; }
__device__ __forceinline__ i32 op_mul(i32 a, i32 b) { return (i32)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ i64 op_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
__device__ __forceinline__ u8 op_mul(u8 a, u8 b) { return (u8)(a * b); }
__device__ __forceinline__ f32 op_neg(f32 a) { return -a; }
__device__ __forceinline__ f64 op_neg(f64 a) { return -a; }
__device__ __forceinline__ i32 op_neg(i32 a) { return (i32)(0u - (unsigned)a); }
__device__ __forceinline__ i64 op_neg(i64 a) { return (i64)(0ull - (u64)a); }
__device__ __forceinline__ u8 op_neg(u8 a) { return (u8)(0u - a); }

#define HALF_ARITH(T)                                                                          \
    __device__ __forceinline__ T op_add(T a, T b) { return T((float)a + (float)b); }           \
    __device__ __forceinline__ T op_sub(T a, T b) { return T((float)a - (float)b); }           \
    __device__ __forceinline__ T op_mul(T a, T b) { return T((float)a * (float)b); }           \
    __device__ __forceinline__ T op_neg(T a) { T r; r.bits = a.bits ^ 0x8000u; return r; }    \
    __device__ __forceinline__ T op_div(T a, T b, int*) { return T((float)a / (float)b); }
HALF_ARITH(bf16)
HALF_ARITH(f16)

// Division: IEEE for floats; for integers a zero divisor sets *err (checked by the
// host after the launch) and i32::MIN / -1 (i64::MIN / -1) wraps.
__device__ __forceinline__ f32 op_div(f32 a, f32 b, int*) { return a / b; }
__device__ __forceinline__ f64 op_div(f64 a, f64 b, int*) { return a / b; }
__device__ __forceinline__ i32 op_div(i32 a, i32 b, int* err) {
    if (b == 0) { *err = 1; return 0; }
    if (b == -1) return op_neg(a);
    return a / b;
}
__device__ __forceinline__ i64 op_div(i64 a, i64 b, int* err) {
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
template <> __device__ __forceinline__ bool is_nan<bf16>(bf16 v) { return (v.bits & 0x7fffu) > 0x7f80u; }
template <> __device__ __forceinline__ bool is_nan<f16>(f16 v) { return (v.bits & 0x7fffu) > 0x7c00u; }

template <typename T> __device__ __forceinline__ bool sign_bit(T) { return false; }
template <> __device__ __forceinline__ bool sign_bit<f32>(f32 v) { return (__float_as_uint(v) >> 31) != 0; }
template <> __device__ __forceinline__ bool sign_bit<f64>(f64 v) { return __double_as_longlong(v) < 0; }
template <> __device__ __forceinline__ bool sign_bit<bf16>(bf16 v) { return (v.bits & 0x8000u) != 0; }
template <> __device__ __forceinline__ bool sign_bit<f16>(f16 v) { return (v.bits & 0x8000u) != 0; }

// The larger value; NaN wins, as in torch.max, and +0.0 is above -0.0 (IEEE 754-2019
// `maximum`), so a reduction's result does not depend on the order it combines in.
template <typename T> __device__ __forceinline__ T op_max(T a, T b) {
    return (is_nan(a) || a > b || (a == b && sign_bit(b))) ? a : b;
}

// The type float math is done in: `float` for f32 (and for the 16-bit float types,
// which are stored as 16 bits and computed in f32), `double` for f64. Kernels of float
// ops read with `to_acc`, compute in `Acc<T>::type`, and write with `from_acc<T>`.
template <typename T> struct Acc { typedef T type; };
template <> struct Acc<bf16> { typedef float type; };
template <> struct Acc<f16> { typedef float type; };
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
