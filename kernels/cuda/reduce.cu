// Reductions: sum, mean, max and the sum of squares over all elements (two passes:
// per-block partials, then one block) and over one dim of a [outer, len, inner] view
// (a block per row, a thread per output, or tiles of columns for few, long columns).
//
// Float sums accumulate in f64 and integer sums in unsigned 32-bit (64-bit for i64),
// wrapping, as the host backend does, so both give the same answers.

template <typename T> struct SumAcc { typedef f64 A; };
template <> struct SumAcc<i32> { typedef unsigned A; };
template <> struct SumAcc<i64> { typedef u64 A; };
template <> struct SumAcc<u8> { typedef unsigned A; };

template <typename T> struct Sum {
    typedef typename SumAcc<T>::A A;
    static __device__ A init() { return (A)0; }
    static __device__ A load(T v) { return (A)v; }
    static __device__ A combine(A a, A b) { return a + b; }
    static __device__ T finish(A a, u64) { return (T)a; }
};

template <typename T> struct Mean {
    typedef f64 A;
    static __device__ A init() { return 0.0; }
    static __device__ A load(T v) { return (A)v; }
    static __device__ A combine(A a, A b) { return a + b; }
    static __device__ T finish(A a, u64 len) { return (T)(a / (f64)len); }
};

// The sum of the squares (float types), each squared in f64 as it is read.
template <typename T> struct SumSq {
    typedef f64 A;
    static __device__ A init() { return 0.0; }
    static __device__ A load(T v) {
        const A a = (A)v;
        return a * a;
    }
    static __device__ A combine(A a, A b) { return a + b; }
    static __device__ T finish(A a, u64) { return (T)a; }
};

template <typename T> struct MaxInit { static __device__ T v() { return (T)0; } };
template <> struct MaxInit<f32> { static __device__ f32 v() { return -__int_as_float(0x7f800000); } };
template <> struct MaxInit<f64> { static __device__ f64 v() { return -__longlong_as_double(0x7ff0000000000000ll); } };
template <> struct MaxInit<i32> { static __device__ i32 v() { return (i32)0x80000000; } };
template <> struct MaxInit<i64> { static __device__ i64 v() { return (i64)0x8000000000000000ull; } };

template <> struct MaxInit<bf16> { static __device__ bf16 v() { return bf16(-__int_as_float(0x7f800000)); } };
template <> struct MaxInit<f16> { static __device__ f16 v() { return f16(-__int_as_float(0x7f800000)); } };

template <typename T> struct MaxAcc { typedef T A; };
template <> struct MaxAcc<bf16> { typedef f32 A; };  // exact, and a shuffle-able type
template <> struct MaxAcc<f16> { typedef f32 A; };
template <> struct MaxAcc<u8> { typedef unsigned A; };  // shuffles need 32-bit values

template <typename T> struct Max {
    typedef typename MaxAcc<T>::A A;
    static __device__ A init() { return (A)MaxInit<T>::v(); }
    static __device__ A load(T v) { return (A)v; }
    static __device__ A combine(A a, A b) { return op_max(a, b); }
    static __device__ T finish(A a, u64) { return (T)a; }
};

// The reduction of v over the block, valid in thread 0. Block size: a multiple of 32.
template <typename R> __device__ typename R::A block_reduce(typename R::A v) {
    typedef typename R::A A;
    __shared__ A partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : R::init();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = R::combine(v, __shfl_down_sync(0xffffffffu, v, o));
    }
    return v;
}

