// Softmax and log-softmax over one dim of a [outer, len, inner] view, the per-row
// losses of cross-entropy (log-softmax at the target, negated), and LayerNorm's
// normalisation of rows and its gradient.
//
// Every value is read with `to_acc`, computed in `Acc<T>::type` (float for f32 and the
// 16-bit types, double for f64) and written with `from_acc`. Stable: the row's maximum
// is subtracted before `exp`. The special values follow from that arithmetic, as on the
// host: -inf entries give 0 (log-softmax -inf); a row of only -inf, or one with +inf or
// NaN, gives NaN throughout, as in PyTorch.
//
// Over the last dim (inner == 1) a row belongs to a group of threads: a warp for short
// rows (several rows per block), a block for long ones. The group loads the row once
// into registers (16-byte vector loads where the rows are aligned), reduces the maximum
// and the sum of exponentials with warp shuffles (then shared memory across the warps of
// a block), and writes from registers. Rows longer than the registers hold are read
// twice (an online maximum and sum, then the write; the second read comes from L2).
// Over an inner dim each thread takes one output column.

template <typename A> __device__ __forceinline__ A pos_inf();
template <> __device__ __forceinline__ f32 pos_inf<f32>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ f64 pos_inf<f64>() { return __longlong_as_double(0x7ff0000000000000ll); }
template <typename A> __device__ __forceinline__ A neg_inf() { return -pos_inf<A>(); }
template <typename A> __device__ __forceinline__ A nan_of() { return pos_inf<A>() - pos_inf<A>(); }

__device__ __forceinline__ f32 acc_exp(f32 v) { return expf(v); }
__device__ __forceinline__ f64 acc_exp(f64 v) { return exp(v); }
__device__ __forceinline__ f32 acc_log(f32 v) { return logf(v); }
__device__ __forceinline__ f64 acc_log(f64 v) { return log(v); }

struct MaxOp { template <typename A> __device__ A operator()(A a, A b) const { return op_max(a, b); } };
struct SumOp { template <typename A> __device__ A operator()(A a, A b) const { return a + b; } };

