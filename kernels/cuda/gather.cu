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
