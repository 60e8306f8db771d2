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
struct ExpOp {
    __device__ f32 operator()(f32 a) const { return expf(a); }
    __device__ f64 operator()(f64 a) const { return exp(a); }
};
struct SqrtOp {
    __device__ f32 operator()(f32 a) const { return sqrtf(a); }
    __device__ f64 operator()(f64 a) const { return sqrt(a); }
};

// Each thread handles UNROLL vectors per step, loads first, so that several memory
// requests are in flight per thread; the grid covers the data (no grid-stride loop
// needed, but kept for robustness).
#define UNROLL 4

template <typename T, typename Op>
__device__ void unary(const T* __restrict__ x, T* __restrict__ out, u64 n) {
    typedef Vec16<T> V;
    const u64 nv = n / V::N;
    const V* xv = reinterpret_cast<const V*>(x);
    V* ov = reinterpret_cast<V*>(out);
    Op op;
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

#define UNARY(NAME, OP, T) \
    extern "C" __global__ void NAME##_##T(const T* x, T* out, u64 n) { unary<T, OP>(x, out, n); }

#define BINARY(NAME, OP, T)                                                                                 \
    extern "C" __global__ void NAME##_same_##T(const T* a, const T* b, T* out, u64 n, int* err) {           \
        binary_same<T, OP>(a, b, out, n, err);                                                              \
    }                                                                                                       \
    extern "C" __global__ void NAME##_scalar_##T(const T* a, T s, T* out, u64 n, int* err) {                \
        binary_scalar<T, OP>(a, s, out, n, err);                                                            \
    }                                                                                                       \
    extern "C" __global__ void NAME##_bcast_##T(const T* a, const T* b, T* out, u64 n, Bcast bc, int* err) { \
        binary_bcast<T, OP>(a, b, out, n, bc, err);                                                         \
    }

#define ALL_BINARY(T) BINARY(add, AddOp, T) BINARY(sub, SubOp, T) BINARY(mul, MulOp, T) BINARY(div, DivOp, T)

ALL_BINARY(f32)
ALL_BINARY(f64)
ALL_BINARY(i32)
ALL_BINARY(u8)

UNARY(neg, NegOp, f32) UNARY(neg, NegOp, f64) UNARY(neg, NegOp, i32) UNARY(neg, NegOp, u8)
UNARY(relu, ReluOp, f32) UNARY(relu, ReluOp, f64) UNARY(relu, ReluOp, i32) UNARY(relu, ReluOp, u8)
UNARY(exp, ExpOp, f32) UNARY(exp, ExpOp, f64)
UNARY(sqrt, SqrtOp, f32) UNARY(sqrt, SqrtOp, f64)
