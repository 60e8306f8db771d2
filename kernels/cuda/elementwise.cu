// Elementwise kernels: unary ops, binary ops on equal shapes (16-byte vector loads),
// with a scalar value, and under NumPy broadcasting (per-operand strides).

struct AddOp { template <typename T> __device__ T operator()(T a, T b, int*) const { return op_add(a, b); } };
struct SubOp { template <typename T> __device__ T operator()(T a, T b, int*) const { return op_sub(a, b); } };
struct MulOp { template <typename T> __device__ T operator()(T a, T b, int*) const { return op_mul(a, b); } };
struct DivOp { template <typename T> __device__ T operator()(T a, T b, int* e) const { return op_div(a, b, e); } };

struct NegOp { template <typename T> __device__ T operator()(T a) const { return op_neg(a); } };
// NaN stays NaN (NaN < 0 is false), as in torch.relu.
struct ReluOp {
    template <typename T> __device__ T operator()(T a) const { return a < (T)0 ? (T)0 : a; }
    __device__ u8 operator()(u8 a) const { return a; }  // unsigned: already >= 0
};
// The 16-bit types compute in f32 and round once.
struct ExpOp {
    __device__ f32 operator()(f32 a) const { return expf(a); }
    __device__ f64 operator()(f64 a) const { return exp(a); }
    __device__ bf16 operator()(bf16 a) const { return bf16(expf(a)); }
    __device__ f16 operator()(f16 a) const { return f16(expf(a)); }
};
struct SqrtOp {
    __device__ f32 operator()(f32 a) const { return sqrtf(a); }
    __device__ f64 operator()(f64 a) const { return sqrt(a); }
    __device__ bf16 operator()(bf16 a) const { return bf16(sqrtf(a)); }
    __device__ f16 operator()(f16 a) const { return f16(sqrtf(a)); }
};
// Integers wrap: abs(i32::MIN) is i32::MIN (and abs(i64::MIN) i64::MIN), as in torch.abs.
struct AbsOp {
    __device__ f32 operator()(f32 a) const { return fabsf(a); }
    __device__ f64 operator()(f64 a) const { return fabs(a); }
    __device__ i32 operator()(i32 a) const { return a < 0 ? op_neg(a) : a; }
    __device__ i64 operator()(i64 a) const { return a < 0 ? op_neg(a) : a; }
    __device__ u8 operator()(u8 a) const { return a; }  // unsigned: already >= 0
    __device__ bf16 operator()(bf16 a) const { return bf16(fabsf(a)); }
    __device__ f16 operator()(f16 a) const { return f16(fabsf(a)); }
};
struct SquareOp { template <typename T> __device__ T operator()(T a) const { return op_mul(a, a); } };

// Unary ops with scalar parameters, carried in the op object.
template <typename T> struct PowOp;
template <> struct PowOp<f32> { f32 e; __device__ f32 operator()(f32 a) const { return powf(a, e); } };
template <> struct PowOp<f64> { f64 e; __device__ f64 operator()(f64 a) const { return pow(a, e); } };
template <> struct PowOp<bf16> { bf16 e; __device__ bf16 operator()(bf16 a) const { return bf16(powf(a, e)); } };
template <> struct PowOp<f16> { f16 e; __device__ f16 operator()(f16 a) const { return f16(powf(a, e)); } };
// NaN stays NaN (both comparisons are false), as in torch.clamp.
template <typename T> struct ClampOp {
    T lo, hi;
    __device__ T operator()(T a) const { return a < lo ? lo : (a > hi ? hi : a); }
};

// A binary op with its operands swapped: the scalar on the left (`s - x`, `s / x`).
template <typename Op> struct Flip {
    template <typename T> __device__ T operator()(T a, T b, int* e) const { return Op()(b, a, e); }
};

// Each thread handles UNROLL vectors per step, loads first, so that several memory
// requests are in flight per thread; the grid covers the data (no grid-stride loop
// needed, but kept for robustness).
#define UNROLL 4

template <typename T, typename Op>
__device__ void unary_with(const T* __restrict__ x, T* __restrict__ out, u64 n, Op op) {
    typedef Vec16<T> V;
    const u64 nv = n / V::N;
    const V* xv = reinterpret_cast<const V*>(x);
    V* ov = reinterpret_cast<V*>(out);
    const u64 step = (u64)gridDim.x * blockDim.x * UNROLL;
    for (u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nv; base += step) {
        V a[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) a[u] = xv[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                V r;
#pragma unroll
                for (int k = 0; k < V::N; k++) r.v[k] = op(a[u].v[k]);
                ov[i] = r;
            }
        }
    }
    GRID_LOOP(j, n - nv * V::N) {
        u64 i = nv * V::N + j;
        out[i] = op(x[i]);
    }
}

