// index_select: rows of a [outer, size, inner] view picked by a list of `count` indices
// along the middle dim, into [outer, count, inner].
//
// A copy moves bytes, not values, so the kernels are per width, not per element type:
// `W` is the widest unit (1, 2, 4, 8 or 16 bytes) that divides a row of `inner`
// elements and the alignment of both buffers, and `inner` counts those units. The
// embedding case (dim 0 of a [vocab, hidden] table) copies whole rows in 16-byte vectors.
//
// Every index is checked where it is read: one outside [0, size) is reported through
// `err` (`report_index`: the first bad position wins) and its row is not copied; the
// host reads the word after the launch and fails the op.

struct alignas(16) U16 { unsigned v[4]; };

// One block per output row when the rows are long (inner >= 32 units): the index is read
// once per row and the threads copy the row's units side by side.
template <typename W>
__device__ void gather_rows(const W* __restrict__ x, const i32* __restrict__ index, W* __restrict__ out, u64 outer,
                            u64 size, u64 count, u64 inner, u64* err) {
    for (u64 r = blockIdx.x; r < outer * count; r += gridDim.x) {
        const u64 o = r / count, j = r % count;
        const i32 t = index[j];
        if (t < 0 || (u64)t >= size) {
            if (threadIdx.x == 0) report_index(err, j, t);
            continue;
        }
        const W* src = x + (o * size + (u64)t) * inner;
        W* dst = out + r * inner;
        for (u64 k = threadIdx.x; k < inner; k += blockDim.x) dst[k] = src[k];
    }
}

// One thread per unit when the rows are short.
template <typename W>
__device__ void gather_flat(const W* __restrict__ x, const i32* __restrict__ index, W* __restrict__ out, u64 outer,
                            u64 size, u64 count, u64 inner, u64* err) {
    GRID_LOOP(u, outer * count * inner) {
        const u64 r = u / inner, k = u % inner;
        const u64 o = r / count, j = r % count;
        const i32 t = index[j];
        if (t < 0 || (u64)t >= size) {
            report_index(err, j, t);
        } else {
            out[u] = x[(o * size + (u64)t) * inner + k];
        }
    }
}

// The check alone, for an empty result (nothing to copy, but the indices still count).
extern "C" __global__ void index_check(const i32* __restrict__ index, u64 count, u64 size, u64* err) {
    GRID_LOOP(j, count) {
        const i32 t = index[j];
        if (t < 0 || (u64)t >= size) report_index(err, j, t);
    }
}

// index_select_{rows,flat}_w{1,2,4,8,16}(const W* x, const i32* index, W* out, u64 outer,
// u64 size, u64 count, u64 inner, u64* err), W the unsigned type of that many bytes.
#define GATHER(BYTES, W)                                                                                     \
    extern "C" __global__ void index_select_rows_w##BYTES(const W* x, const i32* index, W* out, u64 outer,   \
                                                         u64 size, u64 count, u64 inner, u64* err) {         \
        gather_rows<W>(x, index, out, outer, size, count, inner, err);                                       \
    }                                                                                                        \
    extern "C" __global__ void index_select_flat_w##BYTES(const W* x, const i32* index, W* out, u64 outer,   \
                                                         u64 size, u64 count, u64 inner, u64* err) {         \
        gather_flat<W>(x, index, out, outer, size, count, inner, err);                                       \
    }

GATHER(1, u8)
GATHER(2, unsigned short)
GATHER(4, unsigned)
GATHER(8, u64)
GATHER(16, U16)

// index_add: the gradient of index_select. Over a [outer, count, inner] gradient `g`,
// out[o, s, k] = the sum of g[o, c, k] over the positions c whose index is s, added in
// the order of c (a fixed order: the same input gives the same bits), into
// [outer, size, inner]; rows no index picks are 0. A warp owns 32 consecutive elements k
// of one output row (o, s) and scans the indices 32 at a time, one coalesced load and a
// ballot per 32, adding the gradient's rows at the positions that match. No memory is
// addressed by an index's value: one out of [0, size) matches no row.
template <typename T>
__device__ void index_add_rows(const T* __restrict__ g, const i32* __restrict__ index, T* __restrict__ out,
                               u64 outer, u64 size, u64 count, u64 inner) {
    const u64 lane = threadIdx.x & 31, per_row = (inner + 31) / 32;
    const u64 first = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 w = first; w < outer * size * per_row; w += warps) {
        const u64 r = w / per_row, k = (w % per_row) * 32 + lane;
        const u64 o = r / size, s = r % size;
        typename Acc<T>::type acc = 0;
        for (u64 c0 = 0; c0 < count; c0 += 32) {
            const u64 c = c0 + lane;
            const bool hit = c < count && index[c] >= 0 && (u64)index[c] == s;
            for (unsigned m = __ballot_sync(0xffffffffu, hit); m != 0; m &= m - 1) {
                const u64 b = (u64)(__ffs(m) - 1);
                if (k < inner) acc += to_acc<T>(g[(o * count + c0 + b) * inner + k]);
            }
        }
        if (k < inner) out[r * inner + k] = from_acc<T>(acc);
    }
}

// index_add_{f32,f64,bf16,f16}(const T* g, const i32* index, T* out, u64 outer, u64 size,
// u64 count, u64 inner), in blocks of whole warps.
#define INDEX_ADD(T)                                                                                     \
    extern "C" __global__ void index_add_##T(const T* g, const i32* index, T* out, u64 outer, u64 size,  \
                                             u64 count, u64 inner) {                                     \
        index_add_rows<T>(g, index, out, outer, size, count, inner);                                     \
    }

INDEX_ADD(f32)
INDEX_ADD(f64)
INDEX_ADD(bf16)
INDEX_ADD(f16)