// The combination of `v` over the 32 lanes of a warp, in every lane.
template <typename A, typename Op> __device__ __forceinline__ A warp_all(A v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A row's threads: one warp of a block of (32, rows per block) threads.
struct WarpRow {
    static __device__ __forceinline__ u64 first() { return (u64)blockIdx.x * blockDim.y + threadIdx.y; }
    static __device__ __forceinline__ u64 step() { return (u64)gridDim.x * blockDim.y; }
    static __device__ __forceinline__ u64 rank() { return threadIdx.x; }
    static __device__ __forceinline__ u64 size() { return 32; }
    template <typename A, typename Op> static __device__ __forceinline__ A all(A v, Op op) { return warp_all(v, op); }
};

// A row's threads: a whole block of (a multiple of 32, at most 1024) threads. `all` has
// barriers: every thread of the block calls it, as the rows loop is the same for all.
struct BlockRow {
    static __device__ __forceinline__ u64 first() { return blockIdx.x; }
    static __device__ __forceinline__ u64 step() { return gridDim.x; }
    static __device__ __forceinline__ u64 rank() { return threadIdx.x; }
    static __device__ __forceinline__ u64 size() { return blockDim.x; }
    template <typename A, typename Op> static __device__ A all(A v, Op op) {
        __shared__ A part[32];
        v = warp_all(v, op);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
        __syncthreads();
        A r = part[0];
        for (unsigned w = 1; w < (blockDim.x >> 5); w++) r = op(r, part[w]);
        // The next call writes `part` again only after every thread has read it.
        __syncthreads();
        return r;
    }
};

// The maximum `m` and the sum `s` of exp(x - m) of the values seen so far, one value at a
// time. A -inf value adds nothing (when every value is -inf, m stays -inf and s 0). When
// the maximum grows, the old sum is rescaled and the new value adds exp(v - v): 1, or NaN
// for +inf, as the two-pass form gives (exp(inf - inf)). NaN makes both NaN.
template <typename A> struct Online {
    A m, s;
    __device__ __forceinline__ Online() : m(neg_inf<A>()), s((A)0) {}
    __device__ __forceinline__ void add(A v) {
        if (v == neg_inf<A>()) return;
        if (v <= m) {
            s += acc_exp(v - m);
        } else if (v > m) {
            s = s * acc_exp(m - v) + (v == pos_inf<A>() ? nan_of<A>() : (A)1);
            m = v;
        } else {  // NaN on either side
            m = op_max(m, v);
            s = m;
        }
    }
};

// The maximum and the sum of exp(x - max) over the row of group G, from each thread's
// `Online`: in every thread of the group. A part that saw nothing but -inf adds 0.
template <typename A, typename G> __device__ __forceinline__ Online<A> merge(Online<A> o) {
    Online<A> r;
    r.m = G::all(o.m, MaxOp());
    const A part = o.s == (A)0 ? (A)0 : o.s * acc_exp(o.m - r.m);
    r.s = G::all(part, SumOp());
    return r;
}

// The row statistics of `len` elements at `p`, read by group G in strides.
template <typename T, typename G> __device__ Online<typename Acc<T>::type> row_stats(const T* p, u64 len) {
    typedef typename Acc<T>::type A;
    Online<A> o;
    const u64 rank = G::rank(), size = G::size();
    u64 i = rank;
    // Four loads in flight per thread before their values are used.
    for (; i + 3 * size < len; i += 4 * size) {
        A v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = to_acc(p[i + k * size]);
#pragma unroll
        for (int k = 0; k < 4; k++) o.add(v[k]);
    }
    for (; i < len; i += size) o.add(to_acc(p[i]));
    return merge<A, G>(o);
}

// One output value from x (in the accumulator type), the row's maximum m and, for
// softmax, 1 / sum; for log-softmax, log(sum).
template <bool LOG, typename A> __device__ __forceinline__ A finish(A v, A m, A k) {
    return LOG ? v - m - k : acc_exp(v - m) * k;
}

// Rows of `len` elements (inner == 1) held in registers: group G, E elements per
// thread, in 16-byte vectors when VEC (the rows and both pointers are 16-byte aligned:
// len is a multiple of the vector width), else one element at a time. The host picks
// the group so that a row fits: len <= E * G::size() (so indices within a row fit 32
// bits, which keeps the registers for the row's values).
template <typename T, bool LOG, typename G, bool VEC, int E>
__device__ void softmax_regs(const T* __restrict__ x, T* __restrict__ out, u64 rows, u64 len) {
    typedef typename Acc<T>::type A;
    typedef Vec16<T> V;
    const int N = VEC ? V::N : 1;
    const int K = E / N;  // loads per thread
    const unsigned rank = (unsigned)G::rank(), size = (unsigned)G::size();
    const unsigned units = (unsigned)(len / N);  // vectors (or elements) per row
    // Loads this thread makes per row: units rank, rank + size, ... below `units`.
    const int mine = units > rank ? (int)((units - rank + size - 1) / size) : 0;
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* p = x + row * len;
        T* q = out + row * len;
        A v[E];
        A m = neg_inf<A>();
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k < mine) {
                const unsigned u = rank + (unsigned)k * size;
                if constexpr (VEC) {
                    const V a = reinterpret_cast<const V*>(p)[u];
#pragma unroll
                    for (int j = 0; j < N; j++) v[k * N + j] = to_acc(a.v[j]);
                } else {
                    v[k] = to_acc(p[u]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k < mine) {
#pragma unroll
                for (int j = 0; j < N; j++) m = op_max(m, v[k * N + j]);
            }
        }
        m = G::all(m, MaxOp());
        A s = (A)0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k < mine) {
#pragma unroll
                for (int j = 0; j < N; j++) {
                    const A e = acc_exp(v[k * N + j] - m);
                    s += e;
                    if (!LOG) v[k * N + j] = e;
                }
            }
        }
        s = G::all(s, SumOp());
        // Softmax multiplies by 1 / sum, log-softmax subtracts max, then log(sum).
        const A c = LOG ? acc_log(s) : (A)1 / s;
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (k < mine) {
                const unsigned u = rank + (unsigned)k * size;
                if constexpr (VEC) {
                    V r;
#pragma unroll
                    for (int j = 0; j < N; j++) {
                        const A w = v[k * N + j];
                        r.v[j] = from_acc<T>(LOG ? w - m - c : w * c);
                    }
                    reinterpret_cast<V*>(q)[u] = r;
                } else {
                    q[u] = from_acc<T>(LOG ? v[k] - m - c : v[k] * c);
                }
            }
        }
    }
}

