// Comparisons (u8 results of 1 or 0), `where` (a select by a u8 mask), and the index of
// the first maximum over one dim of a [outer, len, inner] view (`argmax`, `max_dim`).
//
// Every value is compared as `to_acc(v)` (float for f32 and the 16-bit float types,
// double for f64, the integer itself otherwise), so a 16-bit type needs instantiation
// lines only. Comparisons are IEEE: NaN compares false except under `ne`.

struct EqOp { template <typename A> __device__ bool operator()(A a, A b) const { return a == b; } };
struct NeOp { template <typename A> __device__ bool operator()(A a, A b) const { return a != b; } };
struct LtOp { template <typename A> __device__ bool operator()(A a, A b) const { return a < b; } };
struct LeOp { template <typename A> __device__ bool operator()(A a, A b) const { return a <= b; } };
struct GtOp { template <typename A> __device__ bool operator()(A a, A b) const { return a > b; } };
struct GeOp { template <typename A> __device__ bool operator()(A a, A b) const { return a >= b; } };

// Up to 8 dims (after merging) and the strides of up to three operands over them, 0
// where an operand is broadcast. Mirrored by `Bcast3` in backend/cuda/select.rs.
struct Bcast3 {
    int rank;
    u64 shape[8];
    u64 s[3][8];
};

// The element of each of the first K operands that output element i reads.
template <int K> __device__ __forceinline__ void bcast_offsets(const Bcast3& bc, u64 i, u64* off) {
#pragma unroll
    for (int k = 0; k < K; k++) off[k] = 0;
    for (int d = bc.rank - 1; d >= 0; d--) {
        const u64 idx = i % bc.shape[d];
        i /= bc.shape[d];
#pragma unroll
        for (int k = 0; k < K; k++) off[k] += idx * bc.s[k][d];
    }
}

// N bytes stored at once: the u8 results of one 16-byte vector of inputs.
template <int N> struct alignas(N) Bytes { u8 v[N]; };

template <typename T, typename Op>
__device__ void compare_same(const T* __restrict__ a, const T* __restrict__ b, u8* __restrict__ out, u64 n) {
    typedef Vec16<T> V;
    typedef Bytes<V::N> B;
    const u64 nv = n / V::N;
    Op op;
    GRID_LOOP(i, nv) {
        const V x = reinterpret_cast<const V*>(a)[i];
        const V y = reinterpret_cast<const V*>(b)[i];
        B r;
#pragma unroll
        for (int k = 0; k < V::N; k++) r.v[k] = op(to_acc(x.v[k]), to_acc(y.v[k])) ? 1 : 0;
        reinterpret_cast<B*>(out)[i] = r;
    }
    GRID_LOOP(j, n - nv * V::N) {
        const u64 i = nv * V::N + j;
        out[i] = op(to_acc(a[i]), to_acc(b[i])) ? 1 : 0;
    }
}

template <typename T, typename Op>
__device__ void compare_scalar(const T* __restrict__ a, T s, u8* __restrict__ out, u64 n) {
    typedef Vec16<T> V;
    typedef Bytes<V::N> B;
    const u64 nv = n / V::N;
    const typename Acc<T>::type sv = to_acc(s);
    Op op;
    GRID_LOOP(i, nv) {
        const V x = reinterpret_cast<const V*>(a)[i];
        B r;
#pragma unroll
        for (int k = 0; k < V::N; k++) r.v[k] = op(to_acc(x.v[k]), sv) ? 1 : 0;
        reinterpret_cast<B*>(out)[i] = r;
    }
    GRID_LOOP(j, n - nv * V::N) {
        const u64 i = nv * V::N + j;
        out[i] = op(to_acc(a[i]), sv) ? 1 : 0;
    }
}