template <typename T, typename Op>
__device__ void unary(const T* __restrict__ x, T* __restrict__ out, u64 n) {
    unary_with<T, Op>(x, out, n, Op());
}

template <typename T, typename Op>
__device__ void binary_same(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, u64 n, int* err) {
    typedef Vec16<T> V;
    const u64 nv = n / V::N;
    const V* av = reinterpret_cast<const V*>(a);
    const V* bv = reinterpret_cast<const V*>(b);
    V* ov = reinterpret_cast<V*>(out);
    Op op;
    const u64 step = (u64)gridDim.x * blockDim.x * UNROLL;
    for (u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nv; base += step) {
        V x[UNROLL], y[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                x[u] = av[i];
                y[u] = bv[i];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                V r;
#pragma unroll
                for (int k = 0; k < V::N; k++) r.v[k] = op(x[u].v[k], y[u].v[k], err);
                ov[i] = r;
            }
        }
    }
    GRID_LOOP(j, n - nv * V::N) {
        u64 i = nv * V::N + j;
        out[i] = op(a[i], b[i], err);
    }
}

template <typename T, typename Op>
__device__ void binary_scalar(const T* __restrict__ a, T s, T* __restrict__ out, u64 n, int* err) {
    typedef Vec16<T> V;
    const u64 nv = n / V::N;
    const V* av = reinterpret_cast<const V*>(a);
    V* ov = reinterpret_cast<V*>(out);
    Op op;
    const u64 step = (u64)gridDim.x * blockDim.x * UNROLL;
    for (u64 base = (u64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < nv; base += step) {
        V x[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) x[u] = av[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                V r;
#pragma unroll
                for (int k = 0; k < V::N; k++) r.v[k] = op(x[u].v[k], s, err);
                ov[i] = r;
            }
        }
    }
    GRID_LOOP(j, n - nv * V::N) {
        u64 i = nv * V::N + j;
        out[i] = op(a[i], s, err);
    }
}

// Shapes of up to 8 dims (after merging); strides are 0 where an operand is broadcast.
struct Bcast {
    int rank;
    u64 shape[8];
    u64 lhs[8];
    u64 rhs[8];
};

template <typename T, typename Op>
__device__ void binary_bcast(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, u64 n,
                             const Bcast& bc, int* err) {
    Op op;
    GRID_LOOP(i, n) {
        u64 rest = i, ai = 0, bi = 0;
        for (int d = bc.rank - 1; d >= 0; d--) {
            u64 idx = rest % bc.shape[d];
            rest /= bc.shape[d];
            ai += idx * bc.lhs[d];
            bi += idx * bc.rhs[d];
        }
        out[i] = op(a[ai], b[bi], err);
    }
}

// One element per thread, no loop: for small tensors, where a kernel's time is its
// latency and more blocks of simpler threads finish sooner than few unrolled ones (a
// 1024-element add in a CUDA graph: 1.00 us per node against 1.11 us on the H200).
template <typename T, typename Op>
__device__ void binary_small(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, u64 n, int* err) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    Op op;
    if (i < n) out[i] = op(a[i], b[i], err);
}

#define UNARY(NAME, OP, T) \
    extern "C" __global__ void NAME##_##T(const T* x, T* out, u64 n) { unary<T, OP>(x, out, n); }

#define BINARY(NAME, OP, T)                                                                                 \
    extern "C" __global__ void NAME##_same_##T(const T* a, const T* b, T* out, u64 n, int* err) {           \
        binary_same<T, OP>(a, b, out, n, err);                                                              \
    }                                                                                                       \
    extern "C" __global__ void NAME##_small_##T(const T* a, const T* b, T* out, u64 n, int* err) {          \
        binary_small<T, OP>(a, b, out, n, err);                                                             \
    }                                                                                                       \
    extern "C" __global__ void NAME##_scalar_##T(const T* a, T s, T* out, u64 n, int* err) {                \
        binary_scalar<T, OP>(a, s, out, n, err);                                                            \
    }                                                                                                       \
    extern "C" __global__ void NAME##_bcast_##T(const T* a, const T* b, T* out, u64 n, Bcast bc, int* err) { \
        binary_bcast<T, OP>(a, b, out, n, bc, err);                                                         \
    }