// Rows of any length (inner == 1), one block each: the statistics in one read, then a
// second read to write.
template <typename T, bool LOG>
__device__ void softmax_loop(const T* __restrict__ x, T* __restrict__ out, u64 rows, u64 len) {
    typedef typename Acc<T>::type A;
    for (u64 row = BlockRow::first(); row < rows; row += BlockRow::step()) {
        const T* p = x + row * len;
        T* q = out + row * len;
        const Online<A> o = row_stats<T, BlockRow>(p, len);
        const A k = LOG ? acc_log(o.s) : (A)1 / o.s;
        for (u64 i = BlockRow::rank(); i < len; i += BlockRow::size()) q[i] = from_acc<T>(finish<LOG>(to_acc(p[i]), o.m, k));
    }
}

// Over `len` of [outer, len, inner] with inner > 1: one thread per output column, so that
// neighbouring threads read neighbouring elements; two reads of the column.
template <typename T, bool LOG>
__device__ void softmax_cols(const T* __restrict__ x, T* __restrict__ out, u64 outer, u64 len, u64 inner) {
    typedef typename Acc<T>::type A;
    GRID_LOOP(c, outer * inner) {
        const u64 a = c / inner, b = c % inner;
        const T* p = x + a * len * inner + b;
        T* q = out + a * len * inner + b;
        Online<A> o;
        for (u64 j = 0; j < len; j++) o.add(to_acc(p[j * inner]));
        const A k = LOG ? acc_log(o.s) : (A)1 / o.s;
        for (u64 j = 0; j < len; j++) q[j * inner] = from_acc<T>(finish<LOG>(to_acc(p[j * inner]), o.m, k));
    }
}

// Cross-entropy's loss per row of [rows, c] logits: logsumexp(row) - row[target], one
// read of the logits (the statistics in one pass, then the target's value). A target out
// of [0, c) is reported through `err` and its loss is NaN.
template <typename T, typename G>
__device__ void nll_rows(const T* __restrict__ x, const i32* __restrict__ target, T* __restrict__ loss, u64 rows, u64 c,
                         u64* err) {
    typedef typename Acc<T>::type A;
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* p = x + row * c;
        const Online<A> o = row_stats<T, G>(p, c);
        if (G::rank() == 0) {
            const i32 t = target[row];
            if (t < 0 || (u64)t >= c) {
                report_index(err, row, t);
                loss[row] = from_acc<T>(nan_of<A>());
            } else {
                loss[row] = from_acc<T>(o.m + acc_log(o.s) - to_acc(p[t]));
            }
        }
    }
}

// Cross-entropy's gradient per row of [rows, c] logits, given the gradient g[row] of each
// row's loss: dx = (softmax(row) - onehot(target)) * g[row], one row per group, the
// statistics in one pass, then the write. A target out of [0, c) (the forward checked
// them; only changed targets can be) matches no class.
template <typename T, typename G>
__device__ void nll_back_rows(const T* __restrict__ x, const i32* __restrict__ target, const T* __restrict__ g,
                              T* __restrict__ dx, u64 rows, u64 c) {
    typedef typename Acc<T>::type A;
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* p = x + row * c;
        T* q = dx + row * c;
        const Online<A> o = row_stats<T, G>(p, c);
        const A k = (A)1 / o.s, gr = to_acc(g[row]);
        const i64 t = target[row];
        for (u64 i = G::rank(); i < c; i += G::size()) {
            const A hit = (i64)i == t ? (A)1 : (A)0;
            q[i] = from_acc<T>((finish<false>(to_acc(p[i]), o.m, k) - hit) * gr);
        }
    }
}