// Pass 1: each block reduces a grid-stride share of x into partial[blockIdx.x].
template <typename T, typename R> __device__ void reduce_partial(const T* x, u64 n, typename R::A* partial) {
    typedef Vec16<T> V;
    const u64 nv = n / V::N;
    const V* xv = reinterpret_cast<const V*>(x);
    typename R::A v = R::init();
    GRID_LOOP(i, nv) {
        const V a = xv[i];
#pragma unroll
        for (int k = 0; k < V::N; k++) v = R::combine(v, R::load(a.v[k]));
    }
    GRID_LOOP(j, n - nv * V::N) v = R::combine(v, R::load(x[nv * V::N + j]));
    v = block_reduce<R>(v);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// Pass 2 (one block): partials to the result; `len` is the element count (for mean).
template <typename T, typename R>
__device__ void reduce_final(const typename R::A* partial, u64 nparts, T* out, u64 len) {
    typename R::A v = R::init();
    for (u64 i = threadIdx.x; i < nparts; i += blockDim.x) v = R::combine(v, partial[i]);
    v = block_reduce<R>(v);
    if (threadIdx.x == 0) *out = R::finish(v, len);
}

// One block: all of x to the result (small inputs, one launch).
template <typename T, typename R> __device__ void reduce_single(const T* x, u64 n, T* out) {
    typename R::A v = R::init();
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) v = R::combine(v, R::load(x[i]));
    v = block_reduce<R>(v);
    if (threadIdx.x == 0) *out = R::finish(v, n);
}

// Over `len` of [outer, len, inner] with inner > 1: one thread per output, so that
// neighbouring threads read neighbouring elements.
template <typename T, typename R> __device__ void reduce_cols(const T* x, T* out, u64 outer, u64 len, u64 inner) {
    GRID_LOOP(o, outer * inner) {
        const u64 a = o / inner, b = o % inner;
        const T* p = x + a * len * inner + b;
        typename R::A v = R::init();
        for (u64 j = 0; j < len; j++) v = R::combine(v, R::load(p[j * inner]));
        out[o] = R::finish(v, len);
    }
}

// Over `len` of [outer, len, inner] when the outputs are few and `len` long (a bias's
// gradient: [tokens, width] summed over the tokens), where a thread per output would walk
// a whole column alone. A block of 32 x 32 threads takes a tile of 32 neighbouring columns
// of one outer slice and one segment of `len` (`chunk` rows, the last one shorter): lane
// tx reads column tx, warp ty rows ty, ty + 32, ..., four rows loaded before any is added,
// so each warp reads 32 neighbouring elements per row. Thread row 0 adds the 32 partial
// results of its column in shared memory in a fixed order. Column c of slice o, segment s:
// with one segment the result goes to out[o * inner + c], else the accumulator to
// partial[(o * inner + c) * nchunks + s] for reduce_tile_final.
#define COL_TILE_ROWS 32

template <typename T, typename R>
__device__ void reduce_tile(const T* x, u64 outer, u64 len, u64 inner, u64 chunk, u64 nchunks, T* out,
                            typename R::A* partial) {
    typedef typename R::A A;
    __shared__ A part[COL_TILE_ROWS][33];
    const u64 tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const u64 tiles = (inner + 31) / 32;
    for (u64 b = blockIdx.x; b < outer * tiles * nchunks; b += gridDim.x) {
        const u64 seg = b % nchunks, tile = b / nchunks % tiles, o = b / nchunks / tiles;
        const u64 col = tile * 32 + tx, start = seg * chunk;
        const u64 end = len - start < chunk ? len : start + chunk;
        A v = R::init();
        if (col < inner) {
            const T* p = x + o * len * inner + col;
            u64 j = start + ty;
            for (; j + 3 * COL_TILE_ROWS < end; j += 4 * COL_TILE_ROWS) {
                T a[4];
#pragma unroll
                for (int u = 0; u < 4; u++) a[u] = p[(j + u * COL_TILE_ROWS) * inner];
#pragma unroll
                for (int u = 0; u < 4; u++) v = R::combine(v, R::load(a[u]));
            }
            for (; j < end; j += COL_TILE_ROWS) v = R::combine(v, R::load(p[j * inner]));
        }
        part[ty][tx] = v;
        __syncthreads();
        if (ty == 0 && col < inner) {
#pragma unroll 8
            for (int k = 1; k < COL_TILE_ROWS; k++) v = R::combine(v, part[k][tx]);
            if (nchunks == 1) {
                out[o * inner + col] = R::finish(v, len);
            } else {
                partial[(o * inner + col) * nchunks + seg] = v;
            }
        }
        __syncthreads();
    }
}