template <typename T, typename Op>
__device__ void compare_bcast(const T* __restrict__ a, const T* __restrict__ b, u8* __restrict__ out, u64 n,
                              const Bcast3& bc) {
    Op op;
    GRID_LOOP(i, n) {
        u64 off[2];
        bcast_offsets<2>(bc, i, off);
        out[i] = op(to_acc(a[off[0]]), to_acc(b[off[1]])) ? 1 : 0;
    }
}

#define COMPARE(NAME, OP, T)                                                                                  \
    extern "C" __global__ void NAME##_same_##T(const T* a, const T* b, u8* out, u64 n) {                       \
        compare_same<T, OP>(a, b, out, n);                                                                    \
    }                                                                                                         \
    extern "C" __global__ void NAME##_scalar_##T(const T* a, T s, u8* out, u64 n) {                            \
        compare_scalar<T, OP>(a, s, out, n);                                                                  \
    }                                                                                                         \
    extern "C" __global__ void NAME##_bcast_##T(const T* a, const T* b, u8* out, u64 n, Bcast3 bc) {           \
        compare_bcast<T, OP>(a, b, out, n, bc);                                                               \
    }

#define ALL_COMPARE(T) COMPARE(eq, EqOp, T) COMPARE(ne, NeOp, T) COMPARE(lt, LtOp, T) COMPARE(le, LeOp, T) \
    COMPARE(gt, GtOp, T) COMPARE(ge, GeOp, T)

// `where`: a[i] where m[i] != 0, else b[i]; all three of one shape. The choice is made on
// the bits of whole 16-byte vectors, `(a & mask) | (b & ~mask)`: branch-free, the same for
// every element type, and exact (a NaN's payload, -0.0). Each thread takes WHERE_UNROLL
// vectors per step, all loads first (the grid, `vector_work` in launch.rs, counts
// UNROLL = 4 vectors a thread).
#define WHERE_UNROLL 4

// The 16-byte mask of one vector of T: each byte 0xff where its element's mask byte is
// set.
template <typename T> __device__ __forceinline__ uint4 byte_mask(const Bytes<Vec16<T>::N>& c) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        w[k] = 0;
#pragma unroll
        for (int byte = 0; byte < 4; byte++) {
            w[k] |= (c.v[(k * 4 + byte) / (int)sizeof(T)] ? 0xffu : 0u) << (8 * byte);
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T>
__device__ void where_same(const u8* __restrict__ m, const T* __restrict__ a, const T* __restrict__ b,
                           T* __restrict__ out, u64 n) {
    typedef Bytes<Vec16<T>::N> B;
    const u64 nv = n / Vec16<T>::N;
    const uint4* av = reinterpret_cast<const uint4*>(a);
    const uint4* bv = reinterpret_cast<const uint4*>(b);
    const u64 step = (u64)gridDim.x * blockDim.x * WHERE_UNROLL;
    for (u64 base = (u64)blockIdx.x * blockDim.x * WHERE_UNROLL + threadIdx.x; base < nv; base += step) {
        B c[WHERE_UNROLL];
        uint4 x[WHERE_UNROLL], y[WHERE_UNROLL];
#pragma unroll
        for (int u = 0; u < WHERE_UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                c[u] = reinterpret_cast<const B*>(m)[i];
                x[u] = av[i];
                y[u] = bv[i];
            }
        }
#pragma unroll
        for (int u = 0; u < WHERE_UNROLL; u++) {
            const u64 i = base + (u64)u * blockDim.x;
            if (i < nv) {
                const uint4 k = byte_mask<T>(c[u]);
                const uint4 p = x[u], q = y[u];
                reinterpret_cast<uint4*>(out)[i] = make_uint4((p.x & k.x) | (q.x & ~k.x), (p.y & k.y) | (q.y & ~k.y),
                                                              (p.z & k.z) | (q.z & ~k.z), (p.w & k.w) | (q.w & ~k.w));
            }
        }
    }
    GRID_LOOP(j, n - nv * Vec16<T>::N) {
        const u64 i = nv * Vec16<T>::N + j;
        out[i] = m[i] ? a[i] : b[i];
    }
}