// LayerNorm's normalisation of each row of `len` (no weight or bias): (x - mean) * rstd,
// rstd = 1 / sqrt(var + eps), the variance biased (over len), as PyTorch's. Group G reads
// the row three times (the mean, the variance about it, the write; the later reads come
// from L1/L2), in the accumulator type.
__device__ __forceinline__ f32 acc_rsqrt(f32 v) { return 1.0f / sqrtf(v); }
__device__ __forceinline__ f64 acc_rsqrt(f64 v) { return 1.0 / sqrt(v); }

template <typename T, typename G> struct RowMoments {
    typename Acc<T>::type mean, rstd;
    __device__ __forceinline__ RowMoments(const T* p, u64 len, f64 eps) {
        typedef typename Acc<T>::type A;
        A s = (A)0;
        for (u64 i = G::rank(); i < len; i += G::size()) s += to_acc(p[i]);
        mean = G::all(s, SumOp()) / (A)len;
        A v = (A)0;
        for (u64 i = G::rank(); i < len; i += G::size()) {
            const A d = to_acc(p[i]) - mean;
            v += d * d;
        }
        rstd = acc_rsqrt(G::all(v, SumOp()) / (A)len + (A)eps);
    }
};

// With `w` and `b` (`len` each; both or neither), LayerNorm's affine part too:
// xhat * w + b, rounded once.
template <typename T, typename G>
__device__ void norm_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                          u64 rows, u64 len, f64 eps) {
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* p = x + row * len;
        T* q = y + row * len;
        const RowMoments<T, G> m(p, len, eps);
        for (u64 i = G::rank(); i < len; i += G::size()) {
            const typename Acc<T>::type xh = (to_acc(p[i]) - m.mean) * m.rstd;
            q[i] = from_acc<T>(w ? xh * to_acc(w[i]) + to_acc(b[i]) : xh);
        }
    }
}

// The gradient of norm_rows at x, given the gradient g of its output:
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), xhat = (x - mean) * rstd, gw = g * w
// with a weight `w`, else g; one row per group, the moments computed again from x. With
// `stats`, each row's mean and rstd go to stats[2 row] and stats[2 row + 1], for
// norm_params.
template <typename T, typename G>
__device__ void norm_back_rows(const T* __restrict__ x, const T* __restrict__ g, const T* __restrict__ w,
                               T* __restrict__ dx, typename Acc<T>::type* __restrict__ stats, u64 rows, u64 len,
                               f64 eps) {
    typedef typename Acc<T>::type A;
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* p = x + row * len;
        const T* gp = g + row * len;
        T* q = dx + row * len;
        const RowMoments<T, G> m(p, len, eps);
        A sg = (A)0, sgx = (A)0;
        for (u64 i = G::rank(); i < len; i += G::size()) {
            const A gi = w ? to_acc(gp[i]) * to_acc(w[i]) : to_acc(gp[i]);
            sg += gi;
            sgx += gi * ((to_acc(p[i]) - m.mean) * m.rstd);
        }
        sg = G::all(sg, SumOp()) / (A)len;
        sgx = G::all(sgx, SumOp()) / (A)len;
        for (u64 i = G::rank(); i < len; i += G::size()) {
            const A xh = (to_acc(p[i]) - m.mean) * m.rstd;
            const A gi = w ? to_acc(gp[i]) * to_acc(w[i]) : to_acc(gp[i]);
            q[i] = from_acc<T>(m.rstd * (gi - sg - xh * sgx));
        }
        if (stats && G::rank() == 0) {
            stats[2 * row] = m.mean;
            stats[2 * row + 1] = m.rstd;
        }
    }
}