// Each output's `nchunks` accumulators from reduce_tile, combined in segment order.
template <typename T, typename R>
__device__ void reduce_tile_final(const typename R::A* partial, u64 outputs, u64 nchunks, u64 len, T* out) {
    GRID_LOOP(i, outputs) {
        typename R::A v = partial[i * nchunks];
        for (u64 s = 1; s < nchunks; s++) v = R::combine(v, partial[i * nchunks + s]);
        out[i] = R::finish(v, len);
    }
}

// Over `len` of [outer, len] (inner == 1): one block per row.
template <typename T, typename R> __device__ void reduce_rows(const T* x, T* out, u64 outer, u64 len) {
    for (u64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* p = x + row * len;
        typename R::A v = R::init();
        for (u64 j = threadIdx.x; j < len; j += blockDim.x) v = R::combine(v, R::load(p[j]));
        v = block_reduce<R>(v);
        if (threadIdx.x == 0) out[row] = R::finish(v, len);
        __syncthreads();
    }
}

#define REDUCE(NAME, R, T)                                                                                      \
    extern "C" __global__ void NAME##_partial_##T(const T* x, u64 n, R<T>::A* partial) {                        \
        reduce_partial<T, R<T> >(x, n, partial);                                                                \
    }                                                                                                           \
    extern "C" __global__ void NAME##_final_##T(const R<T>::A* partial, u64 nparts, T* out, u64 len) {          \
        reduce_final<T, R<T> >(partial, nparts, out, len);                                                      \
    }                                                                                                           \
    extern "C" __global__ void NAME##_single_##T(const T* x, u64 n, T* out) { reduce_single<T, R<T> >(x, n, out); } \
    extern "C" __global__ void NAME##_cols_##T(const T* x, T* out, u64 outer, u64 len, u64 inner) {             \
        reduce_cols<T, R<T> >(x, out, outer, len, inner);                                                       \
    }                                                                                                           \
    extern "C" __global__ void NAME##_rows_##T(const T* x, T* out, u64 outer, u64 len) {                        \
        reduce_rows<T, R<T> >(x, out, outer, len);                                                              \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(1024) NAME##_tile_##T(const T* x, u64 outer, u64 len, u64 inner,  \
                                                                      u64 chunk, u64 nchunks, T* out,           \
                                                                      R<T>::A* partial) {                       \
        reduce_tile<T, R<T> >(x, outer, len, inner, chunk, nchunks, out, partial);                              \
    }                                                                                                           \
    extern "C" __global__ void NAME##_tilefinal_##T(const R<T>::A* partial, u64 outputs, u64 nchunks, u64 len,  \
                                                    T* out) {                                                   \
        reduce_tile_final<T, R<T> >(partial, outputs, nchunks, len, out);                                       \
    }

REDUCE(sum, Sum, f32)
REDUCE(sum, Sum, f64)
REDUCE(sum, Sum, i32)
REDUCE(sum, Sum, i64)
REDUCE(sum, Sum, u8)
REDUCE(mean, Mean, f32)
REDUCE(mean, Mean, f64)
REDUCE(max, Max, f32)
REDUCE(max, Max, f64)
REDUCE(max, Max, i32)
REDUCE(max, Max, i64)
REDUCE(max, Max, u8)
REDUCE(sum, Sum, bf16)
REDUCE(sum, Sum, f16)
REDUCE(mean, Mean, bf16)
REDUCE(mean, Mean, f16)
REDUCE(max, Max, bf16)
REDUCE(max, Max, f16)
REDUCE(sumsq, SumSq, f32)
REDUCE(sumsq, SumSq, f64)
REDUCE(sumsq, SumSq, bf16)
REDUCE(sumsq, SumSq, f16)