// `where` under broadcasting: bc.s[0] are the mask's strides, s[1] a's, s[2] b's.
template <typename T>
__device__ void where_bcast(const u8* __restrict__ m, const T* __restrict__ a, const T* __restrict__ b,
                            T* __restrict__ out, u64 n, const Bcast3& bc) {
    GRID_LOOP(i, n) {
        u64 off[3];
        bcast_offsets<3>(bc, i, off);
        out[i] = m[off[0]] ? a[off[1]] : b[off[2]];
    }
}

#define WHERE(T)                                                                                              \
    extern "C" __global__ void where_same_##T(const u8* m, const T* a, const T* b, T* out, u64 n) {           \
        where_same<T>(m, a, b, out, n);                                                                       \
    }                                                                                                         \
    extern "C" __global__ void where_bcast_##T(const u8* m, const T* a, const T* b, T* out, u64 n, Bcast3 bc) { \
        where_bcast<T>(m, a, b, out, n, bc);                                                                  \
    }

// ---- argmax: (value, index) candidates.
//
// An index of ARGMAX_NONE marks "no element seen yet" (a thread with nothing of the row),
// which any element beats; real indices are below it (the host refuses dims longer than
// i32::MAX elements). Between two elements: NaN wins (the lower index of two NaNs), then
// the larger value, then the lower index, so that the result is the first maximum, and
// the value is always the element at the index (-0.0 and 0.0 tie: the first is kept).
#define ARGMAX_NONE 0x7fffffff

template <typename T> __device__ __forceinline__ bool beats(T a, int ia, T b, int ib) {
    if (ib == ARGMAX_NONE) return ia != ARGMAX_NONE;
    if (ia == ARGMAX_NONE) return false;
    const typename Acc<T>::type x = to_acc(a), y = to_acc(b);
    const bool na = is_nan(x), nb = is_nan(y);
    if (na || nb) return na && (!nb || ia < ib);
    return x > y || (x == y && ia < ib);
}

template <typename T> __device__ __forceinline__ void consider(T v, int i, T& bv, int& bi) {
    if (beats(v, i, bv, bi)) {
        bv = v;
        bi = i;
    }
}

// A value from the lane `o` above, moved as its bits (32 or 64 of them), so that every
// value arrives bit for bit, NaN payloads included (a 16-bit float through `float` would
// come back as the canonical NaN).
template <typename T> __device__ __forceinline__ T shfl_down(T v, int o) {
    if constexpr (sizeof(T) == 8) {
        union { T t; unsigned long long u; } x;
        x.t = v;
        x.u = __shfl_down_sync(0xffffffffu, x.u, o);
        return x.t;
    } else {
        union { T t; unsigned u; } x;
        x.u = 0;
        x.t = v;
        x.u = __shfl_down_sync(0xffffffffu, x.u, o);
        return x.t;
    }
}

// The best candidate of the warp, in lane 0. Every lane of the warp calls it.
template <typename T> __device__ __forceinline__ void warp_best(T& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const T ov = shfl_down(v, o);
        const int oi = __shfl_down_sync(0xffffffffu, i, o);
        consider(ov, oi, v, i);
    }
}

// The best candidate of the block, in thread 0. Every thread calls it; block size a
// multiple of 32. The caller syncs before calling it again (shared memory is reused).
template <typename T> __device__ void block_best(T& v, int& i) {
    __shared__ T sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_best(v, i);
    if (lane == 0) {
        sv[warp] = v;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        const bool have = lane < (int)(blockDim.x >> 5);
        v = have ? sv[lane] : v;
        i = have ? si[lane] : ARGMAX_NONE;
        warp_best(v, i);
    }
}

#define ARGMAX_UNROLL 4