// LayerNorm's weight and bias gradients: dw[c] = sum over rows of g * xhat, db[c] = sum
// of g, in f64, xhat from the rows' `stats` (norm_back_rows). As reduce.cu's column tiles:
// a block of 32 x 32 threads takes 32 neighbouring columns and one segment of the rows
// (`chunk` rows, the last one shorter); thread row 0 adds the 32 partial sums of its
// column in a fixed order. With one segment the results go to dw and db, else the sums
// of segment s of column c to partial[2 (c nchunks + s)] and the next place, for
// norm_params_final.
#define NORM_TILE_ROWS 32

template <typename T>
__device__ void norm_params(const T* __restrict__ x, const T* __restrict__ g, const typename Acc<T>::type* stats,
                            T* __restrict__ dw, T* __restrict__ db, u64 rows, u64 len, u64 chunk, u64 nchunks,
                            f64* __restrict__ partial) {
    __shared__ f64 pw[NORM_TILE_ROWS][33], pb[NORM_TILE_ROWS][33];
    const u64 tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const u64 tiles = (len + 31) / 32;
    for (u64 blk = blockIdx.x; blk < tiles * nchunks; blk += gridDim.x) {
        const u64 seg = blk % nchunks, col = blk / nchunks * 32 + tx, start = seg * chunk;
        const u64 end = rows - start < chunk ? rows : start + chunk;
        f64 sw = 0.0, sb = 0.0;
        if (col < len) {
            for (u64 r = start + ty; r < end; r += NORM_TILE_ROWS) {
                const f64 gi = (f64)to_acc(g[r * len + col]);
                const f64 xh = ((f64)to_acc(x[r * len + col]) - (f64)stats[2 * r]) * (f64)stats[2 * r + 1];
                sw += gi * xh;
                sb += gi;
            }
        }
        pw[ty][tx] = sw;
        pb[ty][tx] = sb;
        __syncthreads();
        if (ty == 0 && col < len) {
            for (int k = 1; k < NORM_TILE_ROWS; k++) {
                sw += pw[k][tx];
                sb += pb[k][tx];
            }
            if (nchunks == 1) {
                dw[col] = from_acc<T>((typename Acc<T>::type)sw);
                db[col] = from_acc<T>((typename Acc<T>::type)sb);
            } else {
                partial[2 * (col * nchunks + seg)] = sw;
                partial[2 * (col * nchunks + seg) + 1] = sb;
            }
        }
        __syncthreads();
    }
}

// Each column's `nchunks` segment sums from norm_params, added in segment order.
template <typename T>
__device__ void norm_params_final(const f64* __restrict__ partial, T* __restrict__ dw, T* __restrict__ db, u64 len,
                                  u64 nchunks) {
    GRID_LOOP(c, len) {
        f64 sw = 0.0, sb = 0.0;
        for (u64 s = 0; s < nchunks; s++) {
            sw += partial[2 * (c * nchunks + s)];
            sb += partial[2 * (c * nchunks + s) + 1];
        }
        dw[c] = from_acc<T>((typename Acc<T>::type)sw);
        db[c] = from_acc<T>((typename Acc<T>::type)sb);
    }
}

// The gradient of softmax (LOG false) or log_softmax (LOG true) over each row of `len`,
// given its output y and the gradient g of that output: dx = y (g - sum(g y)), or
// dx = g - exp(y) sum(g), one row per group.
template <typename T, bool LOG, typename G>
__device__ void softmax_back_rows(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx, u64 rows,
                                  u64 len) {
    typedef typename Acc<T>::type A;
    for (u64 row = G::first(); row < rows; row += G::step()) {
        const T* yp = y + row * len;
        const T* gp = g + row * len;
        T* q = dx + row * len;
        A s = (A)0;
        for (u64 i = G::rank(); i < len; i += G::size()) s += LOG ? to_acc(gp[i]) : to_acc(gp[i]) * to_acc(yp[i]);
        s = G::all(s, SumOp());
        for (u64 i = G::rank(); i < len; i += G::size()) {
            const A yi = to_acc(yp[i]), gi = to_acc(gp[i]);
            q[i] = from_acc<T>(LOG ? gi - acc_exp(yi) * s : yi * (gi - s));
        }
    }
}