// `s op x[i]`: the scalar on the left, for the ops that do not commute.
#define RSCALAR(NAME, OP, T)                                                                   \
    extern "C" __global__ void NAME##_rscalar_##T(const T* a, T s, T* out, u64 n, int* err) { \
        binary_scalar<T, Flip<OP> >(a, s, out, n, err);                                       \
    }

#define POW(T)                                                                     \
    extern "C" __global__ void pow_##T(const T* x, T e, T* out, u64 n) {           \
        PowOp<T> op = {e};                                                         \
        unary_with<T, PowOp<T> >(x, out, n, op);                                   \
    }

#define CLAMP(T)                                                                   \
    extern "C" __global__ void clamp_##T(const T* x, T lo, T hi, T* out, u64 n) {  \
        ClampOp<T> op = {lo, hi};                                                  \
        unary_with<T, ClampOp<T> >(x, out, n, op);                                 \
    }

#define ALL_BINARY(T) BINARY(add, AddOp, T) BINARY(sub, SubOp, T) BINARY(mul, MulOp, T) BINARY(div, DivOp, T) \
    RSCALAR(sub, SubOp, T) RSCALAR(div, DivOp, T)

ALL_BINARY(f32)
ALL_BINARY(f64)
ALL_BINARY(i32)
ALL_BINARY(i64)
ALL_BINARY(u8)
ALL_BINARY(bf16)
ALL_BINARY(f16)

UNARY(neg, NegOp, f32) UNARY(neg, NegOp, f64) UNARY(neg, NegOp, i32) UNARY(neg, NegOp, u8)
UNARY(relu, ReluOp, f32) UNARY(relu, ReluOp, f64) UNARY(relu, ReluOp, i32) UNARY(relu, ReluOp, u8)
UNARY(exp, ExpOp, f32) UNARY(exp, ExpOp, f64)
UNARY(sqrt, SqrtOp, f32) UNARY(sqrt, SqrtOp, f64)
UNARY(abs, AbsOp, f32) UNARY(abs, AbsOp, f64) UNARY(abs, AbsOp, i32) UNARY(abs, AbsOp, u8)
UNARY(square, SquareOp, f32) UNARY(square, SquareOp, f64) UNARY(square, SquareOp, i32) UNARY(square, SquareOp, u8)
POW(f32) POW(f64)
CLAMP(f32) CLAMP(f64) CLAMP(i32) CLAMP(u8)
UNARY(neg, NegOp, i64) UNARY(relu, ReluOp, i64) UNARY(abs, AbsOp, i64) UNARY(square, SquareOp, i64) CLAMP(i64)
#define HALF_UNARY(T) UNARY(neg, NegOp, T) UNARY(relu, ReluOp, T) UNARY(exp, ExpOp, T) UNARY(sqrt, SqrtOp, T) \
    UNARY(abs, AbsOp, T) UNARY(square, SquareOp, T) POW(T) CLAMP(T)
HALF_UNARY(bf16)
HALF_UNARY(f16)

// Conversions between element types, `cast_{from}_{to}`, as Rust's `as` and the `half`
// crate do them on the host: float to integer truncates toward zero and saturates, NaN
// becomes 0; integer to integer wraps; to a float type rounds to nearest, ties to even,
// once (f64 and i32 to the 16-bit types through `f64_to_f32_odd`, i64 through
// `i64_to_f32_odd`). Integer narrowing goes through the unsigned type of the target's
// width, which C++ defines as wrapping.
__device__ __forceinline__ i32 sat_i32(f64 v) {
    return v != v ? 0 : v <= -2147483648.0 ? (i32)0x80000000 : v >= 2147483647.0 ? 2147483647 : (i32)v;
}
// 9223372036854775807.0 is 2^63: every double below it converts exactly.
__device__ __forceinline__ i64 sat_i64(f64 v) {
    return v != v ? 0
         : v <= -9223372036854775808.0 ? (i64)0x8000000000000000ull
         : v >= 9223372036854775807.0 ? (i64)0x7fffffffffffffffull
         : (i64)v;
}
__device__ __forceinline__ u8 sat_u8(f64 v) { return v != v ? 0 : v <= 0.0 ? 0 : v >= 255.0 ? 255 : (u8)v; }