// Thread t of `nthreads` scans p[0..len), elements numbered from `base`: the elements
// before the first 16-byte boundary one by one, then 16-byte vectors (ARGMAX_UNROLL of
// them loaded before any is compared), then the tail. Every row gets vector loads,
// aligned or not.
template <typename T>
__device__ void scan(const T* __restrict__ p, u64 len, u64 base, u64 t, u64 nthreads, T& bv, int& bi) {
    typedef Vec16<T> V;
    u64 head = ((16 - ((u64)p & 15)) & 15) / sizeof(T);
    if (head > len) head = len;
    for (u64 j = t; j < head; j += nthreads) consider(p[j], (int)(base + j), bv, bi);
    const u64 nv = (len - head) / V::N;
    const V* pv = reinterpret_cast<const V*>(p + head);
    for (u64 k = t; k < nv; k += ARGMAX_UNROLL * nthreads) {
        V a[ARGMAX_UNROLL];
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            const u64 kk = k + u * nthreads;
            if (kk < nv) a[u] = pv[kk];
        }
#pragma unroll
        for (int u = 0; u < ARGMAX_UNROLL; u++) {
            const u64 kk = k + u * nthreads;
            if (kk < nv) {
                const u64 at = base + head + kk * V::N;
#pragma unroll
                for (int e = 0; e < V::N; e++) consider(a[u].v[e], (int)(at + e), bv, bi);
            }
        }
    }
    for (u64 j = head + nv * V::N + t; j < len; j += nthreads) consider(p[j], (int)(base + j), bv, bi);
}

// Rows of [outer, len] (inner == 1), each cut into `nchunks` segments of `chunk`
// elements (the last one shorter), one block per segment (grid-stride): segment s's
// candidate goes to vals[s] (when not null) and idx[s], its index counted from the row's
// start. With one chunk per row these are the results; with more, partials for
// argmax_final.
template <typename T>
__device__ void argmax_block(const T* x, u64 outer, u64 len, u64 chunk, u64 nchunks, T* vals, int* idx) {
    for (u64 seg = blockIdx.x; seg < outer * nchunks; seg += gridDim.x) {
        const u64 row = seg / nchunks, start = (seg % nchunks) * chunk;
        const u64 n = len - start < chunk ? len - start : chunk;
        T bv = T();
        int bi = ARGMAX_NONE;
        scan(x + row * len + start, n, start, threadIdx.x, blockDim.x, bv, bi);
        block_best(bv, bi);
        if (threadIdx.x == 0) {
            if (vals) vals[seg] = bv;
            idx[seg] = bi;
        }
        __syncthreads();
    }
}

// One warp per row of [outer, len] (short rows): all 32 lanes scan the row.
template <typename T> __device__ void argmax_warp(const T* x, u64 outer, u64 len, T* vals, int* idx) {
    const u64 per_block = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (u64 row = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); row < outer; row += (u64)gridDim.x * per_block) {
        T bv = T();
        int bi = ARGMAX_NONE;
        scan(x + row * len, len, 0, lane, 32, bv, bi);
        warp_best(bv, bi);
        if (lane == 0) {
            if (vals) vals[row] = bv;
            idx[row] = bi;
        }
    }
}

// One warp per row: the best of the row's `nchunks` partial candidates from argmax_block.
template <typename T>
__device__ void argmax_final(const T* pv, const int* pi, u64 outer, u64 nchunks, T* vals, int* idx) {
    const u64 per_block = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (u64 row = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); row < outer; row += (u64)gridDim.x * per_block) {
        T bv = T();
        int bi = ARGMAX_NONE;
        for (u64 c = lane; c < nchunks; c += 32) consider(pv[row * nchunks + c], pi[row * nchunks + c], bv, bi);
        warp_best(bv, bi);
        if (lane == 0) {
            if (vals) vals[row] = bv;
            idx[row] = bi;
        }
    }
}