// Values a thread of a block kernel holds of its row: as many as fit with the rest of
// the kernel in 64 registers (blocks of 1024 threads need that) without spilling, as
// ptxas reports for sm_90: 32 (vectors) or 24 (single loads) in f32 (also for the
// 16-bit types, which hold their values as f32), 12 in f64. The
// cuda backend keeps the same numbers (`softmax.rs`, `per_thread`).
#define VEC_REGS(T) (int)(sizeof(typename Acc<T>::type) == 4 ? 32 : 12)
#define ONE_REGS(T) (int)(sizeof(typename Acc<T>::type) == 4 ? 24 : 12)

// Kernels, per element type T (softmax and log_softmax alike):
//   {op}_warp4_T, {op}_warp32_T   rows of at most 128 / 1024 elements, a warp each
//                                 (blocks of (32, rows per block) threads);
//   {op}_vec_T                    aligned rows of at most VEC_REGS(T) * blockDim.x
//                                 elements, a block each, 16-byte vectors;
//   {op}_block_T                  rows of at most ONE_REGS(T) * blockDim.x elements, a
//                                 block each;
//   {op}_loop_T                   rows of any length, a block each, two reads;
//   {op}_cols_T                   over an inner dim, a thread per column;
// each (const T* x, T* out, u64 rows, u64 len), the cols kernel (const T* x, T* out,
// u64 outer, u64 len, u64 inner); and
//   nll_warp_T, nll_block_T       (const T* x, const i32* target, T* loss, u64 rows, u64 c,
//                                 u64* err): cross-entropy's per-row loss, a warp or a
//                                 block per row;
//   nll_back_warp_T, nll_back_block_T (const T* x, const i32* target, const T* g, T* dx,
//                                 u64 rows, u64 c): its gradient given each row's g;
//   layer_norm_{warp,block}_T     (const T* x, const T* w, const T* b, T* y, u64 rows,
//                                 u64 len, f64 eps): each row normalised, then scaled by w
//                                 and shifted by b when not null (a warp per row in blocks
//                                 of (32, rows per block), or a block of whole warps per row);
//   layer_norm_back_{warp,block}_T (const T* x, const T* g, const T* w, T* dx, A* stats,
//                                 u64 rows, u64 len, f64 eps): its gradient with respect to
//                                 x, and each row's mean and rstd into stats when not null;
//   layer_norm_params_T           (const T* x, const T* g, const A* stats, T* dw, T* db,
//                                 u64 rows, u64 len, u64 chunk, u64 nchunks, f64* partial):
//                                 the weight's and bias's gradients, tiles of 32 columns;
//   layer_norm_params_final_T     (const f64* partial, T* dw, T* db, u64 len, u64 nchunks):
//                                 their segments added, when there are several;
//   {op}_back_{warp,block}_T      (const T* y, const T* g, T* dx, u64 rows, u64 len): the
//                                 gradient of softmax or log_softmax over the last dim
//                                 from its output y, a warp or a block per row.
#define SOFTMAX_OP(NAME, LOG, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(128) NAME##_warp4_##T(const T* x, T* out, u64 rows, u64 len) { \
        softmax_regs<T, LOG, WarpRow, false, 4>(x, out, rows, len);                                          \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) NAME##_warp32_##T(const T* x, T* out, u64 rows, u64 len) { \
        softmax_regs<T, LOG, WarpRow, false, 32>(x, out, rows, len);                                         \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) NAME##_vec_##T(const T* x, T* out, u64 rows, u64 len) { \
        softmax_regs<T, LOG, BlockRow, true, VEC_REGS(T)>(x, out, rows, len);                                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) NAME##_block_##T(const T* x, T* out, u64 rows, u64 len) { \
        softmax_regs<T, LOG, BlockRow, false, ONE_REGS(T)>(x, out, rows, len);                               \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) NAME##_loop_##T(const T* x, T* out, u64 rows, u64 len) { \
        softmax_loop<T, LOG>(x, out, rows, len);                                                             \
    }                                                                                                        \
    extern "C" __global__ void NAME##_cols_##T(const T* x, T* out, u64 outer, u64 len, u64 inner) {          \
        softmax_cols<T, LOG>(x, out, outer, len, inner);                                                     \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) NAME##_back_warp_##T(const T* y, const T* g, T* dx, u64 rows, u64 len) { \
        softmax_back_rows<T, LOG, WarpRow>(y, g, dx, rows, len);                                             \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) NAME##_back_block_##T(const T* y, const T* g, T* dx, u64 rows, u64 len) { \
        softmax_back_rows<T, LOG, BlockRow>(y, g, dx, rows, len);                                            \
    }