template <typename To> struct Conv;
template <> struct Conv<f32> { template <typename F> static __device__ f32 from(F v) { return (f32)v; } };
template <> struct Conv<f64> {
    static __device__ f64 from(f32 v) { return v; }
    static __device__ f64 from(f64 v) { return v; }
    static __device__ f64 from(bf16 v) { return (f32)v; }
    static __device__ f64 from(f16 v) { return (f32)v; }
    static __device__ f64 from(i32 v) { return v; }
    static __device__ f64 from(i64 v) { return (f64)v; }
    static __device__ f64 from(u8 v) { return v; }
};
template <> struct Conv<i32> {
    static __device__ i32 from(f32 v) { return sat_i32(v); }
    static __device__ i32 from(f64 v) { return sat_i32(v); }
    static __device__ i32 from(bf16 v) { return sat_i32((f32)v); }
    static __device__ i32 from(f16 v) { return sat_i32((f32)v); }
    static __device__ i32 from(i32 v) { return v; }
    static __device__ i32 from(i64 v) { return (i32)(unsigned)(u64)v; }
    static __device__ i32 from(u8 v) { return v; }
};
template <> struct Conv<i64> {
    static __device__ i64 from(f32 v) { return sat_i64(v); }
    static __device__ i64 from(f64 v) { return sat_i64(v); }
    static __device__ i64 from(bf16 v) { return sat_i64((f32)v); }
    static __device__ i64 from(f16 v) { return sat_i64((f32)v); }
    static __device__ i64 from(i32 v) { return v; }
    static __device__ i64 from(i64 v) { return v; }
    static __device__ i64 from(u8 v) { return v; }
};
template <> struct Conv<u8> {
    static __device__ u8 from(f32 v) { return sat_u8(v); }
    static __device__ u8 from(f64 v) { return sat_u8(v); }
    static __device__ u8 from(bf16 v) { return sat_u8((f32)v); }
    static __device__ u8 from(f16 v) { return sat_u8((f32)v); }
    static __device__ u8 from(i32 v) { return (u8)v; }
    static __device__ u8 from(i64 v) { return (u8)v; }
    static __device__ u8 from(u8 v) { return v; }
};
#define CONV_HALF(T, OTHER)                                                  \
    template <> struct Conv<T> {                                             \
        static __device__ T from(f32 v) { return T(v); }                     \
        static __device__ T from(f64 v) { return T(v); }                     \
        static __device__ T from(i32 v) { return T(v); }                     \
        static __device__ T from(i64 v) { return T(v); }                     \
        static __device__ T from(u8 v) { return T(v); }                      \
        static __device__ T from(T v) { return v; }                          \
        static __device__ T from(OTHER v) { return T((f32)v); }              \
    };
CONV_HALF(bf16, f16)
CONV_HALF(f16, bf16)

template <typename F, typename T> __device__ void cast(const F* __restrict__ x, T* __restrict__ out, u64 n) {
    GRID_LOOP(i, n) out[i] = Conv<T>::from(x[i]);
}

#define CAST(F, T) \
    extern "C" __global__ void cast_##F##_##T(const F* x, T* out, u64 n) { cast<F, T>(x, out, n); }
#define CAST_FROM(F) CAST(F, f32) CAST(F, f64) CAST(F, i32) CAST(F, i64) CAST(F, u8) CAST(F, bf16) CAST(F, f16)
CAST_FROM(f32)
CAST_FROM(f64)
CAST_FROM(i32)
CAST_FROM(i64)
CAST_FROM(u8)
CAST_FROM(bf16)
CAST_FROM(f16)

// Activations (float types): read with `to_acc`, computed in `Acc<T>::type` with the
// functions of that type (logf, tanhf, expf, erff for float; log, tanh, exp, erf for
// double), written with `from_acc<T>`. NaN stays NaN in each.
__device__ __forceinline__ float acc_log(float v) { return logf(v); }
__device__ __forceinline__ double acc_log(double v) { return log(v); }
__device__ __forceinline__ float acc_tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double acc_tanh(double v) { return tanh(v); }
__device__ __forceinline__ float acc_exp(float v) { return expf(v); }
__device__ __forceinline__ double acc_exp(double v) { return exp(v); }
__device__ __forceinline__ float acc_erf(float v) { return erff(v); }
__device__ __forceinline__ double acc_erf(double v) { return erf(v); }
__device__ __forceinline__ float acc_sin(float v) { return sinf(v); }
__device__ __forceinline__ double acc_sin(double v) { return sin(v); }
__device__ __forceinline__ float acc_cos(float v) { return cosf(v); }
__device__ __forceinline__ double acc_cos(double v) { return cos(v); }