// Over `len` of [outer, len, inner] with inner > 1. A block of 32 x 8 threads takes a
// tile of 32 neighbouring columns of one outer slice and one segment of `len` (`chunk`
// rows; the last one shorter): lane tx reads column tx, warp ty rows ty, ty + 8, ..., four
// rows loaded before any is compared, so each warp reads 32 neighbouring elements per
// row. The 8 candidates of a column meet in shared memory. Candidate of column c of slice
// o and segment s: at (o * inner + c) * nchunks + s of vals (when not null) and idx, the
// results when nchunks is 1, else partials for argmax_final (one "row" per output).
#define TILE_ROWS 8

template <typename T>
__device__ void argmax_tile(const T* x, u64 outer, u64 len, u64 inner, u64 chunk, u64 nchunks, T* vals, int* idx) {
    __shared__ T sv[TILE_ROWS][32];
    __shared__ int si[TILE_ROWS][32];
    const u64 tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const u64 tiles = (inner + 31) / 32;
    for (u64 b = blockIdx.x; b < outer * tiles * nchunks; b += gridDim.x) {
        const u64 seg = b % nchunks, tile = b / nchunks % tiles, o = b / nchunks / tiles;
        const u64 col = tile * 32 + tx, start = seg * chunk;
        const u64 end = len - start < chunk ? len : start + chunk;
        T bv = T();
        int bi = ARGMAX_NONE;
        if (col < inner) {
            const T* p = x + o * len * inner + col;
            u64 j = start + ty;
            for (; j + 3 * TILE_ROWS < end; j += 4 * TILE_ROWS) {
                T a[4];
#pragma unroll
                for (int u = 0; u < 4; u++) a[u] = p[(j + u * TILE_ROWS) * inner];
#pragma unroll
                for (int u = 0; u < 4; u++) consider(a[u], (int)(j + u * TILE_ROWS), bv, bi);
            }
            for (; j < end; j += TILE_ROWS) consider(p[j * inner], (int)j, bv, bi);
        }
        sv[ty][tx] = bv;
        si[ty][tx] = bi;
        __syncthreads();
        if (ty == 0 && col < inner) {
#pragma unroll
            for (int k = 1; k < TILE_ROWS; k++) consider(sv[k][tx], si[k][tx], bv, bi);
            const u64 at = (o * inner + col) * nchunks + seg;
            if (vals) vals[at] = bv;
            idx[at] = bi;
        }
        __syncthreads();
    }
}

#define ARGMAX(T)                                                                                              \
    extern "C" __global__ void argmax_block_##T(const T* x, u64 outer, u64 len, u64 chunk, u64 nchunks, T* vals, \
                                                int* idx) {                                                    \
        argmax_block<T>(x, outer, len, chunk, nchunks, vals, idx);                                             \
    }                                                                                                          \
    extern "C" __global__ void argmax_warp_##T(const T* x, u64 outer, u64 len, T* vals, int* idx) {             \
        argmax_warp<T>(x, outer, len, vals, idx);                                                              \
    }                                                                                                          \
    extern "C" __global__ void argmax_final_##T(const T* pv, const int* pi, u64 outer, u64 nchunks, T* vals,    \
                                                int* idx) {                                                    \
        argmax_final<T>(pv, pi, outer, nchunks, vals, idx);                                                    \
    }                                                                                                          \
    extern "C" __global__ void argmax_tile_##T(const T* x, u64 outer, u64 len, u64 inner, u64 chunk, u64 nchunks,  \
                                               T* vals, int* idx) {                                            \
        argmax_tile<T>(x, outer, len, inner, chunk, nchunks, vals, idx);                                       \
    }

#define ALL_SELECT(T) ALL_COMPARE(T) WHERE(T) ARGMAX(T)

ALL_SELECT(f32)
ALL_SELECT(f64)
ALL_SELECT(i32)
ALL_SELECT(i64)
ALL_SELECT(u8)
ALL_SELECT(bf16)
ALL_SELECT(f16)