#define SOFTMAX(T)                                                                                           \
    SOFTMAX_OP(softmax, false, T)                                                                            \
    SOFTMAX_OP(log_softmax, true, T)                                                                         \
    extern "C" __global__ void __launch_bounds__(128) nll_warp_##T(const T* x, const i32* target, T* loss, u64 rows, u64 c, u64* err) { \
        nll_rows<T, WarpRow>(x, target, loss, rows, c, err);                                                 \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) nll_block_##T(const T* x, const i32* target, T* loss, u64 rows, u64 c, u64* err) { \
        nll_rows<T, BlockRow>(x, target, loss, rows, c, err);                                                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) nll_back_warp_##T(const T* x, const i32* target, const T* g, T* dx, u64 rows, u64 c) { \
        nll_back_rows<T, WarpRow>(x, target, g, dx, rows, c);                                                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) nll_back_block_##T(const T* x, const i32* target, const T* g, T* dx, u64 rows, u64 c) { \
        nll_back_rows<T, BlockRow>(x, target, g, dx, rows, c);                                               \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) layer_norm_warp_##T(const T* x, const T* w, const T* b, T* y, \
                                                                         u64 rows, u64 len, f64 eps) {      \
        norm_rows<T, WarpRow>(x, w, b, y, rows, len, eps);                                                   \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) layer_norm_block_##T(const T* x, const T* w, const T* b, T* y, \
                                                                           u64 rows, u64 len, f64 eps) {    \
        norm_rows<T, BlockRow>(x, w, b, y, rows, len, eps);                                                  \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128) layer_norm_back_warp_##T(                               \
        const T* x, const T* g, const T* w, T* dx, Acc<T>::type* stats, u64 rows, u64 len, f64 eps) {        \
        norm_back_rows<T, WarpRow>(x, g, w, dx, stats, rows, len, eps);                                      \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) layer_norm_back_block_##T(                             \
        const T* x, const T* g, const T* w, T* dx, Acc<T>::type* stats, u64 rows, u64 len, f64 eps) {        \
        norm_back_rows<T, BlockRow>(x, g, w, dx, stats, rows, len, eps);                                     \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) layer_norm_params_##T(                                 \
        const T* x, const T* g, const Acc<T>::type* stats, T* dw, T* db, u64 rows, u64 len, u64 chunk,       \
        u64 nchunks, f64* partial) {                                                                         \
        norm_params<T>(x, g, stats, dw, db, rows, len, chunk, nchunks, partial);                             \
    }                                                                                                        \
    extern "C" __global__ void layer_norm_params_final_##T(const f64* partial, T* dw, T* db, u64 len, u64 nchunks) { \
        norm_params_final<T>(partial, dw, db, len, nchunks);                                                 \
    }

SOFTMAX(f32)
SOFTMAX(f64)
SOFTMAX(bf16)
SOFTMAX(f16)