// log(0) = -inf, log(x < 0) = NaN.
struct LogOp {
    template <typename T> __device__ T operator()(T a) const { return from_acc<T>(acc_log(to_acc(a))); }
};
struct TanhOp {
    template <typename T> __device__ T operator()(T a) const { return from_acc<T>(acc_tanh(to_acc(a))); }
};
// 1 / (1 + e^-x), never taking e^-x of a large positive number: for x < 0 it is
// e^x / (1 + e^x). So sigmoid(-100) is e^-100, not 1 / inf.
struct SigmoidOp {
    template <typename T> __device__ T operator()(T a) const {
        typedef typename Acc<T>::type A;
        const A x = to_acc(a);
        if (x >= (A)0) return from_acc<T>((A)1 / ((A)1 + acc_exp(-x)));
        const A e = acc_exp(x);
        return from_acc<T>(e / ((A)1 + e));
    }
};
// 0.5 x (1 + erf(x / sqrt 2)), as torch.nn.functional.gelu.
struct GeluOp {
    template <typename T> __device__ T operator()(T a) const {
        typedef typename Acc<T>::type A;
        const A x = to_acc(a);
        return from_acc<T>((A)0.5 * x * ((A)1 + acc_erf(x * (A)0.70710678118654752440)));
    }
};
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as gelu(approximate='tanh').
struct GeluTanhOp {
    template <typename T> __device__ T operator()(T a) const {
        typedef typename Acc<T>::type A;
        const A x = to_acc(a);
        const A inner = (A)0.79788456080286535588 * (x + (A)0.044715 * (x * x * x));
        return from_acc<T>((A)0.5 * x * ((A)1 + acc_tanh(inner)));
    }
};

// The gradients of gelu and gelu_tanh, `g * gelu'(x)` with x the first operand and g the
// second, in the accumulation type: gelu'(x) = Phi(x) + x phi(x), and for the tanh form
// 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2), t its tanh.
struct GeluGradOp {
    template <typename T> __device__ T operator()(T a, T b, int*) const {
        typedef typename Acc<T>::type A;
        const A x = to_acc(a);
        const A cdf = (A)0.5 * ((A)1 + acc_erf(x * (A)0.70710678118654752440));
        const A pdf = acc_exp((A)-0.5 * x * x) * (A)0.39894228040143267794;
        return from_acc<T>(to_acc(b) * (cdf + x * pdf));
    }
};
struct GeluTanhGradOp {
    template <typename T> __device__ T operator()(T a, T b, int*) const {
        typedef typename Acc<T>::type A;
        const A x = to_acc(a), k = (A)0.79788456080286535588, c = (A)0.044715;
        const A x2 = x * x;
        const A t = acc_tanh(k * (x + c * x * x2));
        const A d = (A)0.5 * ((A)1 + t) + (A)0.5 * x * ((A)1 - t * t) * k * ((A)1 + (A)3 * c * x2);
        return from_acc<T>(to_acc(b) * d);
    }
};

// sin and cos of radians; full-range argument reduction (sinf, not __sinf), so large
// arguments keep their accuracy. sin(inf) = NaN.
struct SinOp {
    template <typename T> __device__ T operator()(T a) const { return from_acc<T>(acc_sin(to_acc(a))); }
};
struct CosOp {
    template <typename T> __device__ T operator()(T a) const { return from_acc<T>(acc_cos(to_acc(a))); }
};

// `NAME_grad_T(x, g, out, n)`: an activation's gradient, elementwise over same-shape x and g.
#define UNARY_GRAD(NAME, OP, T) \
    extern "C" __global__ void NAME##_grad_##T(const T* x, const T* g, T* out, u64 n) { binary_same<T, OP>(x, g, out, n, 0); }

#define ACTIVATIONS(T) \
    UNARY(log, LogOp, T) UNARY(tanh, TanhOp, T) UNARY(sigmoid, SigmoidOp, T) UNARY(gelu, GeluOp, T) \
    UNARY(gelu_tanh, GeluTanhOp, T) UNARY(sin, SinOp, T) UNARY(cos, CosOp, T) \
    UNARY_GRAD(gelu, GeluGradOp, T) UNARY_GRAD(gelu_tanh, GeluTanhGradOp, T)

ACTIVATIONS(f32)
ACTIVATIONS(f64)
ACTIVATIONS(bf16)
ACTIVATIONS(f16)
